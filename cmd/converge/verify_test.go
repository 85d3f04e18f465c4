package main

import (
	"context"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
	"github.com/converge-gitops/converge/internal/gittest"
	"github.com/converge-gitops/converge/internal/localcluster"
	"github.com/converge-gitops/converge/internal/localcluster/clustertest"
)

// TestVerifyCLI: `converge build --target` and `converge diff --target` of a SyncTarget with
// spec.source.verify render a signed revision and refuse an unsigned one with the message the
// daemon gives.
func TestVerifyCLI(t *testing.T) {
	t.Parallel()
	cluster := clustertest.Start(t, localcluster.Options{CRDDirectoryPaths: []string{clustertest.CRDDir()}})
	ctx := context.Background()
	g := NewWithT(t)
	c, err := client.New(cluster.Config, client.Options{Scheme: cliScheme()})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team-verify"}})).To(Succeed())

	sign, pub := gittest.OpenPGPKey(t, "Release", "release@example.com")
	gitRoot := t.TempDir()
	repo := gittest.NewRepo(t, gitRoot, "app")
	srv := gittest.NewHTTPServer(t, gitRoot, gittest.HTTPOptions{})
	repo.SignedCommit(t, "main", sign, map[string]string{"deploy/cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: signed}\n"})
	unsigned := repo.Commit(t, "unsigned", map[string]string{"deploy/cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: forged}\n"})
	g.Expect(c.Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "keys", Namespace: "team-verify"},
		Data:       map[string][]byte{"release.asc": []byte(pub)},
	})).To(Succeed())
	g.Expect(c.Create(ctx, &convergev1.SyncTarget{
		ObjectMeta: metav1.ObjectMeta{Name: "app", Namespace: "team-verify"},
		Spec: convergev1.SyncTargetSpec{
			Source: convergev1.GitSource{URL: srv.RepoURL(repo), Ref: convergev1.GitRef{Branch: "main"},
				Verify: &convergev1.VerifySpec{SecretRef: convergev1.LocalObjectReference{Name: "keys"}}},
			Path: "deploy", TargetNamespace: "team-verify",
		},
	})).To(Succeed())
	target := []string{"--target", "app", "-n", "team-verify", "--kubeconfig", cluster.Kubeconfig}

	out, errOut, code := diffCLI(t, append([]string{"build"}, target...)...)
	g.Expect(code).To(Equal(0), errOut)
	g.Expect(out).To(ContainSubstring("name: signed"))

	want := "revision unsigned@sha1:" + unsigned + ": commit " + unsigned[:12] + " is not signed"
	for _, cmd := range []string{"build", "diff"} {
		out, errOut, code := diffCLI(t, append([]string{cmd, "--revision", "unsigned"}, target...)...)
		g.Expect(code).To(Equal(2), "%s: %s", cmd, out)
		g.Expect(errOut).To(ContainSubstring(want), cmd)
		g.Expect(out).NotTo(ContainSubstring("forged"), cmd)
	}
}
