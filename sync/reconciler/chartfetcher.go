package reconciler

import (
	"context"
	"strings"
	"sync"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
	"github.com/converge-gitops/converge/sources"
	"github.com/converge-gitops/converge/sources/charts"
	"github.com/converge-gitops/converge/sync/target"
)

// ChartFetcher is the Fetcher of SyncTargets that follow a chart (spec.chart) or a
// configuration artifact of an OCI registry (spec.oci). Every SyncTarget subscribes to
// the poller of its chart or artifact (repository, name, version range, tag or digest,
// and credentials), shared by all SyncTargets following the same one, at its interval or
// schedule; it learns its revision, "<version or tag>@sha256:<hex>", from the poller's last
// result — a reconcile costs no request once the chart was polled — and a poll that finds
// a new version (or a new error) wakes it through Wake. Credentials and trusted keys come
// from Secrets of the SyncTarget's own namespace, never another.
type ChartFetcher struct {
	// Reader reads the credentials and trusted keys Secrets.
	Reader client.Reader
	// Client resolves, downloads and verifies the charts.
	Client *charts.Client
	// Wakes wakes the SyncTargets whose source has news.
	Wakes
	// Now tells the time of polls (default time.Now).
	Now func() time.Time

	mu        sync.Mutex
	sched     *charts.Scheduler
	refreshed refreshes
}

var _ Fetcher = (*ChartFetcher)(nil)

// Start runs until ctx ends, then stops the pollers (a manager.Runnable). Pollers start
// with the first subscription whether Start runs or not.
func (f *ChartFetcher) Start(ctx context.Context) error {
	<-ctx.Done()
	f.scheduler().Stop()
	return nil
}

// Stop ends the pollers.
func (f *ChartFetcher) Stop() { f.scheduler().Stop() }

func (f *ChartFetcher) scheduler() *charts.Scheduler {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.sched == nil {
		f.sched = &charts.Scheduler{Client: f.Client, Now: f.Now}
	}
	return f.sched
}

// Resolve implements Fetcher: the version the chart's poller found last; the first
// Resolve of a chart waits for its poller's first poll.
func (f *ChartFetcher) Resolve(ctx context.Context, st *convergev1.SyncTarget) (string, error) {
	ev, err := f.latest(ctx, st)
	if err != nil {
		return "", err
	}
	return ev.Result.String(), nil
}

// latest subscribes the SyncTarget and returns its chart's last poll, waiting for the
// first one. A failed poll is its error; so is a chart source that cannot be built (with
// no poll time).
func (f *ChartFetcher) latest(ctx context.Context, st *convergev1.SyncTarget) (charts.Event, error) {
	src, err := f.source(ctx, st)
	if err != nil {
		return charts.Event{}, err
	}
	s := f.scheduler()
	key := client.ObjectKeyFromObject(st)
	id := key.String()
	err = s.Subscribe(charts.Subscription{ID: id, Source: src, Interval: st.GetInterval(),
		Schedule: string(st.GetSchedule()), Notify: func(ev charts.Event) { f.notify(key, ev) }})
	if err != nil {
		return charts.Event{}, err
	}
	ev, err := s.Wait(ctx, id)
	if err != nil {
		return charts.Event{}, err
	}
	return ev, ev.Err
}

// source builds the charts.Source of a SyncTarget, chart or artifact, with its
// credentials and keys.
func (f *ChartFetcher) source(ctx context.Context, st *convergev1.SyncTarget) (charts.Source, error) {
	if st.IsOCI() {
		return target.For(st, f.Reader, nil).Artifact(ctx)
	}
	return target.For(st, f.Reader, nil).Chart(ctx)
}

// notify wakes the SyncTarget after a poll that found news, or that a reconcile a user
// asked for waits for.
func (f *ChartFetcher) notify(key client.ObjectKey, ev charts.Event) {
	answered := f.refreshed.answered(key.String(), ev.Time)
	// The first poll answers the Resolve that subscribed: no news for it.
	if (ev.Changed && !ev.First) || answered {
		f.wake(key)
	}
}

