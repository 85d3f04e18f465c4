package sopstest_test

import (
	"os"
	"strings"
	"testing"

	. "github.com/onsi/gomega"

	"github.com/converge-gitops/converge/internal/sopstest"
	"github.com/converge-gitops/converge/sync/render"
)

// TestEncryptYAML checks the helper against the decrypter: what it encrypts, render decrypts.
func TestEncryptYAML(t *testing.T) {
	g := NewWithT(t)
	k := sopstest.NewKeys(t)
	plain := "apiVersion: v1\nkind: Secret\nmetadata:\n  name: s\nstringData:\n  password: sopstest-plaintext\n  n: 3\n"
	enc := k.EncryptYAML(t, plain, true)
	g.Expect(enc).NotTo(ContainSubstring("sopstest-plaintext"))
	g.Expect(strings.Count(enc, "ENC[AES256_GCM")).To(Equal(3), "two values and the MAC")
	keys, err := render.ParseKeys(k.SecretData(t))
	g.Expect(err).NotTo(HaveOccurred())
	root := t.TempDir()
	g.Expect(writeFile(root+"/s.yaml", enc)).To(Succeed())
	res, err := render.Render(t.Context(), render.Options{Root: root, Path: "s.yaml", Decryption: keys})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(res.Objects[0].Object["stringData"]).To(Equal(map[string]any{"password": "sopstest-plaintext", "n": int64(3)}))
}

func writeFile(p, s string) error { return os.WriteFile(p, []byte(s), 0o644) }
