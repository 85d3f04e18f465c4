package render

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/sha512"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
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

// A SOPS encrypter for tests: it writes files the way sops does (see sops_tree.go for the
// format), for keys generated in the test. TestSOPSInteropFixtures proves the decrypter
// agrees with the real sops code; these tests exercise it on content made per test.

// testKeys are an age identity and an OpenPGP entity generated for one test.
type testKeys struct {
	age *age.X25519Identity
	pgp *openpgp.Entity
}

func newTestKeys(t testing.TB) testKeys {
	t.Helper()
	id, err := age.GenerateX25519Identity()
	if err != nil {
		t.Fatal(err)
	}
	e, err := openpgp.NewEntity("converge test", "throwaway", "test@example.invalid", nil)
	if err != nil {
		t.Fatal(err)
	}
	return testKeys{age: id, pgp: e}
}

// secretData is the decryption Secret's data holding these keys.
func (k testKeys) secretData(t testing.TB) map[string][]byte {
	t.Helper()
	var pgpKey bytes.Buffer
	w, err := pgparmor.Encode(&pgpKey, openpgp.PrivateKeyType, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := k.pgp.SerializePrivate(w, nil); err != nil {
		t.Fatal(err)
	}
	_ = w.Close()
	return map[string][]byte{
		"identity.agekey": []byte("# test key\n" + k.age.String() + "\n"),
		"sops.asc":        pgpKey.Bytes(),
	}
}

func (k testKeys) fingerprint() string { return fmt.Sprintf("%X", k.pgp.PrimaryKey.Fingerprint) }

// sopsEncrypter encrypts for the given recipients.
type sopsEncrypter struct {
	age            []*age.X25519Recipient
	pgp            []*openpgp.Entity
	encryptedRegex string
}

// encrypt returns plain, a file named name, encrypted as sops would.
func (e sopsEncrypter) encrypt(t testing.TB, name string, plain []byte) []byte {
	t.Helper()
	f := sopsFormatOf(name)
	docs := plainDocs(t, f, plain)
	key := make([]byte, 32)
	_, _ = rand.Read(key)
	meta := &sopsMetadata{EncryptedRegex: e.encryptedRegex}
	rules, err := newEncryptionRules(meta)
	if err != nil {
		t.Fatal(err)
	}
	h := sha512.New()
	enc := func(v any, path []string) any {
		if !rules.encrypted(path) {
			b, _ := leafBytes(v)
			h.Write(b)
			return v
		}
		b, err := leafBytes(v)
		if err != nil {
			t.Fatal(err)
		}
		h.Write(b)
		return encryptValue(t, v, key, strings.Join(path, ":")+":")
	}
	for i, d := range docs {
		docs[i] = mapLeaves(d, nil, enc).(*sopsMap)
	}
	lm := time.Now().UTC().Format(time.RFC3339)
	mac := encryptValue(t, fmt.Sprintf("%X", h.Sum(nil)), key, lm)
	return e.emit(t, f, docs, e.metaMap(t, key, lm, mac))
}

func plainDocs(t testing.TB, f sopsFormat, plain []byte) []*sopsMap {
	t.Helper()
	switch f {
	case formatYAML:
		var out []*sopsMap
		dec := yaml.NewDecoder(bytes.NewReader(plain))
		for {
			var n yaml.Node
			if err := dec.Decode(&n); errors.Is(err, io.EOF) {
				return out
			} else if err != nil {
				t.Fatal(err)
			}
			v, err := yamlTree(n.Content[0], 1, 100)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, v.(*sopsMap))
		}
	case formatJSON:
		dec := json.NewDecoder(bytes.NewReader(plain))
		dec.UseNumber()
		v, err := jsonTree(dec, 1, 100)
		if err != nil {
			t.Fatal(err)
		}
		return []*sopsMap{v.(*sopsMap)}
	case formatDotenv:
		m := &sopsMap{}
		for _, l := range strings.Split(strings.TrimSpace(string(plain)), "\n") {
			k, v, _ := strings.Cut(l, "=")
			m.keys, m.vals = append(m.keys, k), append(m.vals, strings.ReplaceAll(v, `\n`, "\n"))
		}
		return []*sopsMap{m}
	}
	return []*sopsMap{{keys: []string{"data"}, vals: []any{string(plain)}}}
}

