package render

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"

	"filippo.io/age"
	"github.com/ProtonMail/go-crypto/openpgp"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
)

const sopsSecretYAML = `apiVersion: v1
kind: Secret
metadata:
  name: db
stringData:
  password: yaml-plaintext-hunter2
data:
  token: ` + "dG9rZW4tcGxhaW50ZXh0LXZhbHVl" + `
`

const sopsConfigJSON = `{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cfg"},
 "data": {"endpoint": "json-plaintext-endpoint", "retries": "3"}}`

// testKeyring is the Keys a SyncTarget's decryption Secret holding k would give.
func testKeyring(t testing.TB, k testKeys) *Keys {
	t.Helper()
	keys, err := ParseKeys(k.secretData(t))
	if err != nil {
		t.Fatal(err)
	}
	return keys
}

func ageOnly(k testKeys) sopsEncrypter {
	return sopsEncrypter{age: []*age.X25519Recipient{k.age.Recipient()}, encryptedRegex: "^(data|stringData)$"}
}

func pgpOnly(k testKeys) sopsEncrypter {
	return sopsEncrypter{pgp: []*openpgp.Entity{k.pgp}}
}

func byName(objs []*unstructured.Unstructured, name string) *unstructured.Unstructured {
	for _, o := range objs {
		if o.GetName() == name {
			return o
		}
	}
	return nil
}

func TestSOPSPlainManifests(t *testing.T) {
	k := newTestKeys(t)
	root, _ := newRepo(t)
	write(t, root, "app/secret.yaml", string(ageOnly(k).encrypt(t, "secret.yaml", []byte(sopsSecretYAML))))
	write(t, root, "app/config.json", string(pgpOnly(k).encrypt(t, "config.json", []byte(sopsConfigJSON))))
	write(t, root, "app/plain.yaml", cm("plain", "sops: {mac: x, lastmodified: y}"))

	g := NewWithT(t)
	res, err := render(Options{Root: root, Path: "app", Decryption: testKeyring(t, k)})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(ids(res.Objects)).To(ConsistOf("ConfigMap cfg", "ConfigMap plain", "Secret db"))
	secret := byName(res.Objects, "db")
	g.Expect(secret.Object["stringData"]).To(Equal(map[string]any{"password": "yaml-plaintext-hunter2"}))
	g.Expect(secret.Object["data"]).To(Equal(map[string]any{"token": "dG9rZW4tcGxhaW50ZXh0LXZhbHVl"}))
	g.Expect(secret.Object).NotTo(HaveKey("sops"))
	g.Expect(byName(res.Objects, "cfg").Object["data"]).To(Equal(map[string]any{"endpoint": "json-plaintext-endpoint", "retries": "3"}))
	g.Expect(byName(res.Objects, "plain").Object["data"]).To(Equal(map[string]any{"key": "sops: {mac: x, lastmodified: y}"}),
		"a file that is not SOPS-encrypted passes untouched")
}

func TestSOPSKustomizeSecretGenerator(t *testing.T) {
	k := newTestKeys(t)
	root, _ := newRepo(t)
	write(t, root, "app/kustomization.yaml", `resources: [secret.yaml]
secretGenerator:
- name: generated
  envs: [app.env]
  files: [tls.crt]
generatorOptions: {disableNameSuffixHash: true}
`)
	write(t, root, "app/secret.yaml", string(ageOnly(k).encrypt(t, "secret.yaml", []byte(sopsSecretYAML))))
	write(t, root, "app/app.env", string(pgpOnly(k).encrypt(t, "app.env", []byte("DB_PASSWORD=env-plaintext-pw\nDB_USER=admin\n"))))
	write(t, root, "app/tls.crt", string(ageOnly(k).encrypt(t, "tls.crt", []byte("binary-plaintext-cert\n"))))

	g := NewWithT(t)
	res, err := render(Options{Root: root, Path: "app", Decryption: testKeyring(t, k)})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(res.Kustomized).To(BeTrue())
	gen := byName(res.Objects, "generated")
	g.Expect(gen).NotTo(BeNil())
	b64 := base64.StdEncoding.EncodeToString
	g.Expect(gen.Object["data"]).To(Equal(map[string]any{
		"DB_PASSWORD": b64([]byte("env-plaintext-pw")), "DB_USER": b64([]byte("admin")),
		"tls.crt": b64([]byte("binary-plaintext-cert\n")),
	}))
	g.Expect(byName(res.Objects, "db").Object["stringData"]).To(Equal(map[string]any{"password": "yaml-plaintext-hunter2"}))
}

