package sync

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	gosync "sync"
	"time"

	"github.com/fluxcd/pkg/ssa"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
	"github.com/converge-gitops/converge/health"
	"github.com/converge-gitops/converge/sync/apply"
)

// Finalizer lets converge prune (or orphan) a SyncTarget's objects when it is deleted.
const Finalizer = "converge.dev/finalizer"

// Reconciler keeps SyncTargets converged: fetch → render → apply → prune → health →
// record, and rolls a revision that fails back to the last healthy one.
type Reconciler struct {
	client.Client
	// APIReader reads a SyncTarget when the cache may be behind our own last write.
	APIReader client.Reader
	// Config is the daemon's own client config, the base of impersonating clients.
	Config *rest.Config
	// Recorder emits the events of every apply, prune, failure and rollback.
	Recorder events.EventRecorder
	Fetcher  Fetcher
	Renderer Renderer
	Health   HealthChecker
	Applier  apply.Applier
	Clock    clock.Clock
	// DefaultServiceAccount is impersonated for SyncTargets that name none (multi-tenancy).
	DefaultServiceAccount string
	// FullSyncInterval is how often an unchanged revision is re-applied anyway.
	FullSyncInterval time.Duration
	// Drift watches managed objects; nil turns self-healing off (the full sync remains).
	Drift *DriftWatcher

	clients   gosync.Map // service account key → client.Client
	lastWrite gosync.Map // SyncTarget key → resourceVersion of our last status write
	firstSeen gosync.Map // revision → when it was first fetched
	rendered  gosync.Map // SyncTarget key → renderedSet of its last successful sync
	// requestSeen: SyncTarget key → the reconcile request being served and when it was seen.
	requestSeen gosync.Map
	lastFull    gosync.Map // SyncTarget key → when all its objects were last applied
}

// renderedSet is what the last successful sync of a SyncTarget applied, kept so that a
// drifted object can be restored without rendering or applying anything else. Objects are
// kept as JSON by inventory ID: a daemon serving a thousand SyncTargets holds every object
// they apply, and JSON takes a fraction of the memory of decoded maps.
type renderedSet struct {
	revision   string
	generation int64
	objects    map[string][]byte
}

// newRenderedSet encodes objects; false if one cannot be (nothing is kept then).
func newRenderedSet(revision string, generation int64, objects []*unstructured.Unstructured) (renderedSet, bool) {
	set := renderedSet{revision: revision, generation: generation, objects: make(map[string][]byte, len(objects))}
	for _, o := range objects {
		raw, err := o.MarshalJSON()
		if err != nil {
			return set, false
		}
		set.objects[apply.ObjectID(o)] = raw
	}
	return set, true
}

// unchanged reports whether o is what the set holds under its ID.
func (s renderedSet) unchanged(o *unstructured.Unstructured) bool {
	prev, ok := s.objects[apply.ObjectID(o)]
	if !ok {
		return false
	}
	raw, err := o.MarshalJSON()
	return err == nil && bytes.Equal(prev, raw)
}

// step results: what to do after a step.
type outcome struct {
	result ctrl.Result
	err    error
	done   bool // stop here, result and err are final
}

