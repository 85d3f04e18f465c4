package ui

import (
	"net/http/httptest"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	. "github.com/onsi/gomega"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
	"github.com/converge-gitops/converge/internal/browsertest"
)

// add puts a SyncTarget into the store, as an informer would see it created.
func (m *MemoryStore) add(st convergev1.SyncTarget) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.targets = append(m.targets, st)
	sortTargets(m.targets)
}

// TestLiveInsertKeepsToItsPage opens the first page of an overview of 1001 SyncTargets in
// Chromium; of two SyncTargets created meanwhile, the one that sorts among the page's rows
// shows up live, the one that sorts after them does not: it belongs to a later page.
func TestLiveInsertKeepsToItsPage(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a browser")
	}
	g := NewWithT(t)
	store := NewMemoryStore(fakeTargets(2*pageSize+1), nil)
	s := NewWithStore(Options{Now: func() time.Time { return fixedNow }}, store, nil)
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)

	ctx := browsertest.New(t)
	g.Expect(chromedp.Do(ctx, chromedp.Navigate(srv.URL+"/"), chromedp.WaitVisible(chromedp.CSS("#targets")))).To(Succeed())
	_, err := chromedp.Run(ctx, chromedp.Poll[string](`document.body.dataset.live === "on" ? "on" : null`, chromedp.WithPollingTimeout(10*time.Second)))
	g.Expect(err).NotTo(HaveOccurred())
	rows := func() int {
		n, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll("#targets tbody tr").length`))
		g.Expect(err).NotTo(HaveOccurred())
		return n
	}
	g.Expect(rows()).To(Equal(pageSize))

	store.add(fakeTarget("zzz", "late", true))
	s.hub.publish(change{Kind: "target", Key: "zzz/late"})
	store.add(fakeTarget("team-0", "app-0000b", true))
	s.hub.publish(change{Kind: "target", Key: "team-0/app-0000b"})

	g.Eventually(rows, 10*time.Second, 100*time.Millisecond).Should(Equal(pageSize + 1))
	second, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.querySelectorAll("#targets tbody tr")[1].querySelector("a").getAttribute("href")`))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(second).To(Equal("/targets/team-0/app-0000b"), "inserted in order")
	g.Consistently(func() bool {
		found, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`!!document.querySelector('#targets a[href="/targets/zzz/late"]')`))
		g.Expect(err).NotTo(HaveOccurred())
		return found
	}, time.Second, 100*time.Millisecond).Should(BeFalse(), "a SyncTarget of a later page stays off this one")
}
