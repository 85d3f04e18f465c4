package ui

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
	. "github.com/onsi/gomega"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
	"github.com/converge-gitops/converge/internal/browsertest"
)

// TestOverviewGroupsBySetAndCluster: ?group=set puts each set's SyncTargets under its
// heading (those of no set last), ?group=cluster each cluster's (the daemon's own
// first), with counts; any other value groups nothing.
func TestOverviewGroupsBySetAndCluster(t *testing.T) {
	g := NewWithT(t)
	_, targets := fakeSet("shop", "regions")
	edge := fakeTarget("shop", "edge", true)
	edge.Spec.KubeConfig = &convergev1.KubeConfigReference{SecretRef: convergev1.KubeConfigSecretReference{Name: "edge-kubeconfig"}}
	targets = append(targets, fakeTarget("shop", "alone", true), edge)
	s, _ := testServer(t, targets, nil, nil)

	headings := func(body string) []string {
		var out []string
		for _, part := range strings.Split(body, `<tr class="ghead"><th colspan="6" scope="rowgroup">`)[1:] {
			out = append(out, part[:strings.Index(part, "</th>")])
		}
		return out
	}
	bySet := get(t, s, "/?group=set")
	g.Expect(bySet.Code).To(Equal(http.StatusOK))
	g.Expect(headings(bySet.Body.String())).To(Equal([]string{
		`<a href="/sets/shop/regions">set shop/regions</a> · 3`, `no set · 2`}))
	g.Expect(bySet.Body.String()).To(ContainSubstring(`<table class="targets" id="targets" data-grouped="1">`))
	byCluster := get(t, s, "/?group=cluster")
	g.Expect(headings(byCluster.Body.String())).To(Equal([]string{
		`<a href="/?cluster=in-cluster">cluster in-cluster</a> · 4`, `<a href="/?cluster=edge-kubeconfig">cluster edge-kubeconfig</a> · 1`}))
	g.Expect(headings(get(t, s, "/?group=owner").Body.String())).To(BeEmpty())

	if testing.Short() {
		return
	}
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	ctx := browsertest.New(t)
	g.Expect(chromedp.Do(ctx, chromedp.Navigate(srv.URL+"/?group=set"), chromedp.WaitVisible(chromedp.CSS("tr.ghead")))).To(Succeed())
	browsertest.Screenshot(t, ctx, "memory-overview-grouped")
}
