package reconciler

import (
	"context"
	"sync"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
	"github.com/converge-gitops/converge/sources"
	"github.com/converge-gitops/converge/sync/target"
)

// GitFetcher is the Fetcher of the daemon. With a Scheduler, every SyncTarget subscribes
// to the poller of its (URL, ref, credentials), shared by all SyncTargets following the
// same source, and learns its revision from the poller's last result — a reconcile costs
// no network — and a new revision wakes its SyncTargets through Wake. Without one, each
// Resolve lists the remote's refs. Credentials come from a Secret in the SyncTarget's own
// namespace, never another.
type GitFetcher struct {
	// Reader reads the credentials Secrets.
	Reader client.Reader
	Cache  *sources.Cache
	// Scheduler, when set, polls the sources.
	Scheduler *sources.Scheduler
	// Wakes wakes the SyncTargets whose source has news.
	Wakes

	mu        sync.Mutex
	refreshed refreshes
	// direct is the revision a SyncTarget resolved by asking the remote itself, before its
	// poller's first poll: that poll finding the same revision is no news to wake it for.
	direct   map[string]string
	verifier *sources.Verifier // made on first use, see Verify
}

// Source builds the sources.Source of a SyncTarget, with its credentials.
func (f *GitFetcher) Source(ctx context.Context, st *convergev1.SyncTarget) (sources.Source, error) {
	return target.For(st, f.Reader, nil).Source(ctx)
}

// Resolve implements Fetcher.
func (f *GitFetcher) Resolve(ctx context.Context, st *convergev1.SyncTarget) (string, error) {
	src, err := f.Source(ctx, st)
	if err != nil {
		return "", err
	}
	return f.resolve(ctx, st, src)
}

// resolve is Resolve with the source (and its credentials) read already.
func (f *GitFetcher) resolve(ctx context.Context, st *convergev1.SyncTarget, src sources.Source) (string, error) {
	if f.Scheduler != nil {
		key := client.ObjectKeyFromObject(st)
		id := key.String()
		err := f.Scheduler.Subscribe(sources.Subscription{
			ID: id, Source: src, Interval: st.GetInterval(), Schedule: string(st.Spec.Source.Schedule),
			Notify: func(ev sources.Event) {
				if !f.known(id, ev) {
					f.wake(key)
				}
			},
		})
		if err != nil {
			return "", err
		}
		if ev, ok := f.Scheduler.Latest(id); ok && (ev.Err != nil || !ev.Revision.IsZero()) {
			if ev.Err != nil {
				return "", ev.Err
			}
			return ev.Revision.String(), nil
		}
		// Not polled yet: ask the remote directly this once.
	}
	rev, err := sources.Resolve(ctx, src)
	if err != nil {
		return "", err
	}
	if f.Scheduler != nil {
		f.mu.Lock()
		if f.direct == nil {
			f.direct = map[string]string{}
		}
		f.direct[client.ObjectKeyFromObject(st).String()] = rev.String()
		f.mu.Unlock()
	}
	return rev.String(), nil
}

// known reports whether ev, a poll's result for the SyncTarget id, tells it nothing new:
// the first poll after it resolved the revision directly, finding that revision.
func (f *GitFetcher) known(id string, ev sources.Event) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	rev, ok := f.direct[id]
	delete(f.direct, id)
	return ok && ev.Err == nil && ev.Revision.String() == rev
}

// ResolveFresh resolves the SyncTarget's revision as its source stands after since (when
// a user asked for a reconcile): it asks the poller for a poll now, once, and reports
// ready only when a poll that started after since has finished, so that `converge
// reconcile` right after a push deploys the push and not the revision polled before it.
// Until then the caller should look again shortly.
func (f *GitFetcher) ResolveFresh(ctx context.Context, st *convergev1.SyncTarget, since time.Time) (string, bool, error) {
	src, err := f.Source(ctx, st) // the credentials Secret, read once for both uses
	if err != nil {
		return "", true, err
	}
	rev, err := f.resolve(ctx, st, src) // subscribes
	if f.Scheduler == nil {
		return rev, true, err // resolve asked the remote itself
	}
	id := client.ObjectKeyFromObject(st).String()
	if ev, ok := f.Scheduler.Latest(id); ok && !ev.Time.Before(since) {
		return rev, true, err
	}
	f.mu.Lock()
	delete(f.direct, id) // the reconcile waits for the poll's end to wake it
	f.mu.Unlock()
	if f.refreshed.ask(id, since) {
		if trigErr := f.Scheduler.Trigger(src.Key()); trigErr != nil {
			f.refreshed.forget(id)
			return rev, true, err // not polled by the scheduler: what Resolve said stands
		}
	}
	return rev, false, nil
}

// Forget ends the SyncTarget's subscription (it was deleted).
func (f *GitFetcher) Forget(key client.ObjectKey) {
	if f.Scheduler != nil {
		f.Scheduler.Unsubscribe(key.String())
	}
	f.refreshed.forget(key.String())
	f.mu.Lock()
	delete(f.direct, key.String())
	f.mu.Unlock()
}

// Checkout implements Fetcher: a cached tree costs nothing, a missing one is fetched by SHA.
func (f *GitFetcher) Checkout(ctx context.Context, st *convergev1.SyncTarget, revision string) (string, error) {
	rev, err := sources.ParseRevision(revision)
	if err != nil {
		return "", err
	}
	src, err := f.Source(ctx, st)
	if err != nil {
		return "", err
	}
	return f.Cache.Checkout(ctx, src, rev)
}

// CommitTime returns when revision was committed, when its tree is in the cache.
func (f *GitFetcher) CommitTime(st *convergev1.SyncTarget, revision string) (time.Time, bool) {
	rev, err := sources.ParseRevision(revision)
	if err != nil {
		return time.Time{}, false
	}
	return f.Cache.CommitTime(sources.Source{URL: st.Spec.Source.URL}, rev)
}