// Reconcile reads like the flow of one SyncTarget; each step is a method below.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (_ ctrl.Result, retErr error) {
	st, err := r.getSyncTarget(ctx, req.NamespacedName)
	if err != nil || st == nil {
		if st == nil && err == nil {
			r.forget(req.NamespacedName)
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

	ctx = withStatusPatcher(ctx, r, st)
	defer func() {
		if err := patchStatus(ctx, st); err != nil {
			retErr = errors.Join(retErr, err)
		}
	}()

	if st.Spec.Suspend {
		apimeta.RemoveStatusCondition(&st.Status.Conditions, convergev1.ReconcilingCondition)
		return ctrl.Result{}, nil
	}
	for _, step := range []func(context.Context, *convergev1.SyncTarget) outcome{
		r.checkSpec,
		r.checkDependencies,
		r.checkSyncWindows,
	} {
		if o := step(ctx, st); o.done {
			return o.result, o.err
		}
	}
	return r.sync(ctx, st)
}

// statusPatcher writes a SyncTarget's status during and at the end of a reconcile, each
// time sending only what changed since its previous write, and nothing when nothing did.
type statusPatcher struct {
	r    *Reconciler
	key  client.ObjectKey
	base *convergev1.SyncTarget
}

type patcherKey struct{}

func withStatusPatcher(ctx context.Context, r *Reconciler, st *convergev1.SyncTarget) context.Context {
	return context.WithValue(ctx, patcherKey{}, &statusPatcher{r: r, key: client.ObjectKeyFromObject(st), base: st.DeepCopy()})
}

// patchStatus writes what changed in st's status since the last write of this reconcile.
func patchStatus(ctx context.Context, st *convergev1.SyncTarget) error {
	p, ok := ctx.Value(patcherKey{}).(*statusPatcher)
	if !ok || equality.Semantic.DeepEqual(p.base.Status, st.Status) {
		return nil // an idle reconcile sends nothing
	}
	if err := p.r.Status().Patch(ctx, st, client.MergeFrom(p.base)); err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("patching status: %w", err)
	}
	p.base = st.DeepCopy()
	p.r.lastWrite.Store(p.key, st.ResourceVersion)
	return nil
}

// getSyncTarget reads a SyncTarget from the cache, or from the API server when the cache
// has not caught up with our own last status write yet: acting on a stale status would
// redo a sync that just finished. In steady state this costs no request.
func (r *Reconciler) getSyncTarget(ctx context.Context, key client.ObjectKey) (*convergev1.SyncTarget, error) {
	st := &convergev1.SyncTarget{}
	if err := r.Get(ctx, key, st); err != nil {
		if apierrors.IsNotFound(err) {
			r.lastWrite.Delete(key)
			return nil, nil
		}
		return nil, err
	}
	if rv, ok := r.lastWrite.Load(key); ok && rv.(string) != st.ResourceVersion && r.APIReader != nil {
		if err := r.APIReader.Get(ctx, key, st); err != nil {
			return nil, client.IgnoreNotFound(err)
		}
	}
	return st, nil
}

// interval is when to look at the source again: the next activation of its cron
// schedule, or its interval.
func (r *Reconciler) interval(st *convergev1.SyncTarget) ctrl.Result {
	if s := st.Spec.Source.Schedule; s != "" {
		if sched, err := cronParser.Parse(string(s)); err == nil {
			now := r.Clock.Now()
			return ctrl.Result{RequeueAfter: max(sched.Next(now).Sub(now), time.Second)}
		}
	}
	return ctrl.Result{RequeueAfter: st.GetInterval()}
}

// checkSpec stalls on what the API server could not check: health rules that do not
// compile would otherwise fail every revision's health check and roll it back.
func (r *Reconciler) checkSpec(_ context.Context, st *convergev1.SyncTarget) outcome {
	if err := health.ValidateExprs(st.Spec.HealthCheckExprs); err != nil {
		markStalled(st, convergev1.InvalidSpecReason, "spec.healthCheckExprs: "+err.Error())
		return outcome{done: true}
	}
	return outcome{}
}

func (r *Reconciler) checkDependencies(ctx context.Context, st *convergev1.SyncTarget) outcome {
	for _, d := range st.Spec.DependsOn {
		key := st.DependencyKey(d)
		dep := &convergev1.SyncTarget{}
		if err := r.Get(ctx, key, dep); err != nil {
			msg := fmt.Sprintf("dependency %s: %v", key, err)
			markFailed(st, convergev1.DependencyNotReadyReason, msg, false)
			return outcome{done: true, result: ctrl.Result{RequeueAfter: 5 * time.Second}}
		}
		ready := apimeta.IsStatusConditionTrue(dep.Status.Conditions, convergev1.ReadyCondition)
		current := dep.Status.ObservedGeneration == dep.Generation &&
			dep.Status.LastAppliedRevision != "" && dep.Status.LastAppliedRevision == dep.Status.LastFetchedRevision
		if !ready || !current {
			markFailed(st, convergev1.DependencyNotReadyReason, fmt.Sprintf("dependency %s is not ready", key), false)
			return outcome{done: true, result: ctrl.Result{RequeueAfter: 5 * time.Second}}
		}
	}
	return outcome{}
}

