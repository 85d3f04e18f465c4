package reconciler_test

import (
	"context"
	"testing"

	. "github.com/onsi/gomega"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
	"github.com/converge-gitops/converge/sources"
	"github.com/converge-gitops/converge/sync/reconciler"
)

// TestCacheGCKeepsWhatSyncTargetsNeed: after three commits, a collection removes the
// first checkout and keeps the current, last healthy one.
func TestCacheGCKeepsWhatSyncTargetsNeed(t *testing.T) {
	requireCluster(t)
	f := newFixture(t)
	first := f.commit(map[string]string{"deploy/a.yaml": configMap("a", "1")})
	st := f.syncTarget("gc", nil)
	eventually(t, st, func(g Gomega, st *convergev1.SyncTarget) {
		g.Expect(st.Status.LastHealthyRevision).To(Equal(first))
	})
	last := f.commit(map[string]string{"deploy/a.yaml": configMap("a", "2")})
	eventually(t, st, func(g Gomega, st *convergev1.SyncTarget) {
		g.Expect(st.Status.LastHealthyRevision).To(Equal(last))
	})

	g := NewWithT(t)
	src := sources.Source{URL: f.url}
	path := func(revision string) bool {
		rev, err := sources.ParseRevision(revision)
		g.Expect(err).NotTo(HaveOccurred())
		_, ok := checkouts.Path(src, rev)
		return ok
	}
	g.Expect(path(first)).To(BeTrue())
	g.Expect(path(last)).To(BeTrue())
	gc := &reconciler.CacheGC{Reader: k8s, Cache: checkouts}
	_, err := gc.Collect(context.Background())
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(path(first)).To(BeFalse(), "no SyncTarget needs the first revision any more")
	g.Expect(path(last)).To(BeTrue(), "the current and last healthy revision stays")
}
