package sync

import (
	"context"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
)

// Fetcher gives the reconciler the commit a SyncTarget's source points at, and its tree.
type Fetcher interface {
	// Resolve returns the revision the source's ref points at now, as "<ref>@sha1:<hex>".
	Resolve(ctx context.Context, st *convergev1.SyncTarget) (string, error)
	// Checkout returns a read-only directory holding the tree of revision.
	Checkout(ctx context.Context, st *convergev1.SyncTarget, revision string) (string, error)
}

// freshResolver is a Fetcher that can tell the revision of a source as it stands after a
// given time, for reconciles a user asked for (see GitFetcher.ResolveFresh).
type freshResolver interface {
	ResolveFresh(ctx context.Context, st *convergev1.SyncTarget, since time.Time) (revision string, ready bool, err error)
}

// Renderer turns a checked-out tree into the objects a SyncTarget applies, owner labels
// and target namespace set. A rendering error is the commit's fault (BuildFailed).
type Renderer interface {
	Render(ctx context.Context, st *convergev1.SyncTarget, root string) ([]*unstructured.Unstructured, error)
}

// HealthChecker waits until the objects are healthy, or says which are not. A failure
// reported before since (when the apply began) is taken as not judged yet. observed are
// objects as the apply's answers showed them, after since: those ready then need no watch.
// onSlow, when not nil, is called once from the caller's goroutine when the wait lasts
// longer than slowWait.
type HealthChecker interface {
	Wait(ctx context.Context, c client.Client, st *convergev1.SyncTarget, objects, observed []*unstructured.Unstructured,
		since time.Time, timeout time.Duration, onSlow func()) error
}

// slowWait is how long a step (a poll the reconcile waits for, an apply, a health wait)
// runs before the status says it is under way: a shorter one is over before anyone could
// read it, and saying so costs a write.
const slowWait = 2 * time.Second

// commitTimer is a Fetcher that knows when a revision was committed, for the commit to
// healthy latency.
type commitTimer interface {
	CommitTime(st *convergev1.SyncTarget, revision string) (time.Time, bool)
}