func (r *Reconciler) checkSyncWindows(_ context.Context, st *convergev1.SyncTarget) outcome {
	allowed, next, err := SyncAllowed(r.Clock.Now(), st.Spec.SyncWindows)
	if err != nil {
		markStalled(st, convergev1.InvalidSpecReason, err.Error())
		return outcome{done: true}
	}
	if allowed {
		return outcome{}
	}
	msg := fmt.Sprintf("outside the sync windows; the next one opens at %s", next.UTC().Format(time.RFC3339))
	setCondition(st, convergev1.ReadyCondition, metav1.ConditionFalse, convergev1.OutsideSyncWindowReason, msg)
	apimeta.RemoveStatusCondition(&st.Status.Conditions, convergev1.ReconcilingCondition)
	wait := next.Sub(r.Clock.Now())
	if wait <= 0 || wait > st.GetInterval() {
		wait = st.GetInterval()
	}
	return outcome{done: true, result: ctrl.Result{RequeueAfter: wait}}
}

// sync fetches the source and, when there is something to do, applies the revision.
func (r *Reconciler) sync(ctx context.Context, st *convergev1.SyncTarget) (ctrl.Result, error) {
	requested := st.Annotations[convergev1.RequestedAtAnnotation]
	newRequest := requested != "" && requested != st.Status.LastHandledReconcileAt

	var revision string
	var err error
	if fresh, ok := r.Fetcher.(freshResolver); ok && newRequest {
		// A user asked: deploy what the source holds now, not what it held at the last poll.
		key := client.ObjectKeyFromObject(st)
		seen := requestSeen{value: requested, at: r.Clock.Now()}
		if v, ok := r.requestSeen.Load(key); ok && v.(requestSeen).value == requested {
			seen = v.(requestSeen)
		} else {
			r.requestSeen.Store(key, seen)
		}
		var ready bool
		revision, ready, err = fresh.ResolveFresh(ctx, st, seen.at)
		if err == nil && !ready {
			markReconciling(st, "fetching the source")
			return ctrl.Result{RequeueAfter: 250 * time.Millisecond}, nil
		}
		r.requestSeen.Delete(key)
	} else {
		revision, err = r.Fetcher.Resolve(ctx, st)
	}
	if err != nil {
		// The poller backs off and wakes the SyncTarget when the source answers again;
		// retrying here would only repeat its last error. The cluster is not touched.
		markFailed(st, convergev1.FetchFailedReason, err.Error(), false)
		r.event(st, corev1.EventTypeWarning, convergev1.FetchFailedReason, "", err.Error())
		return r.interval(st), nil
	}
	st.Status.LastFetchedRevision = revision
	r.firstSeen.LoadOrStore(revision, r.Clock.Now())

	st.Status.LastHandledReconcileAt = requested

	// A revision that failed or was rolled back is not tried again until the source
	// moves or a user asks.
	if res, ok := lastResult(st, revision); ok && res != convergev1.SyncSucceeded && !newRequest &&
		st.Status.ObservedGeneration == st.Generation {
		return r.interval(st), nil
	}
	// Steady state: nothing changed since the last successful sync.
	if revision == st.Status.LastAppliedRevision && revision == st.Status.LastHealthyRevision &&
		st.Status.ObservedGeneration == st.Generation && !newRequest &&
		apimeta.IsStatusConditionTrue(st.Status.Conditions, convergev1.ReadyCondition) &&
		!r.fullSyncDue(st) {
		// A Reconciling left by a daemon that stopped mid-sync no longer holds.
		apimeta.RemoveStatusCondition(&st.Status.Conditions, convergev1.ReconcilingCondition)
		return r.heal(ctx, st, revision)
	}
	if newRequest || r.fullSyncDue(st) {
		ctx = context.WithValue(ctx, fullApplyKey{}, true)
	}
	return r.apply(ctx, st, revision)
}