// ResolveFresh implements Fetcher: ready once a poll that started after since ended; until
// then it asks for one poll now and returns what was polled before.
func (f *ChartFetcher) ResolveFresh(ctx context.Context, st *convergev1.SyncTarget, since time.Time) (string, bool, error) {
	ev, err := f.latest(ctx, st)
	if err != nil && ev.Time.IsZero() {
		return "", true, err // no source, not subscribed, or no poll ended
	}
	if !ev.Time.Before(since) {
		return ev.Result.String(), true, err
	}
	id := client.ObjectKeyFromObject(st).String()
	if f.refreshed.ask(id, since) {
		if trigErr := f.scheduler().Trigger(id); trigErr != nil {
			f.refreshed.forget(id)
			return ev.Result.String(), true, err
		}
	}
	return ev.Result.String(), false, nil
}

// Forget ends the SyncTarget's subscription (it was deleted).
func (f *ChartFetcher) Forget(key client.ObjectKey) {
	f.scheduler().Unsubscribe(key.String())
	f.refreshed.forget(key.String())
}

// Checkout implements Fetcher: the directory of the chart of revision (the one holding
// Chart.yaml), or the tree of the artifact; one in the cache costs no request.
func (f *ChartFetcher) Checkout(ctx context.Context, st *convergev1.SyncTarget, revision string) (string, error) {
	src, r, err := f.revision(ctx, st, revision)
	if err != nil {
		return "", err
	}
	return f.Client.Fetch(ctx, src, r)
}

// revision reads the source of st and the chart revision names, with the URL its poller
// found when it is the one polled.
func (f *ChartFetcher) revision(ctx context.Context, st *convergev1.SyncTarget, revision string) (charts.Source, charts.Resolved, error) {
	r, err := charts.ParseRevision(revision)
	if err != nil {
		return charts.Source{}, r, err
	}
	src, err := f.source(ctx, st)
	if err != nil {
		return src, r, err
	}
	if ev, ok := f.scheduler().Latest(client.ObjectKeyFromObject(st).String()); ok && ev.Result.String() == revision {
		r = ev.Result
	}
	return src, r, nil
}

// Verify implements Fetcher: with spec.chart.verify, the chart's provenance must be
// signed by one of its keys and name the archive; with spec.oci.verify, the artifact must
// be signed with cosign by one of its keys; or the revision is refused (a
// *sources.VerificationError). Without, there is nothing to verify.
func (f *ChartFetcher) Verify(ctx context.Context, st *convergev1.SyncTarget, revision string) (sources.Verification, error) {
	src, r, err := f.revision(ctx, st, revision)
	if err != nil {
		return sources.Verification{}, err
	}
	if src.Keyring == nil && src.CosignKeys == nil {
		return sources.Verification{}, nil
	}
	s, err := f.Client.VerifySigner(ctx, src, r)
	if err != nil {
		return sources.Verification{}, err
	}
	object := "chart " + src.Name + " " + r.Version
	if src.IsArtifact() {
		object = "artifact " + strings.TrimPrefix(src.Repository, "oci://") + "@" + r.Digest
	}
	return sources.Verification{Signers: []sources.Signer{{Object: object, Key: s.Key, Identity: s.Identity}}}, nil
}

// CommitTime implements Fetcher: a chart has no commit time.
func (f *ChartFetcher) CommitTime(*convergev1.SyncTarget, string) (time.Time, bool) {
	return time.Time{}, false
}

// Origin implements Origins: where the artifact of revision says it comes from (read
// from its manifest, which Checkout read already). A chart has none.
func (f *ChartFetcher) Origin(ctx context.Context, st *convergev1.SyncTarget, revision string) (*convergev1.ArtifactOrigin, bool) {
	if !st.IsOCI() {
		return nil, false
	}
	src, r, err := f.revision(ctx, st, revision)
	if err != nil {
		return nil, false
	}
	o, ok, err := f.Client.ArtifactOrigin(ctx, src, r)
	if err != nil || !ok {
		return nil, false
	}
	return &convergev1.ArtifactOrigin{Source: o.Source, Revision: o.Revision}, true
}
