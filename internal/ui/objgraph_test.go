package ui

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
	"github.com/converge-gitops/converge/internal/browsertest"
)

// TestResourceGraph draws, against a real API server, a SyncTarget's objects and what
// they own: the Deployment, its ReplicaSet and both its Pods (not another app's), health
// on each; 16 ConfigMaps start folded, the one missing from the cluster still drawn and
// the 15 others counted; the kind's node opens the fold, and the page reads itself
// again with it open. In Chromium too.
func TestResourceGraph(t *testing.T) {
	c, cfg := cluster(t)
	g := NewWithT(t)
	ctx := context.Background()
	st := workload(t, c, "graph-a", "no-node")
	for i := range 16 {
		name := fmt.Sprintf("cm-%02d", i)
		if i == 15 {
			name = "cm-missing"
		} else {
			g.Expect(c.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "graph-a", Name: name}})).To(Succeed())
		}
		st.Status.Inventory.Entries = append(st.Status.Inventory.Entries, convergev1.InventoryEntry{ID: "graph-a_" + name + "__ConfigMap", Version: "v1"})
	}
	s := NewWithStore(Options{Config: cfg}, NewMemoryStore([]convergev1.SyncTarget{*st}, nil), c)

	g.Expect(get(t, s, "/targets/graph-a/web").Body.String()).To(ContainSubstring(`href="/targets/graph-a/web/graph">draw them as a graph</a>`))
	rec := get(t, s, "/targets/graph-a/web/graph")
	g.Expect(rec.Code).To(Equal(http.StatusOK))
	body := rec.Body.String()
	g.Expect(body).To(ContainSubstring(`<p class="hint">17 objects`))
	node := func(class, href, title string) string {
		open := `<g class="node ` + class + `">`
		if href != "" {
			open = `<a href="` + href + `" class="node ` + class + `">`
		}
		return open + "<title>" + title
	}
	g.Expect(body).To(ContainSubstring(node("target ready", "/targets/graph-a/web", "graph-a/web: Ready")))
	g.Expect(body).To(ContainSubstring(node("h-busy", "/targets/graph-a/web/objects/graph-a_web_apps_Deployment", "Deployment.apps web: InProgress (Replicas: 0/1 (LessReplicas))")))
	g.Expect(body).To(ContainSubstring(node("h-busy", "", "ReplicaSet web-7d9f: InProgress")))
	g.Expect(body).To(MatchRegexp(`<g class="node h-\w+"><title>Pod web-7d9f-crash: `))
	g.Expect(body).To(MatchRegexp(`<g class="node h-\w+"><title>Pod web-7d9f-fine: `))
	g.Expect(body).NotTo(ContainSubstring("other-app"))
	folded := "/targets/graph-a/web/graph?open=graph-a%2FConfigMap"
	g.Expect(body).To(ContainSubstring(node("kind h-bad", folded, "ConfigMap ×16 in graph-a: open")))
	g.Expect(body).To(ContainSubstring(node("h-bad", "/targets/graph-a/web/objects/graph-a_cm-missing__ConfigMap", "ConfigMap cm-missing: NotFound")))
	g.Expect(body).To(ContainSubstring(node("more", folded, "open ConfigMap ×16")))
	g.Expect(body).To(ContainSubstring(">15 more Current</text>"))
	g.Expect(body).NotTo(ContainSubstring("ConfigMap cm-03"))
	// 8 nodes: the SyncTarget, 2 kinds, the Deployment, its ReplicaSet, 2 Pods, cm-missing and the count.
	g.Expect(strings.Count(body, "<rect ")).To(Equal(9))
	g.Expect(strings.Count(body, `<path class="edge"`)).To(Equal(8))

	opened := get(t, s, folded).Body.String()
	g.Expect(opened).To(ContainSubstring(node("h-ok", "/targets/graph-a/web/objects/graph-a_cm-03__ConfigMap", "ConfigMap cm-03: Current")))
	g.Expect(opened).To(ContainSubstring(node("kind h-bad", "/targets/graph-a/web/graph", "ConfigMap ×16 in graph-a: fold")))
	g.Expect(opened).To(ContainSubstring(`data-src="/targets/graph-a/web/graph?open=graph-a%2FConfigMap&amp;fragment=1"`))
	g.Expect(opened).NotTo(ContainSubstring("more Current"))
	frag := get(t, s, "/targets/graph-a/web/graph?open=graph-a%2FConfigMap&fragment=1").Body.String()
	g.Expect(frag).To(HavePrefix(`<p class="hint">17 objects`))
	g.Expect(frag).To(ContainSubstring("ConfigMap cm-03: Current"))

	if testing.Short() {
		return
	}
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	bctx := browsertest.New(t)
	g.Expect(chromedp.Do(bctx, chromedp.Navigate(srv.URL+"/targets/graph-a/web"), chromedp.WaitVisible(chromedp.CSS("a.graphlink")))).To(Succeed())
	g.Expect(within(bctx, chromedp.Click(chromedp.CSS("a.graphlink")), chromedp.WaitVisible(chromedp.CSS(".rgraph svg")))).To(Succeed())
	g.Expect(within(bctx, chromedp.Click(chromedp.CSS(`a.node.kind[href*="open="]`)),
		chromedp.WaitVisible(chromedp.CSS(`a.node[href$="graph-a_cm-03__ConfigMap"]`)))).To(Succeed())
	n, err := chromedp.Run(bctx, chromedp.Evaluate[int](`document.querySelectorAll('.rgraph .node').length`))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(n).To(Equal(23), "the 15 ConfigMaps drawn in place of their count")
	browsertest.Screenshot(t, bctx, "memory-graph")
}
