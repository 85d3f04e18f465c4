package ui

import (
	"context"
	"encoding/base64"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"

	"github.com/chromedp/chromedp"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
	"github.com/converge-gitops/converge/internal/browsertest"
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

// TestCompareTwoRevisions compares two revisions of a SyncTarget's history against a
// real git server: the change is there, a Secret's values never are, and a value read
// from a Secret variable is redacted where the newer revision copies it into a
// ConfigMap; a revision outside the history is not fetched.
func TestCompareTwoRevisions(t *testing.T) {
	c, _ := cluster(t)
	g := NewWithT(t)
	ctx := context.Background()
	gitRoot := t.TempDir()
	repo := gittest.NewRepo(t, gitRoot, "app")
	srv := gittest.NewHTTPServer(t, gitRoot, gittest.HTTPOptions{})
	older := repo.Commit(t, "main", map[string]string{
		"deploy/cm.yaml":     "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: settings}\ndata: {mode: blue}\n",
		"deploy/secret.yaml": "apiVersion: v1\nkind: Secret\nmetadata: {name: db}\nstringData: {password: old-hunter2}\n",
	})
	newer := repo.Commit(t, "main", map[string]string{
		"deploy/cm.yaml":     "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: settings}\ndata: {mode: green, copied: \"key=${API_KEY}\"}\n",
		"deploy/secret.yaml": "apiVersion: v1\nkind: Secret\nmetadata: {name: db}\nstringData: {password: new-hunter2}\n",
	})

	st := fakeTarget("cmp-a", "app", true)
	st.Spec.Source.URL = srv.RepoURL(repo)
	st.Spec.Path, st.Spec.TargetNamespace = "deploy", "cmp-a"
	st.Spec.PostBuild = &convergev1.PostBuildSpec{SubstituteFrom: []convergev1.SubstituteReference{{Kind: "Secret", Name: "vars"}}}
	st.Status.History = []convergev1.HistoryEntry{
		{Revision: "main@sha1:" + newer, Result: convergev1.SyncSucceeded, StartedAt: st.Status.History[0].StartedAt},
		{Revision: "main@sha1:" + older, Result: convergev1.SyncSucceeded, StartedAt: st.Status.History[1].StartedAt},
	}
	created := createTarget(t, c, st)
	g.Expect(c.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "cmp-a", Name: "vars"},
		StringData: map[string]string{"API_KEY": "key-5d0c2a7e"}})).To(Succeed())

	s := NewWithStore(Options{}, NewMemoryStore([]convergev1.SyncTarget{*created}, nil), c)
	page := get(t, s, "/targets/cmp-a/app")
	g.Expect(page.Body.String()).To(ContainSubstring(`action="/targets/cmp-a/app/compare"`))
	g.Expect(page.Body.String()).To(ContainSubstring(`<option value="main@sha1:` + older + `" selected>`))

	rec := get(t, s, "/targets/cmp-a/app/compare?from=main@sha1:"+older+"&to=main@sha1:"+newer)
	g.Expect(rec.Code).To(Equal(http.StatusOK))
	body := rec.Body.String()
	g.Expect(body).To(ContainSubstring("0 to create, 2 to change, 0 to prune, 0 unchanged"))
	g.Expect(body).To(ContainSubstring(`<span class="la">&#43;  mode: green</span>`))
	g.Expect(body).To(ContainSubstring(`<span class="la">&#43;  copied: key=[redacted]</span>`))
	g.Expect(body).To(ContainSubstring(`<p>From <code title="main@sha1:` + older + `">` + older[:7] + `</code> to <code title="main@sha1:` + newer + `">`))
	for _, v := range []string{"old-hunter2", "new-hunter2", "key-5d0c2a7e"} {
		g.Expect(body).NotTo(ContainSubstring(v))
		g.Expect(body).NotTo(ContainSubstring(base64.StdEncoding.EncodeToString([]byte(v))))
	}

	if !testing.Short() {
		// In Chromium: the history's form picks the two newest entries; Compare shows them.
		srv := httptest.NewServer(s)
		t.Cleanup(srv.Close)
		bctx := browsertest.New(t)
		g.Expect(chromedp.Do(bctx, chromedp.Navigate(srv.URL+"/targets/cmp-a/app"), chromedp.WaitVisible(chromedp.CSS("form.compare")))).To(Succeed())
		g.Expect(within(bctx, chromedp.Click(chromedp.CSS("form.compare button")), chromedp.WaitVisible(chromedp.CSS("#compare details")))).To(Succeed())
		text, err := chromedp.Run(bctx, chromedp.Evaluate[string](`document.querySelector('#compare').innerText`))
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(text).To(ContainSubstring("0 to create, 2 to change"))
		g.Expect(text).NotTo(ContainSubstring("key-5d0c2a7e"))
		browsertest.Screenshot(t, bctx, "memory-compare")
	}

	// Only revisions of the history are fetched.
	rec = get(t, s, "/targets/cmp-a/app/compare?from=main&to=main@sha1:"+newer)
	g.Expect(rec.Code).To(Equal(http.StatusOK))
	g.Expect(rec.Body.String()).To(ContainSubstring("pick two revisions of the SyncTarget&#39;s history"))
	g.Expect(rec.Body.String()).NotTo(ContainSubstring("to change"))
}

