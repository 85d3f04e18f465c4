package render

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	"sigs.k8s.io/yaml"
)

// fixtureKeys reads the throwaway test keys the sops fixtures were encrypted for.
func fixtureKeys(t testing.TB, which ...string) *Keys {
	t.Helper()
	data := map[string][]byte{}
	for _, name := range which {
		b, err := os.ReadFile(filepath.Join("testdata", "sops", "keys", name))
		if err != nil {
			t.Fatal(err)
		}
		data[name] = b
	}
	k, err := ParseKeys(data)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// TestSOPSInteropFixtures decrypts files encrypted by the real sops code (see
// testdata/sops/generate) and compares them with the plaintext they were made from.
func TestSOPSInteropFixtures(t *testing.T) {
	tests := []struct {
		file string
		keys []string
	}{
		{"secret.yaml", []string{"test.agekey"}},
		{"secret.yaml", []string{"test.asc"}},
		{"configmap.yaml", []string{"test.agekey"}},
		{"multi.yaml", []string{"test.asc"}},
		{"values.json", []string{"test.agekey"}},
		{"app.env", []string{"test.agekey"}},
		{"app.env", []string{"test.asc"}},
		{"tls.crt", []string{"test.agekey", "test.asc"}},
	}
	for _, tt := range tests {
		t.Run(tt.file+"/"+strings.Join(tt.keys, "+"), func(t *testing.T) {
			g := NewWithT(t)
			enc, err := os.ReadFile(filepath.Join("testdata", "sops", tt.file))
			g.Expect(err).NotTo(HaveOccurred())
			want, err := os.ReadFile(filepath.Join("testdata", "sops", "plain", tt.file))
			g.Expect(err).NotTo(HaveOccurred())
			got, _, err := decryptSOPS(tt.file, enc, fixtureKeys(t, tt.keys...), DefaultLimits())
			g.Expect(err).NotTo(HaveOccurred())
			switch filepath.Ext(tt.file) {
			case ".yaml", ".json":
				g.Expect(yamlDocs(t, got)).To(Equal(yamlDocs(t, want)))
			case ".env":
				// Comments are encrypted too; decryption leaves them out.
				g.Expect(string(got)).To(Equal(withoutComments(string(want))))
			default:
				g.Expect(string(got)).To(Equal(string(want)))
			}
		})
	}
}

// yamlDocs parses a YAML or JSON stream into generic values, for comparison.
func yamlDocs(t testing.TB, b []byte) []any {
	t.Helper()
	var out []any
	for _, d := range strings.Split(string(b), "\n---\n") {
		var v any
		if err := yaml.Unmarshal([]byte(d), &v); err != nil {
			t.Fatal(err)
		}
		out = append(out, v)
	}
	return out
}

func withoutComments(s string) string {
	var out []string
	for _, l := range strings.SplitAfter(s, "\n") {
		if !strings.HasPrefix(l, "#") {
			out = append(out, l)
		}
	}
	return strings.Join(out, "")
}
