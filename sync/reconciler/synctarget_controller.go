package reconciler

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
	"github.com/converge-gitops/converge/health"
	"github.com/converge-gitops/converge/sources"
	"github.com/converge-gitops/converge/sync/apply"
	"github.com/converge-gitops/converge/sync/cluster"
)

// Finalizer lets converge prune (or orphan) a SyncTarget's objects when it is deleted.
const Finalizer = "converge.dev/finalizer"

// Reconciler keeps SyncTargets converged: fetch → render → apply → prune → health →
// record, and rolls a revision that fails back to the last healthy one.
type Reconciler struct {
	client.Client
	// APIReader reads a SyncTarget when the cache may be behind our own last write.
	APIReader client.Reader
	// Recorder emits the events of every apply, prune, failure and rollback.
	Recorder events.EventRecorder
	Fetcher  Fetcher
	Renderer Renderer
	Health   HealthChecker
	Applier  Applier
	// Clusters give the cluster each SyncTarget's objects are on, and the daemon's own
	// (cluster.Set is the daemon's).
	Clusters cluster.Clusters
	Clock    clock.Clock
	// DefaultServiceAccount is impersonated for SyncTargets that name none (multi-tenancy).
	DefaultServiceAccount string
	// FullSyncInterval is how often an unchanged revision is re-applied anyway.
	FullSyncInterval time.Duration
	// NoCrossNamespaceDependencies refuses dependsOn entries naming another namespace
	// (multi-tenancy: a tenant must not learn whether another namespace's SyncTarget
	// exists or is Ready).
	NoCrossNamespaceDependencies bool
	// MaxConcurrentPerNamespace caps the reconciles of one namespace that run at once
	// (see NamespaceLimiter); zero or less leaves them uncapped.
	MaxConcurrentPerNamespace int
	scheduler                 *sources.Scheduler
	charts                    *ChartFetcher
	// metadata is the cache of ConfigMaps' and Secrets' metadata (cluster-wide), made by
	// NewReconciler unless drift is not watched: a change to one that a SyncTarget's
	// variables or kubeconfig name deploys at once (see watchVariables), and it tells a
	// kubeconfig Secret unchanged. Nil, such a change is picked up at the interval.
	metadata cache.Cache
	states   states
}

// Reconcile reads like the flow of one SyncTarget: the gates, then a sync whose steps
// are the methods of run; one outcome comes out and becomes the status.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (_ ctrl.Result, retErr error) {
	st, err := r.getSyncTarget(ctx, req.NamespacedName)
	if err != nil || st == nil {
		if st == nil && err == nil {
			r.Forget(req.NamespacedName)
		}
		return ctrl.Result{}, err
	}
	if !st.DeletionTimestamp.IsZero() {
		return r.finalize(ctx, st)
	}
	if !controllerutil.ContainsFinalizer(st, Finalizer) {
		patch := client.MergeFrom(st.DeepCopy())
		controllerutil.AddFinalizer(st, Finalizer)
		if err := r.Patch(ctx, st, patch); err != nil {
			return ctrl.Result{}, fmt.Errorf("adding the finalizer: %w", err)
		}
	}
	ru := r.newRun(st)
	defer func() { retErr = errors.Join(retErr, ru.patchStatus(ctx)) }()
	return ru.finish(ru.reconcile(ctx))
}

// reconcile runs the gates, then the sync.
func (ru *run) reconcile(ctx context.Context) outcome {
	if ru.st.Spec.Suspend {
		return outcome{kind: suspended}
	}
	for _, gate := range []func(context.Context) *outcome{ru.checkSpec, ru.checkDependencies, ru.checkSyncWindows} {
		if o := gate(ctx); o != nil {
			return *o
		}
	}
	return ru.sync(ctx)
}

// getSyncTarget reads a SyncTarget from the cache, or from the API server when the cache
// has not caught up with our own last status write yet: acting on a stale status would
// redo a sync that just finished. In steady state this costs no request: a change made by
// someone else after our write costs one read, which shows the cache caught up.
func (r *Reconciler) getSyncTarget(ctx context.Context, key client.ObjectKey) (*convergev1.SyncTarget, error) {
	st := &convergev1.SyncTarget{}
	if err := r.Get(ctx, key, st); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, err
	}
	state := r.states.get(key)
	if rv := state.lastWrite; rv != "" && rv != st.ResourceVersion && r.APIReader != nil {
		cached := st.ResourceVersion
		if err := r.APIReader.Get(ctx, key, st); err != nil {
			return nil, client.IgnoreNotFound(err)
		}
		if st.ResourceVersion == cached {
			state.lastWrite = "" // the cache holds the latest, our write with it
		}
	}
	return st, nil
}

