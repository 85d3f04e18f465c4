package ui

import (
	"context"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/chromedp"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
	"github.com/converge-gitops/converge/internal/browsertest"
)

// TestPagesInTheBrowser loads the pages from memory in a real Chromium: the script runs
// under the Content-Security-Policy, the confirmation dialog opens and closes from the
// keyboard. The e2e suite drives the real binary against a cluster.
func TestPagesInTheBrowser(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a browser")
	}
	g := NewWithT(t)
	targets := []convergev1.SyncTarget{fakeTarget("infra", "dns", true), fakeTarget("shop", "db", true, "dns"),
		fakeTarget("shop", "web", false, "db"), fakeTarget("shop", "cache", true, "db")}
	targets[1].Spec.DependsOn[0].Namespace = "infra"
	targets[3].Spec.Suspend = true
	targets[0].Spec.Source.URL = "http://127.0.0.1:1/dns.git" // the diff fails at once, off the network
	targets[0].Status.Inventory = &convergev1.ResourceInventory{Entries: []convergev1.InventoryEntry{
		{ID: "_infra__Namespace", Version: "v1"}, {ID: "infra_coredns_apps_Deployment", Version: "v1"}, {ID: "infra_coredns__ConfigMap", Version: "v1"}}}
	s, _ := testServer(t, targets, []corev1.Event{fakeEvent("infra", "dns", "Succeeded", "applied revision main@sha1:abc")}, nil)
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)

	ctx := browsertest.New(t)
	g.Expect(chromedp.Do(ctx, chromedp.Navigate(srv.URL+"/"), chromedp.WaitVisible(chromedp.CSS("#targets")))).To(Succeed())
	live, err := chromedp.Run(ctx, chromedp.Poll[string](`document.body.dataset.live`, chromedp.WithPollingTimeout(10*time.Second)))
	g.Expect(err).NotTo(HaveOccurred(), "the script runs under the CSP and follows /events")
	g.Expect(live).To(Equal("on"))
	browsertest.Screenshot(t, ctx, "memory-overview")

	g.Expect(chromedp.Do(ctx, chromedp.Navigate(srv.URL+"/targets/infra/dns"), chromedp.WaitVisible(chromedp.CSS(".timeline")))).To(Succeed())
	browsertest.Screenshot(t, ctx, "memory-target")
	_, err = chromedp.Call(ctx, emulation.SetEmulatedMedia, emulation.SetEmulatedMediaParams{
		Features: []*emulation.MediaFeature{{Name: "prefers-color-scheme", Value: "dark"}}})
	g.Expect(err).NotTo(HaveOccurred())
	bg, err := chromedp.Run(ctx, chromedp.Evaluate[string](`getComputedStyle(document.body).backgroundColor`))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(bg).To(Equal("rgb(13, 17, 23)"), "the dark theme follows the system")
	browsertest.Screenshot(t, ctx, "memory-target-dark")

	// Roll back from the history, from the keyboard: the dialog asks, Enter confirms.
	g.Expect(within(ctx, chromedp.Focus(chromedp.CSS(`button[data-action="rollback"][data-to="main@sha1:`+sha(1)+`"]`)),
		chromedp.KeyEvent("\r"), chromedp.WaitVisible(chromedp.CSS("#confirm")))).To(Succeed())
	browsertest.Screenshot(t, ctx, "memory-confirm")
	g.Expect(within(ctx, chromedp.KeyEvent("\r"))).To(Succeed(), "the dialog's Confirm button has the focus")
	flash, err := chromedp.Run(ctx, chromedp.Poll[string](`document.querySelector("#flash").textContent`, chromedp.WithPollingTimeout(10*time.Second)))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(flash).To(Equal("pinned SyncTarget infra/dns to commit " + sha(1) + " (resume restores branch main)"))
}

// within runs actions for at most 10 seconds.
func within(ctx context.Context, actions ...chromedp.Action[chromedp.Void]) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	return chromedp.Do(ctx, actions...)
}

// TestChartTargetInTheBrowser shows the page of a SyncTarget of a chart repository in
// Chromium: the chart and the deployed chart version where a Git source shows its URL and
// commit, and neither the repository's credentials nor the values.
func TestChartTargetInTheBrowser(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a browser")
	}
	g := NewWithT(t)
	inGit := fakeTarget("shop", "api", true)
	inGit.Spec.Path, inGit.Spec.Helm = "charts/api", &convergev1.HelmSpec{}
	s, _ := testServer(t, []convergev1.SyncTarget{fakeChartTarget("shop", "web"), inGit, fakeTarget("shop", "db", true)},
		[]corev1.Event{fakeEvent("shop", "web", "Succeeded", "applied revision 6.5.1@sha256:"+chartDigest)}, nil)
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)

	ctx := browsertest.New(t)
	g.Expect(chromedp.Do(ctx, chromedp.Navigate(srv.URL+"/"), chromedp.WaitVisible(chromedp.CSS("#targets")))).To(Succeed())
	browsertest.Screenshot(t, ctx, "memory-overview-charts")
	g.Expect(chromedp.Do(ctx, chromedp.Navigate(srv.URL+"/targets/shop/web"), chromedp.WaitVisible(chromedp.CSS(".timeline")))).To(Succeed())
	spec, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.querySelector("dl.spec").innerText`))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(spec).To(ContainSubstring("podinfo from https://charts.example.com/stable · version >=6.5 <7"))
	g.Expect(spec).To(ContainSubstring("6.5.1 · sha256:0123456"))
	text, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.body.innerText`))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(text).NotTo(ContainSubstring("chart-pa55"))
	g.Expect(text).NotTo(ContainSubstring("values-s3cret"))
	// The pending diff fetches the chart as the daemon would: this repository is not
	// there, and what the page says of it shows no credentials.
	pending, err := chromedp.Run(ctx, chromedp.Poll[string](`document.querySelector("#diff").innerText || null`, chromedp.WithPollingTimeout(30*time.Second)))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(pending).To(ContainSubstring("charts.example.com"))
	g.Expect(pending).NotTo(ContainSubstring("chart-pa55"))
	browsertest.Screenshot(t, ctx, "memory-target-chart")
}