// TestObjectDiffAgainstGit: an object's page computes, when asked, what syncing the
// revision fetched last would change in that object alone, against a real API server and
// a real git server; an object the revision no longer renders says a sync prunes it.
func TestObjectDiffAgainstGit(t *testing.T) {
	c, _ := cluster(t)
	g := NewWithT(t)
	ctx := context.Background()
	gitRoot := t.TempDir()
	repo := gittest.NewRepo(t, gitRoot, "app")
	srv := gittest.NewHTTPServer(t, gitRoot, gittest.HTTPOptions{})
	head := repo.Commit(t, "main", map[string]string{
		"deploy/cm.yaml":    "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: settings}\ndata: {mode: green}\n",
		"deploy/other.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: other}\ndata: {x: changed}\n",
	})
	st := fakeTarget("odiff-a", "app", true)
	st.Spec.Source.URL = srv.RepoURL(repo)
	st.Spec.Path, st.Spec.TargetNamespace = "deploy", "odiff-a"
	st.Status.LastFetchedRevision = "main@sha1:" + head
	st.Status.Inventory = &convergev1.ResourceInventory{Entries: []convergev1.InventoryEntry{
		{ID: "odiff-a_settings__ConfigMap", Version: "v1"}, {ID: "odiff-a_gone__ConfigMap", Version: "v1"}}}
	created := createTarget(t, c, st)
	for name, data := range map[string]string{"settings": "blue", "other": "unchanged", "gone": "x"} {
		g.Expect(c.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "odiff-a", Name: name},
			Data: map[string]string{"mode": data}})).To(Succeed())
	}

	s := NewWithStore(Options{}, NewMemoryStore([]convergev1.SyncTarget{*created}, nil), c)
	page := get(t, s, "/targets/odiff-a/app/objects/odiff-a_settings__ConfigMap").Body.String()
	g.Expect(page).To(ContainSubstring(`<div id="diff" data-lazy="1" data-src="/targets/odiff-a/app/objects/odiff-a_settings__ConfigMap/diff"`))
	body := get(t, s, "/targets/odiff-a/app/objects/odiff-a_settings__ConfigMap/diff").Body.String()
	g.Expect(body).To(ContainSubstring("0 to create, 1 to change, 0 to prune, 0 unchanged"))
	g.Expect(body).To(ContainSubstring(`<span class="lr">-  mode: blue</span>`))
	g.Expect(body).To(ContainSubstring(`<span class="la">&#43;  mode: green</span>`))
	g.Expect(body).NotTo(ContainSubstring("other"), "only this object")
	gone := get(t, s, "/targets/odiff-a/app/objects/odiff-a_gone__ConfigMap/diff").Body.String()
	g.Expect(gone).To(ContainSubstring("the revision no longer renders it"))

	if !testing.Short() {
		// In Chromium: nothing is computed until asked; then the object's diff shows.
		hs := httptest.NewServer(s)
		t.Cleanup(hs.Close)
		bctx := browsertest.New(t)
		g.Expect(chromedp.Do(bctx, chromedp.Navigate(hs.URL+"/targets/odiff-a/app/objects/odiff-a_settings__ConfigMap"),
			chromedp.WaitVisible(chromedp.CSS("#diff-refresh")))).To(Succeed())
		before, err := chromedp.Run(bctx, chromedp.Evaluate[string](`document.querySelector('#diff').innerText`))
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(before).To(BeEmpty())
		g.Expect(within(bctx, chromedp.Click(chromedp.CSS("#diff-refresh")), chromedp.WaitVisible(chromedp.CSS("#diff pre.udiff")))).To(Succeed())
		browsertest.Screenshot(t, bctx, "memory-object-diff")
	}
}
