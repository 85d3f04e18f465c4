package ui

import (
	"context"
	"encoding/base64"
	"net/http"
	"os"
	"path/filepath"
	"testing"

	. "github.com/onsi/gomega"
	"sigs.k8s.io/controller-runtime/pkg/client"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
	"github.com/converge-gitops/converge/internal/diff"
	"github.com/converge-gitops/converge/internal/gittest"
	syncapply "github.com/converge-gitops/converge/sync/apply"
)

// TestPendingDiffMasksSecrets shows the diff of a fetched revision that changes a
// ConfigMap and a Secret against a real API server and a real git server: the change
// is there, the Secret's values never are.
func TestPendingDiffMasksSecrets(t *testing.T) {
	c, _ := cluster(t)
	g := NewWithT(t)
	ctx := context.Background()
	before := map[string]string{
		"deploy/cm.yaml":     "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: settings}\ndata: {mode: blue}\n",
		"deploy/secret.yaml": "apiVersion: v1\nkind: Secret\nmetadata: {name: db}\nstringData: {password: old-hunter2}\n",
	}
	after := map[string]string{
		"deploy/cm.yaml":     "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: settings}\ndata: {mode: green}\n",
		"deploy/secret.yaml": "apiVersion: v1\nkind: Secret\nmetadata: {name: db}\nstringData: {password: new-hunter2}\n",
	}
	gitRoot := t.TempDir()
	repo := gittest.NewRepo(t, gitRoot, "app")
	srv := gittest.NewHTTPServer(t, gitRoot, gittest.HTTPOptions{})
	repo.Commit(t, "main", before)
	head := repo.Commit(t, "main", after)

	st := fakeTarget("diff-a", "app", true)
	st.Spec.Source.URL = srv.RepoURL(repo)
	st.Spec.Path, st.Spec.TargetNamespace = "deploy", "diff-a"
	st.Status.LastFetchedRevision = "main@sha1:" + head
	created := createTarget(t, c, st)

	// What the daemon applied from the revision before.
	dir := t.TempDir()
	for p, content := range before {
		g.Expect(os.MkdirAll(filepath.Join(dir, filepath.Dir(p)), 0o755)).To(Succeed())
		g.Expect(os.WriteFile(filepath.Join(dir, p), []byte(content), 0o644)).To(Succeed())
	}
	objs, err := diff.Render(ctx, c.RESTMapper(), diff.RenderOptionsFor(created, dir, "deploy"))
	g.Expect(err).NotTo(HaveOccurred())
	for _, o := range objs {
		g.Expect(c.Apply(ctx, client.ApplyConfigurationFromUnstructured(o), client.ForceOwnership, client.FieldOwner(syncapply.FieldManager))).To(Succeed())
	}

	s := NewWithStore(Options{}, NewMemoryStore([]convergev1.SyncTarget{*created}, nil), c)
	rec := get(t, s, "/targets/diff-a/app/diff")
	g.Expect(rec.Code).To(Equal(http.StatusOK))
	body := rec.Body.String()
	g.Expect(body).To(ContainSubstring("0 to create, 2 to change, 0 to prune"))
	g.Expect(body).To(ContainSubstring("v1 ConfigMap diff-a/settings"))
	g.Expect(body).To(ContainSubstring(`<span class="la">&#43;  mode: green</span>`))
	g.Expect(body).To(ContainSubstring("v1 Secret diff-a/db"))
	g.Expect(body).To(ContainSubstring("***"))
	for _, v := range []string{"old-hunter2", "new-hunter2"} {
		g.Expect(body).NotTo(ContainSubstring(v))
		g.Expect(body).NotTo(ContainSubstring(base64.StdEncoding.EncodeToString([]byte(v))))
	}
}
