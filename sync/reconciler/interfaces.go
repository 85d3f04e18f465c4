package reconciler

import (
	"context"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"sigs.k8s.io/controller-runtime/pkg/event"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
	"github.com/converge-gitops/converge/sources"
	"github.com/converge-gitops/converge/sync/apply"
	"github.com/converge-gitops/converge/sync/cluster"
	"github.com/converge-gitops/converge/sync/postbuild"
	"github.com/converge-gitops/converge/sync/render"
)

// Fetcher gives the reconciler the commit a SyncTarget's source points at, and its tree.
// GitFetcher is the daemon's; tests drive the reconciler with fakes.
type Fetcher interface {
	// Resolve returns the revision the source's ref points at now, as "<ref>@sha1:<hex>".
	Resolve(ctx context.Context, st *convergev1.SyncTarget) (string, error)
	// ResolveFresh returns the revision of the source as it stands after since, for
	// reconciles a user (or a push) asked for at since: ready is false while the poll
	// triggered for it is under way.
	ResolveFresh(ctx context.Context, st *convergev1.SyncTarget, since time.Time) (revision string, ready bool, err error)
	// Checkout returns a read-only directory holding the tree of revision.
	Checkout(ctx context.Context, st *convergev1.SyncTarget, revision string) (string, error)
	// Verify checks the signatures of revision against the keys of spec.source.verify.
	Verify(ctx context.Context, st *convergev1.SyncTarget, revision string) (sources.Verification, error)
	// CommitTime tells when revision was committed, when known, for the commit to healthy
	// latency.
	CommitTime(st *convergev1.SyncTarget, revision string) (time.Time, bool)
	// Forget drops what the fetcher keeps of a SyncTarget that is gone.
	Forget(key client.ObjectKey)
	// Wakeups receives the SyncTargets whose source has news (a new revision, a new error);
	// nil when the fetcher wakes none.
	Wakeups() <-chan event.GenericEvent
}

// Origins is a Fetcher that tells where a revision says it comes from: the source and
// revision an OCI artifact's manifest names. ok is false when it names none, or when the
// revision is no artifact's.
type Origins interface {
	Origin(ctx context.Context, st *convergev1.SyncTarget, revision string) (*convergev1.ArtifactOrigin, bool)
}

// Renderer turns a checked-out tree into the objects a SyncTarget applies, owner labels
// and target namespace set, the spec.postBuild variables of vars substituted and, for a
// chart, its spec.helm values used. A rendering error is the commit's fault (BuildFailed).
// to is what the render knows of the cluster st's objects go to (see cluster.Destination).
// The result's Chart says whether the revision is a Helm chart (from a chart repository,
// or a directory holding a Chart.yaml): the one answer to "is this a chart?" that a
// deploy's steps follow.
type Renderer interface {
	Render(ctx context.Context, st *convergev1.SyncTarget, to cluster.Destination, root string, vars postbuild.Variables) (*render.Result, error)
}

// HealthChecker waits until the objects are healthy, or says which are not. A failure
// reported before since (when the apply began) is taken as not judged yet. observed are
// objects as the apply's answers showed them, after since: those ready then need no watch.
// onSlow, when not nil, is called once from the caller's goroutine when the wait lasts
// longer than slowWait.
type HealthChecker interface {
	Wait(ctx context.Context, on cluster.Cluster, st *convergev1.SyncTarget, objects, observed []*unstructured.Unstructured,
		since time.Time, timeout time.Duration, onSlow func()) error
}

// Applier applies a revision's objects through c, the client the SyncTarget acts with;
// live is what the caller read of them already (see apply.CheckOwnership). apply.Applier
// is the daemon's. opts carries what the SyncTarget asks of this apply (see
// SyncTarget.CleanUpOtherTools).
type Applier interface {
	Apply(ctx context.Context, c client.Client, objects []*unstructured.Unstructured, live apply.Live,
		timeout time.Duration, opts apply.Options) (apply.Result, error)
}

// slowWait is how long a step (a poll the reconcile waits for, an apply, a health wait)
// runs before the status says it is under way: a shorter one is over before anyone could
// read it, and saying so costs a write.
const slowWait = 2 * time.Second
