package render

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/sha512"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"hash"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// The SOPS file format, decrypted here without the sops module (see sops.go for why).
//
// A SOPS file is a tree (YAML, JSON or dotenv) whose leaves are encrypted one by one with a
// random 256-bit data key: "ENC[AES256_GCM,data:…,iv:…,tag:…,type:…]", the additional
// data being the path of mapping keys down to the leaf, each followed by ":" (sequences
// add nothing). The data key itself is encrypted for every recipient (age, OpenPGP, cloud
// KMS) under the tree's "sops" metadata. The MAC is SHA-512 over the plaintext leaves in
// order (all leaves, or the encrypted ones only with mac_only_encrypted), as upper-case
// hex, encrypted with the data key and metadata.lastmodified (RFC 3339) as additional data.

// sopsMap is an ordered mapping: SOPS walks keys in file order, and so must the MAC.
type sopsMap struct {
	keys []string
	vals []any
}

func (m *sopsMap) get(key string) (any, bool) {
	for i, k := range m.keys {
		if k == key {
			return m.vals[i], true
		}
	}
	return nil, false
}

// without returns m less key.
func (m *sopsMap) without(key string) *sopsMap {
	out := &sopsMap{}
	for i, k := range m.keys {
		if k != key {
			out.keys = append(out.keys, k)
			out.vals = append(out.vals, m.vals[i])
		}
	}
	return out
}

// sopsComment is a leaf that decrypted to a comment: it is neither hashed nor emitted.
type sopsComment struct{}

// macOnlyEncryptedInit starts the MAC when only encrypted values are hashed (sha256("sops")).
var macOnlyEncryptedInit = []byte{0x8a, 0x3f, 0xd2, 0xad, 0x54, 0xce, 0x66, 0x52, 0x7b, 0x10, 0x34, 0xf3, 0xd1, 0x47, 0xbe, 0xb, 0xb, 0x97, 0x5b, 0x3b, 0xf4, 0x4f, 0x72, 0xc6, 0xfd, 0xad, 0xec, 0x81, 0x76, 0xf2, 0x7d, 0x69}

// encryptionRules say which leaves SOPS encrypted, from the metadata's suffix and regex settings.
type encryptionRules struct {
	unencryptedSuffix, encryptedSuffix string
	unencryptedRegex, encryptedRegex   *regexp.Regexp
}

func newEncryptionRules(m *sopsMetadata) (encryptionRules, error) {
	r := encryptionRules{unencryptedSuffix: m.UnencryptedSuffix, encryptedSuffix: m.EncryptedSuffix}
	if m.UnencryptedCommentRegex != "" || m.EncryptedCommentRegex != "" {
		return r, errors.New("encrypted_comment_regex and unencrypted_comment_regex are not supported")
	}
	for _, x := range []struct {
		expr string
		to   **regexp.Regexp
	}{{m.UnencryptedRegex, &r.unencryptedRegex}, {m.EncryptedRegex, &r.encryptedRegex}} {
		if x.expr == "" {
			continue
		}
		re, err := regexp.Compile(x.expr)
		if err != nil {
			return r, fmt.Errorf("invalid regular expression in the sops metadata: %w", err)
		}
		*x.to = re
	}
	return r, nil
}

// encrypted mirrors sops' Tree.shouldBeEncrypted, without the comment rules.
func (r encryptionRules) encrypted(path []string) bool {
	enc := r.unencryptedSuffix == "" || !anyKey(path, func(k string) bool { return strings.HasSuffix(k, r.unencryptedSuffix) })
	if r.encryptedSuffix != "" {
		enc = anyKey(path, func(k string) bool { return strings.HasSuffix(k, r.encryptedSuffix) })
	}
	if r.unencryptedRegex != nil && anyKey(path, r.unencryptedRegex.MatchString) {
		enc = false
	}
	if r.encryptedRegex != nil {
		enc = anyKey(path, r.encryptedRegex.MatchString)
	}
	return enc
}

func anyKey(path []string, f func(string) bool) bool {
	for _, k := range path {
		if f(k) {
			return true
		}
	}
	return false
}

// treeDecrypter decrypts a tree in place and computes its MAC.
type treeDecrypter struct {
	key     []byte
	rules   encryptionRules
	macOnly bool
	hash    hash.Hash
	// plaintexts are the values decrypted, as text, for redaction.
	plaintexts []string
}

func newTreeDecrypter(key []byte, m *sopsMetadata) (*treeDecrypter, error) {
	rules, err := newEncryptionRules(m)
	if err != nil {
		return nil, err
	}
	d := &treeDecrypter{key: key, rules: rules, macOnly: m.MACOnlyEncrypted, hash: sha512.New()}
	if d.macOnly {
		d.hash.Write(macOnlyEncryptedInit)
	}
	return d, nil
}

// walk decrypts v, found at path, and returns its plaintext.
func (d *treeDecrypter) walk(v any, path []string) (any, error) {
	switch x := v.(type) {
	case *sopsMap:
		out := &sopsMap{}
		for i, k := range x.keys {
			nv, err := d.walk(x.vals[i], append(path[:len(path):len(path)], k))
			if err != nil {
				return nil, err
			}
			if _, c := nv.(sopsComment); !c {
				out.keys = append(out.keys, k)
				out.vals = append(out.vals, nv)
			}
		}
		return out, nil
	case []any:
		out := make([]any, 0, len(x))
		for _, e := range x {
			nv, err := d.walk(e, path)
			if err != nil {
				return nil, err
			}
			if _, c := nv.(sopsComment); !c {
				out = append(out, nv)
			}
		}
		return out, nil
	case nil:
		return nil, nil
	}
	return d.leaf(v, path)
}