// fullApplyKey in a context asks deploy to apply every object, not only those that changed.
type fullApplyKey struct{}

// incrementalBase returns the objects of the SyncTarget's last successful sync when the
// next revision may apply only what differs from them: the drift watcher runs and saw
// nothing drift, the spec is the same, a full apply happened within the full sync
// interval, and no user asked for a reconcile (which applies everything).
func (r *Reconciler) incrementalBase(ctx context.Context, st *convergev1.SyncTarget) (renderedSet, bool) {
	if r.Drift == nil || ctx.Value(fullApplyKey{}) != nil {
		return renderedSet{}, false
	}
	key := client.ObjectKeyFromObject(st)
	v, ok := r.rendered.Load(key)
	if !ok || v.(renderedSet).generation != st.Generation || r.Drift.Pending(key) {
		return renderedSet{}, false
	}
	t, ok := r.lastFull.Load(key)
	if !ok || (r.FullSyncInterval > 0 && r.Clock.Since(t.(time.Time)) >= r.FullSyncInterval) {
		return renderedSet{}, false
	}
	return v.(renderedSet), true
}

// heal restores the objects the drift watcher saw changed or deleted by someone else;
// with no drift it costs no request at all.
func (r *Reconciler) heal(ctx context.Context, st *convergev1.SyncTarget, revision string) (ctrl.Result, error) {
	if r.Drift == nil {
		return r.interval(st), nil
	}
	key := client.ObjectKeyFromObject(st)
	drifted := r.Drift.Take(key)
	cached, ok := r.rendered.Load(key)
	if !ok {
		// After a restart: watch what the inventory lists; a drift seen from now on
		// brings a full apply, as nothing rendered is kept in memory yet.
		if err := r.Drift.Watch(inventoryObjects(st.Status.Inventory)); err != nil {
			return ctrl.Result{}, err
		}
		if len(drifted) == 0 {
			return r.interval(st), nil
		}
		return r.apply(ctx, st, revision)
	}
	set := cached.(renderedSet)
	if set.revision != revision || set.generation != st.Generation {
		return r.apply(ctx, st, revision)
	}
	var objects []*unstructured.Unstructured
	for id := range drifted {
		raw, ok := set.objects[id]
		if !ok {
			continue
		}
		o := &unstructured.Unstructured{}
		if err := o.UnmarshalJSON(raw); err != nil {
			return ctrl.Result{}, fmt.Errorf("restoring %s: %w", id, err)
		}
		objects = append(objects, o)
	}
	if len(objects) == 0 {
		return r.interval(st), nil
	}
	c, err := r.clientFor(st)
	if err != nil {
		return ctrl.Result{}, err
	}
	res, err := r.Applier.Apply(ctx, c, objects, nil, st.GetTimeout())
	if err != nil {
		r.event(st, corev1.EventTypeWarning, convergev1.ApplyFailedReason, revision, "restoring drifted objects: "+err.Error())
		return ctrl.Result{}, err
	}
	objectsTotal.WithLabelValues("restored").Add(float64(res.Created + res.Configured))
	if res.Created+res.Configured > 0 {
		r.event(st, corev1.EventTypeNormal, "DriftCorrected", revision,
			fmt.Sprintf("restored %d objects changed or deleted outside Git (%s)", res.Created+res.Configured, summary(res, 0)))
	}
	return r.interval(st), nil
}

// inventoryObjects returns identity-only objects for the entries of an inventory.
func inventoryObjects(inv *convergev1.ResourceInventory) []*unstructured.Unstructured {
	if inv == nil {
		return nil
	}
	out := make([]*unstructured.Unstructured, 0, len(inv.Entries))
	for _, e := range inv.Entries {
		if u, err := apply.EntryObject(e); err == nil {
			out = append(out, u)
		}
	}
	return out
}

