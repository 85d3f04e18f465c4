// Package sopstest makes SOPS-encrypted YAML for tests: throwaway age and OpenPGP keys,
// the decryption Secret holding them, and manifests encrypted for them the way sops
// writes them (values of data and stringData encrypted, as with
// encrypted_regex: ^(data|stringData)$). The render package's own tests, and files
// encrypted by the real sops code, prove the decrypter agrees with sops.
package sopstest

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/sha512"
	"encoding/base64"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"filippo.io/age"
	"filippo.io/age/armor"
	"github.com/ProtonMail/go-crypto/openpgp"
	pgparmor "github.com/ProtonMail/go-crypto/openpgp/armor"
	"go.yaml.in/yaml/v3"
)

// Keys are an age identity and an OpenPGP entity made for one test.
type Keys struct {
	Age *age.X25519Identity
	PGP *openpgp.Entity
}

// NewKeys generates throwaway keys.
func NewKeys(t testing.TB) Keys {
	t.Helper()
	id, err := age.GenerateX25519Identity()
	if err != nil {
		t.Fatal(err)
	}
	e, err := openpgp.NewEntity("converge test", "throwaway", "test@example.invalid", nil)
	if err != nil {
		t.Fatal(err)
	}
	return Keys{Age: id, PGP: e}
}

// SecretData is the data of a decryption Secret holding both keys.
func (k Keys) SecretData(t testing.TB) map[string][]byte {
	t.Helper()
	var buf bytes.Buffer
	w, err := pgparmor.Encode(&buf, openpgp.PrivateKeyType, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := k.PGP.SerializePrivate(w, nil); err != nil {
		t.Fatal(err)
	}
	_ = w.Close()
	return map[string][]byte{"identity.agekey": []byte(k.Age.String() + "\n"), "sops.asc": buf.Bytes()}
}

// Fingerprint is the OpenPGP key's fingerprint, as sops records it.
func (k Keys) Fingerprint() string { return fmt.Sprintf("%X", k.PGP.PrimaryKey.Fingerprint) }

const encryptedRegex = "^(data|stringData)$"

// EncryptYAML encrypts a YAML stream for the age recipient (and the OpenPGP key when
// withPGP), as `sops -e --encrypted-regex '^(data|stringData)$'` would.
func (k Keys) EncryptYAML(t testing.TB, plain string, withPGP bool) string {
	t.Helper()
	key := make([]byte, 32)
	_, _ = rand.Read(key)
	h := sha512.New()
	dec := yaml.NewDecoder(strings.NewReader(plain))
	var docs []*yaml.Node
	for {
		var n yaml.Node
		if err := dec.Decode(&n); err != nil {
			break
		}
		e := &encrypter{t: t, key: key, hash: h, re: regexp.MustCompile(encryptedRegex)}
		e.walk(n.Content[0], nil)
		docs = append(docs, &n)
	}
	lm := time.Now().UTC().Format(time.RFC3339)
	mac := encryptValue(t, fmt.Sprintf("%X", h.Sum(nil)), "str", key, lm)
	meta := k.metadata(t, key, lm, mac, withPGP)
	docs[0].Content[0].Content = append(docs[0].Content[0].Content, scalar("sops"), meta)
	var out bytes.Buffer
	enc := yaml.NewEncoder(&out)
	for _, d := range docs {
		if err := enc.Encode(d); err != nil {
			t.Fatal(err)
		}
	}
	_ = enc.Close()
	return out.String()
}

type encrypter struct {
	t    testing.TB
	key  []byte
	hash interface{ Write([]byte) (int, error) }
	re   *regexp.Regexp
}

func (e *encrypter) walk(n *yaml.Node, path []string) {
	switch n.Kind {
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			e.walk(n.Content[i+1], append(path[:len(path):len(path)], n.Content[i].Value))
		}
	case yaml.SequenceNode:
		for _, c := range n.Content {
			e.walk(c, path)
		}
	case yaml.ScalarNode:
		var v any
		if err := n.Decode(&v); err != nil || v == nil {
			return
		}
		plain, typ := leaf(v)
		_, _ = e.hash.Write([]byte(plain))
		for _, p := range path {
			if e.re.MatchString(p) {
				*n = *scalar(encryptValue(e.t, plain, typ, e.key, strings.Join(path, ":")+":"))
				return
			}
		}
	}
}

func leaf(v any) (string, string) {
	switch x := v.(type) {
	case int:
		return strconv.Itoa(x), "int"
	case float64:
		return strconv.FormatFloat(x, 'f', -1, 64), "float"
	case bool:
		if x {
			return "True", "bool"
		}
		return "False", "bool"
	}
	return fmt.Sprint(v), "str"
}

func scalar(s string) *yaml.Node { return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: s} }

func encryptValue(t testing.TB, plain, typ string, key []byte, ad string) string {
	t.Helper()
	if plain == "" && typ == "str" {
		return ""
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		t.Fatal(err)
	}
	gcm, _ := cipher.NewGCMWithNonceSize(block, 32)
	iv := make([]byte, 32)
	_, _ = rand.Read(iv)
	out := gcm.Seal(nil, iv, []byte(plain), []byte(ad))
	b64 := base64.StdEncoding.EncodeToString
	return fmt.Sprintf("ENC[AES256_GCM,data:%s,iv:%s,tag:%s,type:%s]", b64(out[:len(out)-16]), b64(iv), b64(out[len(out)-16:]), typ)
}

// metadata is the sops mapping: the data key for each recipient, the MAC and the rules.
func (k Keys) metadata(t testing.TB, key []byte, lm, mac string, withPGP bool) *yaml.Node {
	t.Helper()
	var ab bytes.Buffer
	aw := armor.NewWriter(&ab)
	w, err := age.Encrypt(aw, k.Age.Recipient())
	if err != nil {
		t.Fatal(err)
	}
	_, _ = w.Write(key)
	_ = w.Close()
	_ = aw.Close()
	m := map[string]any{
		"age":             []map[string]string{{"recipient": k.Age.Recipient().String(), "enc": ab.String()}},
		"lastmodified":    lm,
		"mac":             mac,
		"encrypted_regex": encryptedRegex,
		"version":         "3.13.3",
	}
	if withPGP {
		var pb bytes.Buffer
		pw, _ := pgparmor.Encode(&pb, "PGP MESSAGE", nil)
		w, err := openpgp.Encrypt(pw, []*openpgp.Entity{k.PGP}, nil, &openpgp.FileHints{IsBinary: true}, nil)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = w.Write(key)
		_ = w.Close()
		_ = pw.Close()
		m["pgp"] = []map[string]string{{"fp": k.Fingerprint(), "enc": pb.String()}}
	}
	n := &yaml.Node{}
	if err := n.Encode(m); err != nil {
		t.Fatal(err)
	}
	return n
}
