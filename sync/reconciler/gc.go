package reconciler

import (
	"context"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
	"github.com/converge-gitops/converge/sources"
)

// CacheGC removes the checkouts no SyncTarget needs any more. It never removes the
// fetched, attempted, applied or last healthy revision of any SyncTarget — the last
// healthy one is what a rollback renders — and the cache itself spares checkouts handed
// out recently. It runs on every replica, as each has its own cache.
type CacheGC struct {
	Reader client.Reader
	Cache  *sources.Cache
	// Every is the period of collections.
	Every time.Duration
}

// Collect removes unneeded checkouts once and returns their directories.
func (g *CacheGC) Collect(ctx context.Context) ([]string, error) {
	list := &convergev1.SyncTargetList{}
	if err := g.Reader.List(ctx, list); err != nil {
		return nil, err
	}
	keep := map[string]bool{}
	for _, st := range list.Items {
		s := st.Status
		for _, r := range []string{s.LastFetchedRevision, s.LastAttemptedRevision, s.LastAppliedRevision, s.LastHealthyRevision} {
			if rev, err := sources.ParseRevision(r); err == nil {
				keep[rev.Commit] = true
			}
		}
	}
	return g.Cache.GC(func(commit string) bool { return keep[commit] })
}

// Start collects every g.Every until ctx ends.
func (g *CacheGC) Start(ctx context.Context) error {
	t := time.NewTicker(g.Every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			if removed, err := g.Collect(ctx); err != nil {
				log.FromContext(ctx).Error(err, "collecting unused checkouts")
			} else if len(removed) > 0 {
				log.FromContext(ctx).Info("removed unused checkouts", "count", len(removed))
			}
		}
	}
}

// NeedLeaderElection is false: every replica has a cache of its own.
func (g *CacheGC) NeedLeaderElection() bool { return false }
