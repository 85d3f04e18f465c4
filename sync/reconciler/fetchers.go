package reconciler

import (
	"context"
	"errors"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
	"github.com/converge-gitops/converge/sources"
)

// errNoChartFetcher: a SyncTarget follows a chart repository or an OCI registry, and no
// fetcher of charts and artifacts is configured.
var errNoChartFetcher = errors.New("this converge fetches no charts or artifacts from chart repositories or registries")

// SourceFetchers is the daemon's Fetcher: a SyncTarget with spec.chart or spec.oci is
// served by Chart (the registry client follows both), every other by Git. Both wake SyncTargets through the same channel (Git's Wakeups).
type SourceFetchers struct {
	Git   Fetcher
	Chart Fetcher
}

func (f SourceFetchers) pick(st *convergev1.SyncTarget) (Fetcher, error) {
	if !st.IsChart() && !st.IsOCI() {
		return f.Git, nil
	}
	if f.Chart == nil {
		return nil, errNoChartFetcher
	}
	return f.Chart, nil
}

// Resolve implements Fetcher.
func (f SourceFetchers) Resolve(ctx context.Context, st *convergev1.SyncTarget) (string, error) {
	x, err := f.pick(st)
	if err != nil {
		return "", err
	}
	return x.Resolve(ctx, st)
}

// ResolveFresh implements Fetcher.
func (f SourceFetchers) ResolveFresh(ctx context.Context, st *convergev1.SyncTarget, since time.Time) (string, bool, error) {
	x, err := f.pick(st)
	if err != nil {
		return "", true, err
	}
	return x.ResolveFresh(ctx, st, since)
}

// Checkout implements Fetcher.
func (f SourceFetchers) Checkout(ctx context.Context, st *convergev1.SyncTarget, revision string) (string, error) {
	x, err := f.pick(st)
	if err != nil {
		return "", err
	}
	return x.Checkout(ctx, st, revision)
}

// Verify implements Fetcher.
func (f SourceFetchers) Verify(ctx context.Context, st *convergev1.SyncTarget, revision string) (sources.Verification, error) {
	x, err := f.pick(st)
	if err != nil {
		return sources.Verification{}, err
	}
	return x.Verify(ctx, st, revision)
}

// CommitTime implements Fetcher.
func (f SourceFetchers) CommitTime(st *convergev1.SyncTarget, revision string) (time.Time, bool) {
	x, err := f.pick(st)
	if err != nil {
		return time.Time{}, false
	}
	return x.CommitTime(st, revision)
}

// Forget implements Fetcher: both forget the SyncTarget (its source may have changed kind).
func (f SourceFetchers) Forget(key client.ObjectKey) {
	f.Git.Forget(key)
	if f.Chart != nil {
		f.Chart.Forget(key)
	}
}

// Wakeups implements Fetcher.
func (f SourceFetchers) Wakeups() <-chan event.GenericEvent {
	return f.Git.Wakeups()
}

// Origin implements Origins, for the fetcher that serves st when it tells.
func (f SourceFetchers) Origin(ctx context.Context, st *convergev1.SyncTarget, revision string) (*convergev1.ArtifactOrigin, bool) {
	x, err := f.pick(st)
	if err != nil {
		return nil, false
	}
	of, ok := x.(Origins)
	if !ok {
		return nil, false
	}
	return of.Origin(ctx, st, revision)
}