func TestSOPSFailures(t *testing.T) {
	k, other := newTestKeys(t), newTestKeys(t)
	enc := string(ageOnly(k).encrypt(t, "secret.yaml", []byte(sopsSecretYAML)))
	tests := []struct {
		name    string
		content string
		keys    *Keys
		want    []string
	}{{
		name: "no spec.decryption", content: enc, keys: nil,
		want: []string{"render app/secret.yaml", "SOPS-encrypted", "no decryption is configured (spec.decryption)"},
	}, {
		name: "MAC mismatch", content: strings.Replace(enc, "name: db", "name: dc", 1), keys: testKeyring(t, k),
		want: []string{"render app/secret.yaml", "MAC mismatch"},
	}, {
		name: "tampered value", content: tamperValue(t, enc, "password: "), keys: testKeyring(t, k),
		want: []string{"render app/secret.yaml", "value at stringData.password", "authentication failed"},
	}, {
		name: "value moved under another key", content: strings.Replace(enc, "password: ENC[", "pass: ENC[", 1), keys: testKeyring(t, k),
		want: []string{"render app/secret.yaml", "value at stringData.pass", "authentication failed"},
	}, {
		name: "encrypted for another key", content: enc, keys: testKeyring(t, other),
		want: []string{"render app/secret.yaml", "no key for this file", "age recipients " + k.age.Recipient().String(),
			"the decryption Secret holds age recipients " + other.age.Recipient().String(), "OpenPGP fingerprints " + other.fingerprint()},
	}, {
		name: "pgp file, no pgp key", content: string(pgpOnly(k).encrypt(t, "secret.yaml", []byte(sopsSecretYAML))), keys: &Keys{},
		want: []string{"render app/secret.yaml", "OpenPGP fingerprints " + k.fingerprint(), "the decryption Secret holds no keys"},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			root, _ := newRepo(t)
			write(t, root, "app/secret.yaml", tt.content)
			for _, path := range []string{"app", "kust"} {
				write(t, root, "kust/kustomization.yaml", "resources: [../app/secret.yaml]\n")
				res, err := render(Options{Root: root, Path: path, Decryption: tt.keys})
				expectFailure(g, res, err, ErrDecryption, "")
				for _, w := range tt.want {
					g.Expect(err.Error()).To(ContainSubstring(w))
				}
				for _, secret := range []string{"hunter2", "AGE-SECRET-KEY", "PRIVATE KEY", "ENC["} {
					g.Expect(err.Error()).NotTo(ContainSubstring(secret))
				}
			}
		})
	}
}

// tamperValue flips one byte of the ciphertext of the value after marker.
func tamperValue(t testing.TB, s, marker string) string {
	t.Helper()
	i := strings.Index(s, marker+"ENC[AES256_GCM,data:")
	if i < 0 {
		t.Fatalf("no %q in the file", marker)
	}
	j := i + len(marker+"ENC[AES256_GCM,data:")
	c := byte('A')
	if s[j] == 'A' {
		c = 'B'
	}
	return s[:j] + string(c) + s[j+1:]
}

func TestParseKeys(t *testing.T) {
	k := newTestKeys(t)
	data := k.secretData(t)
	tests := []struct {
		name string
		data map[string][]byte
		want string
	}{
		{"bad age identity", map[string][]byte{"x.agekey": []byte("AGE-SECRET-KEY-1NOTAKEYATALL")}, `key "x.agekey": not an age identity file`},
		{"bad pgp key", map[string][]byte{"x.asc": []byte("-----BEGIN PGP PRIVATE KEY BLOCK-----\nnope\n")}, `key "x.asc": not an ASCII-armored OpenPGP key`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			_, err := ParseKeys(tt.data)
			g.Expect(err).To(MatchError(ContainSubstring(tt.want)))
			g.Expect(err).To(MatchError(ErrDecryption))
			g.Expect(err.Error()).NotTo(ContainSubstring("NOTAKEYATALL"))
		})
	}
	g := NewWithT(t)
	keys, err := ParseKeys(data)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(keys.String()).To(Equal("age recipients " + k.age.Recipient().String() + "; OpenPGP fingerprints " + k.fingerprint()))
}

