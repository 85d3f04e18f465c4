package render

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
)

// stripSOPS is the real sops fixture testdata/sops/name with its sops metadata removed:
// all of it, or only its mac when onlyMAC.
func stripSOPS(t testing.TB, name string, onlyMAC bool) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "sops", name))
	if err != nil {
		t.Fatal(err)
	}
	switch filepath.Ext(name) {
	case ".yaml":
		return stripYAMLMeta(string(b), onlyMAC)
	case ".env":
		var keep []string
		for _, line := range strings.Split(string(b), "\n") {
			if !strings.HasPrefix(line, "sops_mac=") && (onlyMAC || !strings.HasPrefix(line, "sops_")) {
				keep = append(keep, line)
			}
		}
		return strings.Join(keep, "\n")
	}
	var doc map[string]any // JSON, and the JSON wrapper of a binary file
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	if onlyMAC {
		delete(doc["sops"].(map[string]any), "mac")
	} else {
		delete(doc, "sops")
	}
	out, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}

// stripYAMLMeta removes the top-level sops mapping of a YAML file as sops writes it (or
// its mac line only).
func stripYAMLMeta(s string, onlyMAC bool) string {
	var keep []string
	inMeta := false
	for _, line := range strings.Split(s, "\n") {
		if line == "sops:" {
			inMeta = true
		} else if line != "" && !strings.HasPrefix(line, " ") { // an empty line is inside a block scalar
			inMeta = false
		}
		if (onlyMAC && inMeta && strings.HasPrefix(line, "    mac: ")) || (!onlyMAC && inMeta) {
			continue
		}
		keep = append(keep, line)
	}
	return strings.Join(keep, "\n")
}

// ciphertextValue matches what must never be quoted: the data of an encrypted value.
var ciphertextValue = regexp.MustCompile(`data:[A-Za-z0-9+/=]{2,}`)

// TestSOPSStrippedFilesAreRefused: a file encrypted by sops whose sops metadata, or whose
// mac alone, was removed is not a SOPS file any more; it is refused, whether the target
// decrypts or not, naming the file and the key of an encrypted value, never the value. It
// used to be applied with ENC[AES256_GCM,…] as the values.
func TestSOPSStrippedFilesAreRefused(t *testing.T) {
	plainFiles := []struct{ fixture, want string }{
		{"secret.yaml", "render app/secret.yaml: SOPS ciphertext outside a SOPS file: stringData.username (line 9) holds a SOPS-encrypted value"},
		{"multi.yaml", "render app/multi.yaml: SOPS ciphertext outside a SOPS file: document 1, apiVersion (line 1)"},
		{"values.json", "render app/values.json: SOPS ciphertext outside a SOPS file: extra.data[0] (line 5)"}, // keys sorted
	}
	for _, onlyMAC := range []bool{false, true} {
		for _, f := range plainFiles {
			for _, keys := range []*Keys{nil, fixtureKeys(t, "test.agekey", "test.asc")} {
				name := f.fixture + map[bool]string{false: ", sops metadata removed", true: ", mac removed"}[onlyMAC]
				if keys != nil {
					name += ", with keys"
				}
				t.Run(name, func(t *testing.T) {
					g := NewWithT(t)
					root, _ := newRepo(t)
					write(t, root, "app/"+f.fixture, stripSOPS(t, f.fixture, onlyMAC))
					res, err := render(Options{Root: root, Path: "app", Decryption: keys})
					expectFailure(g, res, err, ErrCiphertext, f.want)
					g.Expect(err.Error()).To(ContainSubstring("it is not applied as ciphertext"))
					g.Expect(err.Error()).NotTo(MatchRegexp(ciphertextValue.String()))
				})
			}
		}
	}
}

// TestSOPSCiphertextInGenerators: ciphertext reaches a kustomize-generated Secret or
// ConfigMap through a generator's files, envs or literals; each is refused, naming the file
// and the key, never the value.
func TestSOPSCiphertextInGenerators(t *testing.T) {
	enc := "ENC[AES256_GCM,data:Pt1zH5Y3MvIF50I=,iv:gTNOUKwfYviJxkRbIvahoMTfSG905JQ2QiwgJwnAXRA=,tag:NcZY4iEm92zK9fEcSO2D9g==,type:str]"
	tests := []struct {
		name, generator string
		files           map[string]string
		want            string
	}{
		{name: "secretGenerator envs: a dotenv file without its sops_ lines",
			generator: "secretGenerator:\n- name: gen\n  envs: [app.env]\n",
			files:     map[string]string{"app.env": stripSOPS(t, "app.env", false)},
			want:      "render app/app.env: SOPS ciphertext outside a SOPS file: DB_USER (line 1)"},
		{name: "secretGenerator envs: a dotenv file without sops_mac",
			generator: "secretGenerator:\n- name: gen\n  envs: [app.env]\n",
			files:     map[string]string{"app.env": stripSOPS(t, "app.env", true)},
			want:      "render app/app.env: SOPS ciphertext outside a SOPS file: DB_USER (line 1)"},
		{name: "secretGenerator files: a binary file without its sops metadata",
			generator: "secretGenerator:\n- name: gen\n  files: [tls.crt]\n",
			files:     map[string]string{"tls.crt": stripSOPS(t, "tls.crt", false)},
			want:      "render app/tls.crt: SOPS ciphertext outside a SOPS file: data (line 2)"},
		{name: "secretGenerator literals",
			generator: "secretGenerator:\n- name: gen\n  literals:\n  - user=admin\n  - token=" + enc + "\n",
			want:      "render app/kustomization.yaml: SOPS ciphertext outside a SOPS file: secretGenerator[0].literals[1] (line 6)"},
		{name: "configMapGenerator files: an INI file",
			generator: "configMapGenerator:\n- name: gen\n  files: [app.ini]\n",
			files:     map[string]string{"app.ini": "[server]\nport = 80\n[database]\npassword = " + enc + "\n"},
			want:      "render app/app.ini: SOPS ciphertext outside a SOPS file: database.password (line 4)"},
		{name: "configMapGenerator files: a YAML file without its sops metadata",
			generator: "configMapGenerator:\n- name: gen\n  files: [settings.yaml]\n",
			files:     map[string]string{"settings.yaml": stripSOPS(t, "configmap.yaml", false)},
			want:      "render app/settings.yaml: SOPS ciphertext outside a SOPS file: apiVersion (line 1)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			root, _ := newRepo(t)
			write(t, root, "app/kustomization.yaml", "resources: [cm.yaml]\n"+tt.generator)
			write(t, root, "app/cm.yaml", cm("plain", "1"))
			for name, content := range tt.files {
				write(t, root, "app/"+name, content)
			}
			res, err := render(Options{Root: root, Path: "app", Decryption: fixtureKeys(t, "test.agekey", "test.asc")})
			expectFailure(g, res, err, ErrCiphertext, tt.want)
			g.Expect(err.Error()).NotTo(MatchRegexp(ciphertextValue.String()))
		})
	}
}