func (r *Reconciler) fullSyncDue(st *convergev1.SyncTarget) bool {
	if r.FullSyncInterval <= 0 || len(st.Status.History) == 0 || st.Status.History[0].FinishedAt == nil {
		return false
	}
	return r.Clock.Since(st.Status.History[0].FinishedAt.Time) >= r.FullSyncInterval
}

// deployment is one revision rendered, applied, pruned and checked.
type deployment struct {
	revision  string
	objects   []*unstructured.Unstructured
	inventory *convergev1.ResourceInventory
	applied   apply.Result
	pruned    apply.PruneResult
	// incremental: only the objects that changed since the last sync were applied.
	incremental bool
}

// apply deploys revision; on failure it rolls back to the last healthy revision.
func (r *Reconciler) apply(ctx context.Context, st *convergev1.SyncTarget, revision string) (ctrl.Result, error) {
	started := metav1.NewTime(r.Clock.Now())
	st.Status.LastAttemptedRevision = revision
	markReconciling(st, "applying "+revision)
	// Show the attempt while it runs: a health wait may take minutes.
	if err := patchStatus(ctx, st); err != nil {
		return ctrl.Result{}, err
	}

	d, reason, err := r.deploy(ctx, st, revision, st.Status.Inventory)
	if err == nil {
		st.Status.LastAppliedRevision = revision
		st.Status.LastHealthyRevision = revision
		st.Status.Inventory = apply.MergeInventory(d.inventory, d.pruned.Failed)
		msg := fmt.Sprintf("applied revision %s: %s", revision, summary(d.applied, len(d.pruned.Deleted)))
		markReady(st, msg)
		r.record(st, started, revision, convergev1.SyncSucceeded, d, msg)
		r.event(st, corev1.EventTypeNormal, convergev1.SucceededReason, revision, msg)
		r.remember(st, revision, d.objects)
		if !d.incremental {
			r.lastFull.Store(client.ObjectKeyFromObject(st), r.Clock.Now())
		}
		return r.interval(st), nil
	}
	r.rendered.Delete(client.ObjectKeyFromObject(st))

	// Whatever R wrote stays tracked, so that a rollback or the next revision can prune it.
	if d != nil {
		st.Status.Inventory = apply.MergeInventory(st.Status.Inventory, d.inventory.Entries)
		if d.applied.Created+d.applied.Configured > 0 {
			st.Status.LastAppliedRevision = revision
		}
	}
	if errors.Is(err, errRetryPrune) {
		st.Status.LastAppliedRevision = revision
		st.Status.Inventory = apply.MergeInventory(d.inventory, d.pruned.Failed)
		msg := fmt.Sprintf("revision %s applied, but %v (retrying)", revision, err)
		markFailed(st, convergev1.PruneFailedReason, msg, false)
		r.event(st, corev1.EventTypeWarning, convergev1.PruneFailedReason, revision, msg)
		return ctrl.Result{}, err
	}
	if reason == supersededReason {
		msg := fmt.Sprintf("revision %s %v", revision, err)
		markReconciling(st, msg)
		r.record(st, started, revision, convergev1.SyncFailed, d, msg)
		r.event(st, corev1.EventTypeNormal, supersededReason, revision, msg)
		return ctrl.Result{RequeueAfter: time.Millisecond}, nil
	}
	failMsg := fmt.Sprintf("revision %s failed: %v", revision, err)
	r.event(st, corev1.EventTypeWarning, reason, revision, failMsg)
	if reason == convergev1.FetchFailedReason {
		markFailed(st, reason, failMsg, false)
		return ctrl.Result{}, err
	}

	healthy := st.Status.LastHealthyRevision
	canRollBack := st.RollbackEnabled() && healthy != "" && healthy != revision &&
		(reason == convergev1.ApplyFailedReason || reason == convergev1.HealthCheckFailedReason)
	if !canRollBack {
		markFailed(st, reason, failMsg, true)
		r.record(st, started, revision, convergev1.SyncFailed, d, failMsg)
		return r.interval(st), nil
	}

	rb, _, rbErr := r.deploy(ctx, st, healthy, st.Status.Inventory)
	if rbErr != nil {
		msg := fmt.Sprintf("%s; rolling back to %s failed too: %v", failMsg, healthy, rbErr)
		if rb != nil {
			st.Status.Inventory = apply.MergeInventory(st.Status.Inventory, rb.inventory.Entries)
		}
		markFailed(st, reason, msg, true)
		r.record(st, started, revision, convergev1.SyncFailed, d, msg)
		r.event(st, corev1.EventTypeWarning, reason, revision, msg)
		return r.interval(st), nil
	}
	st.Status.LastAppliedRevision = healthy
	st.Status.Inventory = apply.MergeInventory(rb.inventory, rb.pruned.Failed)
	r.remember(st, healthy, rb.objects)
	msg := fmt.Sprintf("%s; rolled back to %s (%s)", failMsg, healthy, summary(rb.applied, len(rb.pruned.Deleted)))
	markFailed(st, convergev1.RolledBackReason, msg, true)
	r.record(st, started, revision, convergev1.SyncRolledBack, rb, msg)
	r.event(st, corev1.EventTypeWarning, convergev1.RolledBackReason, revision, msg)
	return r.interval(st), nil
}