// mapLeaves rebuilds v with every leaf replaced by f(leaf, path).
func mapLeaves(v any, path []string, f func(any, []string) any) any {
	switch x := v.(type) {
	case *sopsMap:
		out := &sopsMap{}
		for i, k := range x.keys {
			out.keys = append(out.keys, k)
			out.vals = append(out.vals, mapLeaves(x.vals[i], append(path[:len(path):len(path)], k), f))
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = mapLeaves(e, path, f)
		}
		return out
	case nil:
		return nil
	}
	return f(v, path)
}

func encryptValue(t testing.TB, v any, key []byte, ad string) string {
	t.Helper()
	var typ string
	switch v.(type) {
	case string:
		typ = "str"
	case int:
		typ = "int"
	case float64:
		typ = "float"
	case bool:
		typ = "bool"
	default:
		t.Fatalf("cannot encrypt %T", v)
	}
	plain, _ := leafBytes(v)
	if len(plain) == 0 && typ == "str" {
		return ""
	}
	block, _ := aes.NewCipher(key)
	gcm, _ := cipher.NewGCMWithNonceSize(block, 32)
	iv := make([]byte, 32)
	_, _ = rand.Read(iv)
	out := gcm.Seal(nil, iv, plain, []byte(ad))
	b64 := base64.StdEncoding.EncodeToString
	return fmt.Sprintf("ENC[AES256_GCM,data:%s,iv:%s,tag:%s,type:%s]", b64(out[:len(out)-16]), b64(iv), b64(out[len(out)-16:]), typ)
}

// metaMap is the sops metadata: the data key encrypted for every recipient, and the MAC.
func (e sopsEncrypter) metaMap(t testing.TB, key []byte, lm, mac string) *sopsMap {
	t.Helper()
	m := &sopsMap{}
	add := func(k string, v any) { m.keys, m.vals = append(m.keys, k), append(m.vals, v) }
	var ages, pgps []any
	for _, r := range e.age {
		var buf bytes.Buffer
		aw := armor.NewWriter(&buf)
		w, err := age.Encrypt(aw, r)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = w.Write(key)
		_ = w.Close()
		_ = aw.Close()
		ages = append(ages, &sopsMap{keys: []string{"recipient", "enc"}, vals: []any{r.String(), buf.String()}})
	}
	for _, ent := range e.pgp {
		var buf bytes.Buffer
		aw, _ := pgparmor.Encode(&buf, "PGP MESSAGE", nil)
		w, err := openpgp.Encrypt(aw, []*openpgp.Entity{ent}, nil, &openpgp.FileHints{IsBinary: true}, nil)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = w.Write(key)
		_ = w.Close()
		_ = aw.Close()
		pgps = append(pgps, &sopsMap{keys: []string{"fp", "enc"}, vals: []any{fmt.Sprintf("%X", ent.PrimaryKey.Fingerprint), buf.String()}})
	}
	if len(ages) > 0 {
		add("age", ages)
	}
	if len(pgps) > 0 {
		add("pgp", pgps)
	}
	add("lastmodified", lm)
	add("mac", mac)
	if e.encryptedRegex != "" {
		add("encrypted_regex", e.encryptedRegex)
	}
	add("version", "3.13.3")
	return m
}

func (e sopsEncrypter) emit(t testing.TB, f sopsFormat, docs []*sopsMap, meta *sopsMap) []byte {
	t.Helper()
	docs[0].keys, docs[0].vals = append(docs[0].keys, "sops"), append(docs[0].vals, meta)
	switch f {
	case formatYAML:
		b, err := emitYAML(docs)
		if err != nil {
			t.Fatal(err)
		}
		return b
	case formatDotenv:
		var buf bytes.Buffer
		flat := docs[0].without("sops")
		for i, k := range flat.keys {
			fmt.Fprintf(&buf, "%s=%s\n", k, strings.ReplaceAll(fmt.Sprint(flat.vals[i]), "\n", `\n`))
		}
		flattenMeta(&buf, "sops_", meta)
		return buf.Bytes()
	}
	var buf bytes.Buffer
	if err := emitJSON(&buf, docs[0]); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func flattenMeta(buf *bytes.Buffer, prefix string, v any) {
	switch x := v.(type) {
	case *sopsMap:
		for i, k := range x.keys {
			p := prefix + k
			if prefix != "sops_" {
				p = prefix + "__map_" + k
			}
			flattenMeta(buf, p, x.vals[i])
		}
	case []any:
		for i, e := range x {
			flattenMeta(buf, prefix+"__list_"+strconv.Itoa(i), e)
		}
	default:
		fmt.Fprintf(buf, "%s=%s\n", prefix, strings.ReplaceAll(fmt.Sprint(x), "\n", `\n`))
	}
}