// TestSOPSCiphertextLocation: where a refusal says the ciphertext is, by format.
func TestSOPSCiphertextLocation(t *testing.T) {
	enc := "ENC[AES256_GCM,data:AAAA,iv:BBBB,tag:CCCC,type:str]"
	tests := []struct{ name, content, want string }{
		{"a.yaml", "a: 1\n---\nkind: Secret\nstringData:\n  list:\n  - x\n  - " + enc + "\n", "document 2, stringData.list[1] (line 7)"},
		{"a.yaml", "list: [x, " + enc + "]\n", "line 1"}, // not YAML: a flow sequence cannot hold it unquoted
		{"a.json", `{"kind": "Secret", "data": {"k": "` + enc + `"}}`, "data.k (line 1)"},
		{"a.yaml", "note: |\n  some text\n  token=" + enc + "\n", "note (line 1)"},
		{"a.yaml", "# " + enc + "\na: 1\n", "line 1"},                                 // in a comment
		{"a.env", "export TOKEN=" + enc + "\n", "TOKEN (line 1)"},                     // dotenv with export
		{"a.env", "A=1\nnot a key=" + enc + "\n", "line 2"},                           // no key worth naming
		{"a.properties", "a=1\nb=2\nsecret.key=" + enc + "\n", "secret.key (line 3)"}, // read as YAML: one string
		{"a.txt", "[" + enc + "]\n", "line 1"},                                        // not a section
		{"Kustomization", "secretGenerator:\n- literals: [\"k=" + enc + "\"]\n", "secretGenerator[0].literals[0] (line 2)"},
	}
	for _, tt := range tests {
		g := NewWithT(t)
		out, _, err := decryptSOPS(tt.name, []byte(tt.content), nil, DefaultLimits())
		g.Expect(out).To(BeNil(), tt.name)
		g.Expect(err).To(MatchError(ErrCiphertext), tt.name)
		g.Expect(err.Error()).To(ContainSubstring("SOPS ciphertext outside a SOPS file: "+tt.want+" holds"), tt.content)
		g.Expect(err.Error()).NotTo(ContainSubstring("AAAA"))
	}
	for _, plain := range []string{"ENC[AES256_GCM,data:x]", "ENC[AES256_GCM, data:a,iv:b,tag:c,type:str]", "encrypted: ENC[RSA,data:a,iv:b,tag:c,type:str]"} {
		out, _, err := decryptSOPS("a.yaml", []byte("a: "+plain+"\n"), nil, DefaultLimits())
		NewWithT(t).Expect(err).NotTo(HaveOccurred(), "not in the form of a SOPS value: %s", plain)
		NewWithT(t).Expect(string(out)).To(Equal("a: " + plain + "\n"))
	}
}

// TestSOPSMACLimits documents what the SOPS MAC does not cover, as SECURITY.md says: it is a
// hash of the values in order, so a committer without the key can add a key whose value is
// empty or null, or rename the key of a value that is not encrypted, and the file still
// decrypts. (Empty values are how sops itself writes an empty string; they cannot be
// refused.) Signed commits (spec.source.verify) are the control against such a committer.
func TestSOPSMACLimits(t *testing.T) {
	k := newTestKeys(t)
	plain := "apiVersion: v1\nkind: Secret\nmetadata:\n  name: db\n  labels:\n    team: a\nstringData:\n  password: hunter2\n"
	enc := string(ageOnly(k).encrypt(t, "secret.yaml", []byte(plain)))
	g := NewWithT(t)
	g.Expect(enc).To(ContainSubstring("stringData:\n  password: ENC["))
	g.Expect(enc).To(ContainSubstring("\n    team: a\n"))
	enc = strings.Replace(enc, "stringData:\n", "stringData:\n  token: \"\"\n  other: null\n", 1)
	enc = strings.Replace(enc, "\n    team: a\n", "\n    owner: a\n", 1)
	root, _ := newRepo(t)
	write(t, root, "app/secret.yaml", enc)
	res, err := render(Options{Root: root, Path: "app", Decryption: testKeyring(t, k)})
	g.Expect(err).NotTo(HaveOccurred())
	secret := byName(res.Objects, "db")
	g.Expect(secret.Object["stringData"]).To(Equal(map[string]any{"token": "", "other": nil, "password": "hunter2"}))
	g.Expect(secret.GetLabels()).To(Equal(map[string]string{"owner": "a"}))
}