// deploy checks out, renders, applies, prunes against previous and health-checks one
// revision. It returns the reason to report when it fails.
func (r *Reconciler) deploy(ctx context.Context, st *convergev1.SyncTarget, revision string,
	previous *convergev1.ResourceInventory) (*deployment, string, error) {
	t := r.Clock.Now()
	dir, err := r.Fetcher.Checkout(ctx, st, revision)
	if err != nil {
		return nil, convergev1.FetchFailedReason, err
	}
	t = r.timed("checkout", t)
	objects, err := r.Renderer.Render(ctx, st, dir)
	if err != nil {
		return nil, convergev1.BuildFailedReason, err
	}
	t = r.timed("render", t)
	d := &deployment{revision: revision, objects: objects, inventory: apply.NewInventory(objects)}

	c, err := r.clientFor(st)
	if err != nil {
		return nil, convergev1.ApplyFailedReason, err
	}
	live, err := r.checkOwnership(ctx, c, st, objects)
	if err != nil {
		d.inventory = &convergev1.ResourceInventory{} // nothing was written
		return d, convergev1.ApplyFailedReason, err
	}
	t = r.timed("ownership", t)
	timeout := st.GetTimeout()
	since := r.Clock.Now()
	applyCtx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	// A new commit usually changes a few objects: only they are dry-run and written.
	toApply, unchanged := objects, []*unstructured.Unstructured(nil)
	if base, ok := r.incrementalBase(ctx, st); ok {
		d.incremental = true
		toApply = nil
		for _, o := range objects {
			if base.unchanged(o) {
				unchanged = append(unchanged, o)
			} else {
				toApply = append(toApply, o)
			}
		}
	}
	d.applied, err = r.Applier.Apply(applyCtx, c, toApply, live, timeout)
	if d.applied.ChangeSet != nil {
		for _, o := range unchanged {
			d.applied.ChangeSet.Add(apply.ChangeSetEntry(o, ssa.UnchangedAction))
		}
		d.applied.Unchanged += len(unchanged)
	}
	if err != nil {
		d.inventory = changedInventory(d.applied)
		return d, convergev1.ApplyFailedReason, err
	}
	t = r.timed("apply", t)

	if st.Spec.Prune {
		stale := apply.Stale(previous, d.inventory)
		if err := apply.GuardEmpty(len(objects), stale, st.Spec.AllowEmpty); err != nil {
			return d, convergev1.PruneFailedReason, fmt.Errorf("revision %s %w", revision, err)
		}
		d.pruned, err = apply.Prune(applyCtx, c, client.ObjectKeyFromObject(st), stale)
		if err != nil {
			return d, convergev1.PruneFailedReason, fmt.Errorf("%w: %w", errRetryPrune, err)
		}
		t = r.timed("prune", t)
	}

	if st.WaitEnabled() && r.Health != nil {
		// Say what the possibly long wait is about (`converge reconcile` shows it).
		markReconciling(st, fmt.Sprintf("waiting for %d objects of %s to become ready", len(objects), revision))
		if err := patchStatus(ctx, st); err != nil {
			return d, convergev1.ApplyFailedReason, err
		}
		waitCtx, stopWait := context.WithCancelCause(applyCtx)
		defer stopWait(nil)
		go r.watchForNewerRevision(waitCtx, st, revision, stopWait)
		if err := r.Health.Wait(waitCtx, r.Client, st, objects, d.applied.Observed, since, timeout); err != nil {
			if cause := context.Cause(waitCtx); errors.Is(cause, errSuperseded) {
				return d, supersededReason, cause
			}
			return d, convergev1.HealthCheckFailedReason, err
		}
		r.timed("health", t)
	}
	return d, "", nil
}