// Kustomize quotes inputs in some of its errors: every value decrypted from a SOPS file,
// a ConfigMap's too, is redacted from them like a Secret's.
func TestSOPSValuesAreRedacted(t *testing.T) {
	g := NewWithT(t)
	k := newTestKeys(t)
	root, _ := newRepo(t)
	write(t, root, "cm.yaml", string(pgpOnly(k).encrypt(t, "cm.yaml", []byte(cm("cfg", "redact-me-plaintext")))))
	r, err := os.OpenRoot(root)
	g.Expect(err).NotTo(HaveOccurred())
	defer func() { _ = r.Close() }()
	cfs := newConfinedFS(t.Context(), r, DefaultLimits())
	cfs.keys = testKeyring(t, k)
	res, err := cfs.resolve("cm.yaml")
	g.Expect(err).NotTo(HaveOccurred())
	b, err := cfs.readFile(res, "cm.yaml")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(b)).To(ContainSubstring("redact-me-plaintext"))
	g.Expect(redact(`kustomize: "redact-me-plaintext"`, cfs.secretValues())).To(Equal(`kustomize: "[redacted]"`))
}

// A file with sops metadata is never passed on as it is: malformed, it fails.
func TestSOPSMalformedFilesFail(t *testing.T) {
	k := newTestKeys(t)
	enc := string(ageOnly(k).encrypt(t, "secret.yaml", []byte(sopsSecretYAML)))
	tests := []struct {
		name, file, content, want string
	}{
		{"metadata of the wrong shape", "s.yaml", "a: b\nsops:\n  mac: x\n  lastmodified: y\n  age: not-a-list\n", "invalid sops metadata"},
		{"empty mac", "s.json", `{"a": 1, "sops": {"mac": "", "lastmodified": ""}}`, "empty mac or lastmodified"},
		{"metadata in a later document", "s.yaml", "a: b\n---\n" + enc, "not in the first document"},
		{"a document that is not a mapping", "s.yaml", enc + "---\n- a\n", "a document is not a mapping"},
		{"a plaintext value where the rules say encrypted", "s.yaml",
			strings.Replace(enc, "stringData:\n  password: ENC[", "stringData:\n  plain: added-by-hand\n  password: ENC[", 1),
			"value at stringData.plain: not in the sops ENC[AES256_GCM,…] format"},
		{"a dotenv line without =", "a.env", "A=ENC[AES256_GCM,data:x,iv:y,tag:z,type:str]\nnot a pair\nsops_mac=x\nsops_lastmodified=y\n", "line 2 is not KEY=VALUE"},
		{"comment rules", "s.yaml", strings.Replace(enc, "sops:\n", "sops:\n  encrypted_comment_regex: x\n", 1), "encrypted_comment_regex and unencrypted_comment_regex are not supported"},
		{"too many recipients", "s.yaml", strings.Replace(enc, "sops:\n", "sops:\n  pgp:"+strings.Repeat("\n    - {fp: X, enc: Y}", 65)+"\n", 1),
			"encrypted for 66 age and OpenPGP recipients, more than 64"},
		{"key groups", "s.yaml", strings.Replace(enc, "sops:\n", "sops:\n  key_groups: [{}]\n", 1), "key groups (Shamir secret sharing) are not supported"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			out, _, err := decryptSOPS(tt.file, []byte(tt.content), testKeyring(t, k), DefaultLimits())
			g.Expect(out).To(BeNil())
			g.Expect(err).To(MatchError(ErrDecryption))
			g.Expect(err).To(MatchError(ContainSubstring(tt.want)))
			g.Expect(err.Error()).NotTo(ContainSubstring("added-by-hand"))
		})
	}
	for _, plain := range []struct{ file, content string }{
		{"p.yaml", "kind: ConfigMap\ndata: {sops: x, mac: y, lastmodified: z}\n"},
		{"p.yaml", "sops:\n  mac: only\n"},
		{"p.json", `{"sops": "mac lastmodified"}`},
		{"p.env", "SOPS=mac\nX=lastmodified\n"},
		{"p.crt", "sops mac lastmodified, not JSON"},
		{"p.yaml", "sops: [mac, lastmodified]\n"},
	} {
		out, _, err := decryptSOPS(plain.file, []byte(plain.content), nil, DefaultLimits())
		NewWithT(t).Expect(err).NotTo(HaveOccurred(), plain.file)
		NewWithT(t).Expect(string(out)).To(Equal(plain.content), "a file that is not SOPS-encrypted passes untouched")
	}
}