// interval is when to look at the source again: the next activation of its cron
// schedule, or its interval.
func (r *Reconciler) interval(st *convergev1.SyncTarget) time.Duration {
	if s := st.GetSchedule(); s != "" {
		if sched, err := cronParser.Parse(string(s)); err == nil {
			now := r.Clock.Now()
			return max(sched.Next(now).Sub(now), time.Second)
		}
	}
	return st.GetInterval()
}

// checkSpec stalls on what the API server could not check: health rules that do not
// compile would otherwise fail every revision's health check and roll it back.
func (ru *run) checkSpec(context.Context) *outcome {
	if err := health.ValidateExprs(ru.st.Spec.HealthCheckExprs); err != nil {
		return &outcome{kind: stalled, reason: convergev1.InvalidSpecReason, message: "spec.healthCheckExprs: " + err.Error()}
	}
	return nil
}

// checkDependencies holds the SyncTarget until every SyncTarget it depends on is ready.
func (ru *run) checkDependencies(ctx context.Context) *outcome {
	for _, d := range ru.st.Spec.DependsOn {
		key := ru.st.DependencyKey(d)
		if ru.r.NoCrossNamespaceDependencies && key.Namespace != ru.st.Namespace {
			return &outcome{kind: stalled, reason: convergev1.InvalidSpecReason, message: fmt.Sprintf(
				"spec.dependsOn: %s is in another namespace, and dependencies across namespaces are not allowed here", key)}
		}
		dep := &convergev1.SyncTarget{}
		msg := ""
		if err := ru.r.Get(ctx, key, dep); err != nil {
			msg = fmt.Sprintf("dependency %s: %v", key, err)
		} else if ok, why := dependencyReady(dep); !ok {
			msg = fmt.Sprintf("dependency %s %s", key, why)
		}
		if msg != "" {
			return &outcome{kind: waitingDependency, reason: convergev1.DependencyNotReadyReason, message: msg, after: 5 * time.Second}
		}
	}
	return nil
}

// checkSyncWindows holds the SyncTarget while its sync windows are closed.
func (ru *run) checkSyncWindows(context.Context) *outcome {
	now := ru.r.Clock.Now()
	allowed, next, err := SyncAllowed(now, ru.st.Spec.SyncWindows)
	switch {
	case err != nil:
		return &outcome{kind: stalled, reason: convergev1.InvalidSpecReason, message: err.Error()}
	case allowed:
		return nil
	}
	return &outcome{kind: outsideWindow, reason: convergev1.OutsideSyncWindowReason,
		message: outsideWindowMessage(next), after: windowWait(now, next, ru.r.interval(ru.st))}
}

// event emits one event carrying the revision.
func (r *Reconciler) event(st *convergev1.SyncTarget, typ, reason, revision, msg string) {
	if r.Recorder == nil || reason == "" {
		return
	}
	note := trim(msg)
	if revision != "" && !strings.Contains(note, revision) {
		note = note + " (revision " + revision + ")"
	}
	r.Recorder.Eventf(st, nil, typ, reason, "Sync", "%s", note)
}

// Forget drops everything kept of a SyncTarget that is gone: its state, its poller
// subscription and fresh-resolve marks (the fetcher), and the drift seen of its objects.
func (r *Reconciler) Forget(key client.ObjectKey) {
	r.Fetcher.Forget(key)
	r.localDrift().Forget(key)
	if r.Clusters != nil {
		r.Clusters.Release(key)
	}
	r.states.forget(key)
}

// ownerExists reports whether the SyncTarget key exists (from the cache).
func (r *Reconciler) ownerExists(ctx context.Context, key client.ObjectKey) (bool, error) {
	err := r.Get(ctx, key, &convergev1.SyncTarget{})
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	return err == nil, err
}

// finalize prunes the SyncTarget's objects (when prune is on) or orphans them, then lets
// the SyncTarget go.
func (r *Reconciler) finalize(ctx context.Context, st *convergev1.SyncTarget) (ctrl.Result, error) {
	if !controllerutil.ContainsFinalizer(st, Finalizer) {
		return ctrl.Result{}, nil
	}
	if st.Spec.Prune && !st.Spec.Suspend && st.Status.Inventory != nil && !r.remoteSecretGone(ctx, st) {
		c, err := r.clientFor(ctx, st)
		if err != nil {
			return ctrl.Result{}, err
		}
		res, err := apply.Prune(ctx, c, client.ObjectKeyFromObject(st), st.Status.Inventory.Entries)
		if err != nil {
			return ctrl.Result{}, fmt.Errorf("pruning on delete: %w", err)
		}
		if len(res.Deleted) > 0 {
			r.event(st, "Normal", "Pruned", "", fmt.Sprintf("deleted %d objects with the SyncTarget", len(res.Deleted)))
		}
	}
	patch := client.MergeFrom(st.DeepCopy())
	controllerutil.RemoveFinalizer(st, Finalizer)
	return ctrl.Result{}, client.IgnoreNotFound(r.Patch(ctx, st, patch))
}