// timed records how long a phase of a deploy took since start, and returns now.
func (r *Reconciler) timed(phase string, start time.Time) time.Time {
	now := r.Clock.Now()
	phaseDuration.WithLabelValues(phase).Observe(now.Sub(start).Seconds())
	return now
}

// errRetryPrune marks deletes that failed: the revision is applied, the objects stay in
// the inventory and the prune is retried with backoff.
var errRetryPrune = errors.New("pruning failed")

// errSuperseded ends a health wait when the source moved on to a newer revision.
var errSuperseded = errors.New("superseded")

// supersededReason is the internal outcome of a revision whose health wait a newer
// revision cut short: not a failure to roll back from, the newer one deploys next.
const supersededReason = "Superseded"

// watchForNewerRevision polls the source while a health wait runs and cancels the wait
// when the source points at another commit, so that a long wait on a revision nobody
// wants any more does not hold up the one that replaced it.
func (r *Reconciler) watchForNewerRevision(ctx context.Context, st *convergev1.SyncTarget, revision string,
	cancel context.CancelCauseFunc) {
	every := min(max(st.GetInterval(), time.Second), 30*time.Second)
	for {
		select {
		case <-ctx.Done():
			return
		case <-r.Clock.After(every):
		}
		latest, err := r.Fetcher.Resolve(ctx, st)
		if err == nil && latest != "" && latest != revision && latest != st.Status.LastHealthyRevision {
			cancel(fmt.Errorf("%w by %s before it became healthy", errSuperseded, latest))
			return
		}
	}
}

// remember keeps what was applied for self-healing, and watches its kinds.
func (r *Reconciler) remember(st *convergev1.SyncTarget, revision string, objects []*unstructured.Unstructured) {
	if r.Drift == nil {
		return
	}
	key := client.ObjectKeyFromObject(st)
	if set, ok := newRenderedSet(revision, st.Generation, objects); ok {
		r.rendered.Store(key, set)
	} else {
		r.rendered.Delete(key) // a full apply restores drift then
	}
	_ = r.Drift.Take(key) // what our own apply changed is not drift
	if err := r.Drift.Watch(objects); err != nil {
		r.event(st, corev1.EventTypeWarning, "WatchFailed", revision, err.Error())
	}
}

// changedInventory lists what a failed apply created or changed before it stopped.
func changedInventory(res apply.Result) *convergev1.ResourceInventory {
	inv := &convergev1.ResourceInventory{}
	if res.ChangeSet == nil {
		return inv
	}
	for _, e := range res.ChangeSet.Entries {
		if e.Action == ssa.CreatedAction || e.Action == ssa.ConfiguredAction {
			inv.Entries = append(inv.Entries, convergev1.InventoryEntry{ID: e.ObjMetadata.String(), Version: e.GroupVersion})
		}
	}
	apply.SortEntries(inv.Entries)
	return inv
}