// FuzzDecryptSOPS: whatever a repository holds, decryption returns the file untouched (and
// then it holds no SOPS ciphertext), plaintext, an ErrDecryption or an ErrCiphertext, and
// never panics.
func FuzzDecryptSOPS(f *testing.F) {
	for _, name := range []string{"secret.yaml", "multi.yaml", "values.json", "app.env", "tls.crt"} {
		b, err := os.ReadFile("testdata/sops/" + name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(name, b)
	}
	f.Add("x.yaml", []byte("sops:\n  mac: ENC[AES256_GCM,data:AA==,iv:AA==,tag:AA==,type:str]\n  lastmodified: \"2024-01-01T00:00:00Z\"\n"))
	keys := fixtureKeys(f, "test.agekey", "test.asc")
	f.Fuzz(func(t *testing.T, name string, b []byte) {
		out, _, err := decryptSOPS(name, b, keys, DefaultLimits())
		if err != nil && !errors.Is(err, ErrDecryption) && !errors.Is(err, ErrLimitExceeded) && !errors.Is(err, ErrCiphertext) {
			t.Fatalf("error of no class: %v", err)
		}
		if err == nil && bytes.Equal(out, b) && sopsCiphertext.Match(out) {
			t.Fatal("SOPS ciphertext passed on as it is")
		}
		if err == nil && out == nil && len(b) > 0 {
			t.Fatal("no output and no error")
		}
	})
}

func TestKeysFor(t *testing.T) {
	k := newTestKeys(t)
	notFound := errors.New(`secrets "keys" not found`)
	get := func(data map[string][]byte, err error) SecretGetter {
		return func(_ context.Context, ns, name string) (map[string][]byte, error) {
			if ns != "team" || name != "keys" {
				return nil, fmt.Errorf("read %s/%s", ns, name)
			}
			return data, err
		}
	}
	st := func(dec *convergev1.DecryptionSpec) *convergev1.SyncTarget {
		return &convergev1.SyncTarget{ObjectMeta: metav1.ObjectMeta{Name: "app", Namespace: "team"},
			Spec: convergev1.SyncTargetSpec{Decryption: dec}}
	}
	ref := &convergev1.LocalObjectReference{Name: "keys"}
	g := NewWithT(t)

	keys, err := KeysFor(t.Context(), st(nil), get(nil, nil))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(keys).To(BeNil(), "no spec.decryption: no decryption")

	keys, err = KeysFor(t.Context(), st(&convergev1.DecryptionSpec{Provider: "sops"}), get(nil, nil))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(keys).NotTo(BeNil(), "decryption without a Secret: on, with no keys")
	g.Expect(keys.String()).To(Equal("no keys"))

	keys, err = KeysFor(t.Context(), st(&convergev1.DecryptionSpec{Provider: "sops", SecretRef: ref}), get(k.secretData(t), nil))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(keys.String()).To(ContainSubstring(k.age.Recipient().String()))

	_, err = KeysFor(t.Context(), st(&convergev1.DecryptionSpec{Provider: "sops", SecretRef: ref}), get(nil, notFound))
	g.Expect(err).To(MatchError(ErrDecryption))
	g.Expect(err).To(MatchError(notFound), "the reader's error stays in the chain")
	g.Expect(err.Error()).To(ContainSubstring("reading the decryption Secret team/keys"))

	_, err = KeysFor(t.Context(), st(&convergev1.DecryptionSpec{Provider: "sops", SecretRef: ref}),
		get(map[string][]byte{"bad.agekey": []byte("AGE-SECRET-KEY-1SECRETMATERIAL")}, nil))
	g.Expect(err).To(MatchError(ErrDecryption))
	g.Expect(err.Error()).To(ContainSubstring(`decryption Secret team/keys: decryption failed: key "bad.agekey"`))
	g.Expect(err.Error()).NotTo(ContainSubstring("SECRETMATERIAL"))
}
