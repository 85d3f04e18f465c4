package main

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
	"github.com/converge-gitops/converge/internal/gittest"
	"github.com/converge-gitops/converge/internal/localcluster"
	"github.com/converge-gitops/converge/internal/localcluster/clustertest"
	"github.com/converge-gitops/converge/internal/sopstest"
)

// TestSOPSBuildAndDiff runs `converge build --target` and `converge diff --target` on a
// SyncTarget whose repository holds a SOPS-encrypted Secret: they decrypt with the keys of
// its spec.decryption, and print the Secret's values masked unless build has --decrypt.
func TestSOPSBuildAndDiff(t *testing.T) {
	t.Parallel()
	cluster := clustertest.Start(t, localcluster.Options{CRDDirectoryPaths: []string{clustertest.CRDDir()}})
	ctx := context.Background()
	c, err := client.New(cluster.Config, client.Options{Scheme: cliScheme()})
	if err != nil {
		t.Fatal(err)
	}
	kc := []string{"--kubeconfig", cluster.Kubeconfig}
	for _, ns := range []string{"team-sops", "shop-sops"} {
		if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			t.Fatal(err)
		}
	}
	const plaintext = "cli-sops-plaintext-9e2b"
	k := sopstest.NewKeys(t)
	encrypted := k.EncryptYAML(t, "apiVersion: v1\nkind: Secret\nmetadata:\n  name: db\nstringData:\n  password: "+plaintext+"\n", true)
	gitRoot := t.TempDir()
	repo := gittest.NewRepo(t, gitRoot, "app")
	srv := gittest.NewHTTPServer(t, gitRoot, gittest.HTTPOptions{})
	repo.Commit(t, "main", map[string]string{"deploy/db.yaml": encrypted})
	if err := c.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "sops-keys", Namespace: "team-sops"}, Data: k.SecretData(t)}); err != nil {
		t.Fatal(err)
	}
	if err := c.Create(ctx, &convergev1.SyncTarget{
		ObjectMeta: metav1.ObjectMeta{Name: "app", Namespace: "team-sops"},
		Spec: convergev1.SyncTargetSpec{
			Source: convergev1.GitSource{URL: srv.RepoURL(repo), Ref: convergev1.GitRef{Branch: "main"}},
			Path:   "deploy", TargetNamespace: "shop-sops",
			Decryption: &convergev1.DecryptionSpec{Provider: "sops", SecretRef: &convergev1.LocalObjectReference{Name: "sops-keys"}},
		},
	}); err != nil {
		t.Fatal(err)
	}
	noPlaintext := func(g Gomega, out string) {
		g.Expect(out).NotTo(ContainSubstring(plaintext))
		g.Expect(out).NotTo(ContainSubstring(diffB64(plaintext)))
	}
	target := append([]string{"--target", "app", "-n", "team-sops"}, kc...)

	t.Run("build masks the decrypted Secret", func(t *testing.T) {
		g := NewWithT(t)
		out, errOut, code := diffCLI(t, append([]string{"build"}, target...)...)
		g.Expect(code).To(Equal(0), errOut)
		g.Expect(out).To(ContainSubstring("name: db"))
		g.Expect(out).To(ContainSubstring("password: '***'"))
		g.Expect(out).NotTo(ContainSubstring("ENC["), "decrypted, not ciphertext")
		noPlaintext(g, out+errOut)
	})
	t.Run("build --decrypt prints it", func(t *testing.T) {
		g := NewWithT(t)
		out, errOut, code := diffCLI(t, append([]string{"build", "--decrypt"}, target...)...)
		g.Expect(code).To(Equal(0), errOut)
		g.Expect(out).To(ContainSubstring("password: " + plaintext))
	})
	t.Run("diff masks it", func(t *testing.T) {
		g := NewWithT(t)
		for _, extra := range [][]string{nil, {"--markdown"}, {"-o", "json"}} {
			out, errOut, code := diffCLI(t, append(append([]string{"diff"}, target...), extra...)...)
			g.Expect(code).To(Equal(1), errOut)
			g.Expect(out).To(ContainSubstring("db"))
			noPlaintext(g, out+errOut)
		}
	})
	t.Run("errors", func(t *testing.T) {
		dir := t.TempDir()
		diffWriteFiles(t, dir, map[string]string{"deploy/db.yaml": encrypted})
		for _, tt := range []struct {
			name string
			args []string
			want string
		}{
			{"--decrypt without --target", []string{"build", "--decrypt", filepath.Join(dir, "deploy")}, "--decrypt needs --target"},
			{"an encrypted file without --target", []string{"build", filepath.Join(dir, "deploy")}, "render db.yaml: decryption failed: the file is SOPS-encrypted"},
		} {
			t.Run(tt.name, func(t *testing.T) {
				g := NewWithT(t)
				out, errOut, code := diffCLI(t, append(tt.args, kc...)...)
				g.Expect(code).To(Equal(2))
				g.Expect(out).To(BeEmpty())
				g.Expect(errOut).To(ContainSubstring(tt.want))
				g.Expect(strings.Contains(errOut, plaintext)).To(BeFalse())
			})
		}
	})
}