func (r *Reconciler) record(st *convergev1.SyncTarget, started metav1.Time, revision string,
	result convergev1.SyncResult, d *deployment, msg string) {
	now := metav1.NewTime(r.Clock.Now())
	e := convergev1.HistoryEntry{Revision: revision, StartedAt: started, FinishedAt: &now, Result: result, Message: msg}
	if d != nil {
		e.Created = int32(d.applied.Created)
		e.Configured = int32(d.applied.Configured)
		e.Deleted = int32(len(d.pruned.Deleted))
	}
	addHistory(st, e)
	syncTotal.WithLabelValues(string(result)).Inc()
	syncDuration.WithLabelValues(string(result)).Observe(now.Sub(started.Time).Seconds())
	objectsTotal.WithLabelValues("created").Add(float64(e.Created))
	objectsTotal.WithLabelValues("configured").Add(float64(e.Configured))
	objectsTotal.WithLabelValues("pruned").Add(float64(e.Deleted))
	if first, ok := r.firstSeen.LoadAndDelete(revision); ok && result == convergev1.SyncSucceeded {
		seenToHealthy.Observe(now.Sub(first.(time.Time)).Seconds())
	}
}

// event emits one event carrying the revision.
func (r *Reconciler) event(st *convergev1.SyncTarget, typ, reason, revision, msg string) {
	if r.Recorder == nil {
		return
	}
	note := trim(msg)
	if revision != "" && !strings.Contains(note, revision) {
		note = note + " (revision " + revision + ")"
	}
	r.Recorder.Eventf(st, nil, typ, reason, "Sync", "%s", note)
}

// clientFor returns the client applies and prunes go through: impersonating the
// SyncTarget's service account (or the daemon's default one) when there is one. It reads
// straight from the API server: a cached client would start a cluster-wide informer for
// every kind ever applied, and could answer from a stale cache.
func (r *Reconciler) clientFor(st *convergev1.SyncTarget) (client.Client, error) {
	user := impersonatedUser(st, r.DefaultServiceAccount)
	if c, ok := r.clients.Load(user); ok {
		return c.(client.Client), nil
	}
	cfg := rest.CopyConfig(r.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user}
	c, err := client.New(cfg, client.Options{Scheme: r.Scheme(), Mapper: r.RESTMapper()})
	if err != nil {
		return nil, fmt.Errorf("client for %q: %w", user, err)
	}
	r.clients.Store(user, c)
	return c, nil
}

// forget drops what the reconciler keeps of a SyncTarget that is gone.
// requestSeen is a reconcile request (the converge.dev/requestedAt value) and when the
// reconciler first saw it.
type requestSeen struct {
	value string
	at    time.Time
}

func (r *Reconciler) forget(key client.ObjectKey) {
	if f, ok := r.Fetcher.(interface{ Forget(client.ObjectKey) }); ok {
		f.Forget(key)
	}
	r.rendered.Delete(key)
	r.lastWrite.Delete(key)
	r.requestSeen.Delete(key)
	r.lastFull.Delete(key)
}

// finalize prunes the SyncTarget's objects (when prune is on) or orphans them, then lets
// the SyncTarget go.
func (r *Reconciler) finalize(ctx context.Context, st *convergev1.SyncTarget) (ctrl.Result, error) {
	if !controllerutil.ContainsFinalizer(st, Finalizer) {
		return ctrl.Result{}, nil
	}
	if st.Spec.Prune && !st.Spec.Suspend && st.Status.Inventory != nil {
		c, err := r.clientFor(st)
		if err != nil {
			return ctrl.Result{}, err
		}
		res, err := apply.Prune(ctx, c, client.ObjectKeyFromObject(st), st.Status.Inventory.Entries)
		if err != nil {
			return ctrl.Result{}, fmt.Errorf("pruning on delete: %w", err)
		}
		if len(res.Deleted) > 0 {
			r.event(st, corev1.EventTypeNormal, "Pruned", "", fmt.Sprintf("deleted %d objects with the SyncTarget", len(res.Deleted)))
		}
	}
	patch := client.MergeFrom(st.DeepCopy())
	controllerutil.RemoveFinalizer(st, Finalizer)
	return ctrl.Result{}, client.IgnoreNotFound(r.Patch(ctx, st, patch))
}