func (d *treeDecrypter) leaf(v any, path []string) (any, error) {
	enc := d.rules.encrypted(path)
	out := v
	if enc {
		s, ok := v.(string)
		if !ok {
			return nil, fmt.Errorf("value at %s is not encrypted", pathString(path))
		}
		var err error
		if out, err = decryptValue(s, d.key, strings.Join(path, ":")+":"); err != nil {
			return nil, fmt.Errorf("value at %s: %w", pathString(path), err)
		}
		if b, err := leafBytes(out); err == nil {
			d.plaintexts = append(d.plaintexts, string(b), strings.TrimSpace(string(b)))
			d.plaintexts = append(d.plaintexts, strings.Split(string(b), "\n")...)
		}
	}
	if _, c := out.(sopsComment); c || (d.macOnly && !enc) {
		return out, nil
	}
	b, err := leafBytes(out)
	if err != nil {
		return nil, fmt.Errorf("value at %s: %w", pathString(path), err)
	}
	d.hash.Write(b)
	return out, nil
}

// mac is the MAC of the leaves walked so far, as sops writes it.
func (d *treeDecrypter) mac() string {
	return fmt.Sprintf("%X", d.hash.Sum(nil))
}

// checkMAC compares the computed MAC with the one stored, encrypted, in the metadata.
func (d *treeDecrypter) checkMAC(m *sopsMetadata) error {
	lm, err := time.Parse(time.RFC3339, m.LastModified)
	if err != nil {
		return fmt.Errorf("invalid lastmodified in the sops metadata")
	}
	stored, err := decryptValue(m.MAC, d.key, lm.Format(time.RFC3339))
	if err != nil {
		return fmt.Errorf("the MAC cannot be decrypted: %w", err)
	}
	s, _ := stored.(string)
	if subtle.ConstantTimeCompare([]byte(s), []byte(d.mac())) != 1 {
		return errors.New("MAC mismatch: the file was changed after it was encrypted")
	}
	return nil
}

func pathString(path []string) string {
	if len(path) == 0 {
		return "the top level"
	}
	return strings.Join(path, ".")
}

// encValue matches an encrypted leaf (greedy like sops' own expression).
var encValue = regexp.MustCompile(`^ENC\[AES256_GCM,data:(.+),iv:(.+),tag:(.+),type:(.+)\]`)

// decryptValue decrypts one "ENC[AES256_GCM,…]" leaf into its typed plaintext. Its
// errors never quote the value.
func decryptValue(s string, key []byte, additionalData string) (any, error) {
	if s == "" {
		return "", nil
	}
	m := encValue.FindStringSubmatch(s)
	if m == nil {
		return nil, errors.New("not in the sops ENC[AES256_GCM,…] format")
	}
	var parts [3][]byte
	for i := range parts {
		b, err := base64.StdEncoding.DecodeString(m[i+1])
		if err != nil {
			return nil, errors.New("invalid base64 in the encrypted value")
		}
		parts[i] = b
	}
	data, iv, tag := parts[0], parts[1], parts[2]
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	if len(iv) == 0 {
		return nil, errors.New("empty iv")
	}
	gcm, err := cipher.NewGCMWithNonceSize(block, len(iv))
	if err != nil {
		return nil, err
	}
	plain, err := gcm.Open(nil, iv, append(data, tag...), []byte(additionalData))
	if err != nil {
		return nil, errors.New("authentication failed (the value was tampered with, moved, or the data key is wrong)")
	}
	return typedPlaintext(plain, m[4])
}

func typedPlaintext(plain []byte, typ string) (any, error) {
	s := string(plain)
	var v any
	var err error
	switch typ {
	case "str":
		v = s
	case "int":
		v, err = strconv.Atoi(s)
	case "float":
		v, err = strconv.ParseFloat(s, 64)
	case "bool":
		v, err = strconv.ParseBool(s)
	case "bytes":
		v = plain
	case "time":
		var t time.Time
		err = t.UnmarshalText(plain)
		v = t
	case "comment":
		v = sopsComment{}
	default:
		return nil, fmt.Errorf("unknown value type %q", typ)
	}
	if err != nil {
		return nil, fmt.Errorf("the plaintext is not a valid %s", typ)
	}
	return v, nil
}

// leafBytes is sops.ToBytes: how a leaf enters the MAC.
func leafBytes(v any) ([]byte, error) {
	switch x := v.(type) {
	case string:
		return []byte(x), nil
	case []byte:
		return x, nil
	case int:
		return []byte(strconv.Itoa(x)), nil
	case int64:
		return []byte(strconv.FormatInt(x, 10)), nil
	case uint64:
		return []byte(strconv.FormatUint(x, 10)), nil
	case float64:
		return []byte(strconv.FormatFloat(x, 'f', -1, 64)), nil
	case bool:
		if x {
			return []byte("True"), nil
		}
		return []byte("False"), nil
	case time.Time:
		return x.MarshalText()
	}
	return nil, fmt.Errorf("unsupported value type %T", v)
}
