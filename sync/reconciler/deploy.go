package reconciler

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/fluxcd/pkg/ssa"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
	"github.com/converge-gitops/converge/internal/crdkinds"
	"github.com/converge-gitops/converge/sync/apply"
	hookspkg "github.com/converge-gitops/converge/sync/hooks"
	"github.com/converge-gitops/converge/sync/render"
	"github.com/converge-gitops/converge/sync/target"
)

// deployment is one revision rendered, applied, pruned and checked.
type deployment struct {
	revision  string
	objects   []*unstructured.Unstructured
	inventory *convergev1.ResourceInventory
	applied   apply.Result
	pruned    apply.PruneResult
	// incremental: only the objects that changed since the last sync were applied.
	incremental bool
	// hooks are the hook objects of the revision, run apart around the apply (see hooks.go).
	hooks []hookspkg.Hook
	// chart: the revision rendered as a Helm chart.
	chart bool
	// hookRuns are the hooks run, for the history.
	hookRuns []convergev1.HookRun
}

func (d *deployment) summary() string {
	return summary(d.applied.Created, d.applied.Configured, len(d.pruned.Deleted), d.applied.Unchanged)
}

func (d *deployment) record(a *attempt) {
	a.created, a.configured, a.deleted = d.applied.Created, d.applied.Configured, len(d.pruned.Deleted)
	for _, h := range d.hookRuns { // a rollback's deployment adds the hooks it ran
		if len(a.hooks) < maxRecordedHooks {
			a.hooks = append(a.hooks, h)
		}
	}
}

// attempt deploys revision; when it fails in a way a rollback can repair, the last
// healthy revision is deployed again.
func (ru *run) attempt(ctx context.Context, revision string) outcome {
	st := ru.st
	a := &attempt{started: ru.r.Clock.Now(), firstHealthy: st.Status.LastHealthyRevision != revision}
	left := unsettled(st, revision)
	st.Status.LastAttemptedRevision = revision
	d, f := ru.deploy(ctx, healthWait{revision: revision, healthy: st.Status.LastHealthyRevision}, st.Status.Inventory)
	d.record(a)
	if f == nil {
		st.Status.LastAppliedRevision, st.Status.LastHealthyRevision = revision, revision
		st.Status.Inventory = apply.MergeInventory(d.inventory, d.pruned.Failed)
		ru.remember(revision, d.objects)
		if !d.incremental {
			ru.state.lastFull = ru.r.Clock.Now()
		}
		applied := "applied revision " + revision
		if ru.cause != "" {
			applied += " (" + ru.cause + ")"
		}
		return outcome{kind: succeeded, revision: revision, attempt: a, message: applied + ": " + d.summary()}
	}
	ru.state.rendered = nil
	if st.Status.Inventory == nil { // tried: what it tracks is known, if nothing
		st.Status.Inventory = &convergev1.ResourceInventory{}
	}
	prunePending := f.then == retry && f.reason == convergev1.PruneFailedReason
	if d.applied.Created+d.applied.Configured > 0 || prunePending {
		st.Status.LastAppliedRevision = revision
	}
	switch {
	case errors.Is(f.err, errSuperseded):
		return outcome{kind: superseded, reason: supersededReason, revision: revision, attempt: a,
			message: fmt.Sprintf("revision %s %v", revision, f.err)}
	case prunePending:
		st.Status.Inventory = apply.MergeInventory(d.inventory, d.pruned.Failed)
		return fromFailure(*f, revision, a, fmt.Sprintf("revision %s applied, but %v (retrying)", revision, f.err))
	}
	msg := fmt.Sprintf("revision %s failed: %v", revision, f.err)
	if healthy, ok := rollbackTarget(st, revision, *f); ok {
		// Say at once that the revision failed: the rollback may take a while.
		ru.announce(fromFailure(*f, revision, a, msg+"; rolling back to "+healthy))
		return ru.rollback(ctx, revision, healthy, *f, a, msg)
	}
	o := fromFailure(*f, revision, a, msg)
	if left != "" && (o.kind == failed || o.kind == stalled) && d.untouched() {
		return ru.settle(ctx, o, left)
	}
	return o
}

// settle applies the last healthy revision again after the attempt of a revision failed
// (o) without touching the cluster, which may still hold left, a revision that never
// became healthy (see unsettled): a broken commit after a daemon stopped in a health wait
// or a rollback must not leave what that wait was about in place. o keeps its reason: the
// revision failed for its own; the message says what was applied again.
func (ru *run) settle(ctx context.Context, o outcome, left string) outcome {
	st := ru.st
	healthy := st.Status.LastHealthyRevision
	d, f := ru.deploy(ctx, healthWait{revision: healthy, healthy: healthy, failed: o.revision}, st.Status.Inventory)
	if o.attempt != nil {
		d.record(o.attempt)
	}
	if f != nil {
		o.message += fmt.Sprintf("; applying %s again in place of %s, which never became healthy, failed too: %v", healthy, left, f.err)
		return o
	}
	st.Status.LastAppliedRevision = healthy
	st.Status.Inventory = apply.MergeInventory(d.inventory, d.pruned.Failed)
	ru.remember(healthy, d.objects)
	o.message += fmt.Sprintf("; %s applied again in place of %s, which never became healthy (%s)", healthy, left, d.summary())
	return o
}

// untouched reports whether the deployment changed nothing in the cluster: it failed
// before the apply.
func (d *deployment) untouched() bool {
	return d.applied.Created+d.applied.Configured == 0 && len(d.pruned.Deleted) == 0 && d.applied.ChangeSet == nil
}

// rollback deploys healthy again after revision failed with f.
func (ru *run) rollback(ctx context.Context, revision, healthy string, f failure, a *attempt, failMsg string) outcome {
	st := ru.st
	rb, rbf := ru.deploy(ctx, healthWait{revision: healthy, healthy: healthy, failed: revision}, st.Status.Inventory)
	if rbf != nil {
		return fromFailure(f, revision, a, fmt.Sprintf("%s; rolling back to %s failed too: %v", failMsg, healthy, rbf.err))
	}
	st.Status.LastAppliedRevision = healthy
	st.Status.Inventory = apply.MergeInventory(rb.inventory, rb.pruned.Failed)
	ru.remember(healthy, rb.objects)
	rb.record(a)
	a.firstHealthy = false
	return outcome{kind: rolledBack, reason: convergev1.RolledBackReason, revision: revision, attempt: a,
		message: fmt.Sprintf("%s; rolled back to %s (%s)", failMsg, healthy, rb.summary())}
}

// deploy checks out and renders one revision, then runs the steps its render calls for
// (see steps): prune guard, ownership, pending inventory, apply and prune against
// previous, health, and a chart's or hooks' own. The deployment returned says what was
// done, also on failure.
func (ru *run) deploy(ctx context.Context, w healthWait, previous *convergev1.ResourceInventory) (*deployment, *failure) {
	d := &deployment{revision: w.revision, inventory: &convergev1.ResourceInventory{}}
	out, f := ru.render(ctx, w.revision)
	if f != nil {
		return d, f
	}
	c, err := ru.client(ctx)
	if err != nil {
		return d, fail(phaseApply, err)
	}
	d.objects, d.hooks = hookspkg.Split(out.Objects)
	d.chart = out.Chart
	d.inventory = apply.NewInventory(d.objects)
	ds := &deploying{d: d, w: w, previous: previous, c: c}
	for _, s := range ru.steps(d, w) {
		if f := s.run(ctx, ds); f != nil {
			return d, ru.syncFailed(ctx, ds, f)
		}
	}
	return d, nil
}

// syncFailed runs the sync-fail hooks of a revision that failed for its own reason (f),
// with the SyncTarget's whole timeout: they run before any rollback. Their own failure
// is added to f's error.
func (ru *run) syncFailed(ctx context.Context, ds *deploying, f *failure) *failure {
	if f.then != failRevision || len(hookspkg.For(ds.d.hooks, hookspkg.SyncFail)) == 0 || ctx.Err() != nil {
		return f
	}
	if hf := ru.runHooks(ctx, ds.c, ds.d, hookspkg.SyncFail, ru.st.GetTimeout()); hf != nil {
		f.err = fmt.Errorf("%w; %w", f.err, hf.err)
	}
	return f
}

func fail(p phase, err error) *failure {
	f := classify(p, err)
	return &f
}

// guardPrune returns what a prune after the apply of d deletes of previous, and refuses,
// before anything is applied, a revision that renders nothing and would prune everything
// (unless spec.allowEmpty), or that would prune more than spec.maxDeletions allows — a
// limit that does not hold back a rollback (it deletes what the failed revision added),
// nor a reconcile a user asked for. The limit counts the objects of the last healthy
// revision only: what attempts that did not end well added (one a daemon stopped in lists
// every object it was about to create) is deleted as a rollback would delete it.
func (ru *run) guardPrune(ctx context.Context, w healthWait, previous *convergev1.ResourceInventory, d *deployment) ([]convergev1.InventoryEntry, *failure) {
	rules := target.For(ru.st, nil, nil).PruneRules()
	if w.failed != "" || ru.req.isNew {
		rules.MaxDeletions = nil
	}
	stale, err := rules.Stale(previous, d.inventory, len(d.objects))
	if errors.Is(err, apply.ErrTooManyDeletions) {
		if held := ru.healthyEntries(ctx, previous); held != nil {
			if _, err = rules.Stale(held, d.inventory, len(d.objects)); err == nil {
				rules.MaxDeletions = nil
				stale, err = rules.Stale(previous, d.inventory, len(d.objects))
			}
		}
	}
	switch {
	case errors.Is(err, apply.ErrWouldPruneAll):
		return nil, &failure{reason: convergev1.PruneFailedReason, then: failRevision,
			err: fmt.Errorf("revision %s: %w", d.revision, err)}
	case err != nil:
		return nil, &failure{reason: convergev1.TooManyDeletionsReason, then: stall, err: err}
	}
	return stale, nil
}

// healthyEntries returns the entries of inv that the last healthy revision declares, or
// nil when that is all of them or cannot be known (no healthy revision, or its render
// fails now). It renders the revision unless it is the one kept in memory, so it is asked
// only when the prune guard would refuse.
func (ru *run) healthyEntries(ctx context.Context, inv *convergev1.ResourceInventory) *convergev1.ResourceInventory {
	h := ru.st.Status.LastHealthyRevision
	if h == "" || inv == nil {
		return nil
	}
	declared := map[string]bool{}
	if set := ru.state.rendered; set != nil && set.revision == h && set.generation == ru.st.Generation {
		for id := range set.objects {
			declared[id] = true
		}
	} else {
		out, f := ru.render(ctx, h)
		if f != nil {
			return nil
		}
		for _, o := range out.Objects {
			declared[apply.ObjectID(o)] = true
		}
	}
	held := &convergev1.ResourceInventory{}
	for _, e := range inv.Entries {
		if declared[e.ID] {
			held.Entries = append(held.Entries, e)
		}
	}
	if len(held.Entries) == len(inv.Entries) {
		return nil
	}
	return held
}

// render checks revision out and renders it.
func (ru *run) render(ctx context.Context, revision string) (*render.Result, *failure) {
	t := ru.r.Clock.Now()
	dir, err := ru.r.Fetcher.Checkout(ctx, ru.st, revision)
	if err != nil {
		return nil, fail(phaseCheckout, err)
	}
	ru.noteOrigin(ctx, revision)
	t = ru.r.timed("checkout", t)
	out, err := ru.renderTree(ctx, dir)
	if err != nil {
		return nil, fail(phaseRender, err)
	}
	ru.r.timed("render", t)
	return out, nil
}

// noteOrigin keeps where the artifact of revision says it comes from, when the fetcher
// tells (Origins), for the history. Not knowing it fails nothing.
func (ru *run) noteOrigin(ctx context.Context, revision string) {
	of, ok := ru.r.Fetcher.(Origins)
	if !ok {
		return
	}
	if o, ok := of.Origin(ctx, ru.st, revision); ok {
		if ru.origins == nil {
			ru.origins = map[string]*convergev1.ArtifactOrigin{}
		}
		ru.origins[revision] = o
	}
}

// writePending records in the status, before anything is written to the cluster, every
// object the revision may create next to what previous holds: a daemon that dies in the
// middle of the apply leaves no object that no inventory lists, and the next revision
// prunes what it no longer declares. Prune keeps its owner-label and UID checks, so a
// longer inventory never widens what is pruned. The same write says "applying <revision>"
// (said). An inventory that lists them all already (a commit changing objects, adding
// none) costs no write.
func (ru *run) writePending(ctx context.Context, revision string, previous, rendered *convergev1.ResourceInventory) (said bool, err error) {
	pending := apply.MergeInventory(previous, rendered.Entries)
	if equality.Semantic.DeepEqual(pending, ru.st.Status.Inventory) {
		return false, nil
	}
	ru.st.Status.Inventory = pending
	return true, ru.progress(ctx, "applying "+revision)
}

// applyAndPrune applies the revision's objects, then prunes stale (see guardPrune). Unless
// said already, the status says "applying <revision>" when it lasts. The apply phase is
// timed from start.
func (ru *run) applyAndPrune(ctx context.Context, c client.Client, d *deployment, live apply.Live,
	stale []convergev1.InventoryEntry, timeout time.Duration, start time.Time, said bool) *failure {
	incremental := ru.incremental()
	done := func() error { return nil }
	if !said {
		done = ru.progressIfSlow(ctx, "applying "+d.revision)
	}
	f := func() *failure {
		if err := ru.applyObjects(ctx, c, d, live, timeout, incremental); err != nil {
			d.inventory = changedInventory(d.applied)
			return fail(phaseApply, err)
		}
		t := ru.r.timed("apply", start)
		if len(stale) == 0 {
			return nil
		}
		defer ru.r.timed("prune", t)
		return ru.prune(ctx, c, d, stale)
	}()
	if err := done(); err != nil && f == nil {
		f = fail(phaseStatus, err)
	}
	return f
}

// incremental reports whether the apply may leave out the objects unchanged since the
// revision last applied.
func (ru *run) incremental() bool {
	return incrementalAllowed(ru.state.rendered, ru.st.Generation, ru.drift() != nil, ru.drift().Pending(ru.key), ru.fullApply,
		ru.state.lastFull, ru.r.Clock.Now(), ru.r.FullSyncInterval)
}

// applyObjects applies the objects of d, or, incremental, those changed since the revision
// last applied (a new commit usually changes a few objects, and when drift is watched only
// they are dry-run and written). It reads nothing of ru.st: the status may be written
// meanwhile.
func (ru *run) applyObjects(ctx context.Context, c client.Client, d *deployment, live apply.Live, timeout time.Duration,
	incremental bool) error {
	toApply, unchanged := d.objects, []*unstructured.Unstructured(nil)
	base := ru.state.rendered
	if incremental {
		d.incremental = true
		toApply = nil
		for _, o := range d.objects {
			if base.unchanged(o) {
				unchanged = append(unchanged, o)
			} else {
				toApply = append(toApply, o)
			}
		}
	}
	err := ru.applyWaves(ctx, c, d, toApply, live, timeout)
	if changedCRD(d.applied.ChangeSet) {
		if on, onErr := ru.cluster(ctx); onErr == nil {
			on.ForgetCapabilities() // the next chart rendered there sees the new API
		}
	}
	if d.applied.ChangeSet != nil {
		for _, o := range unchanged {
			d.applied.ChangeSet.Add(apply.ChangeSetEntry(o, ssa.UnchangedAction))
		}
		d.applied.Unchanged += len(unchanged)
	}
	return err
}

// applyWaves applies objects wave by wave (Argo CD's sync waves, see hooks.Waves): each
// wave but the last is waited healthy before the next is applied, as Argo CD does. d.applied
// holds what every wave applied.
func (ru *run) applyWaves(ctx context.Context, c client.Client, d *deployment, objects []*unstructured.Unstructured,
	live apply.Live, timeout time.Duration) error {
	waves := hookspkg.Waves(objects)
	if len(waves) == 0 {
		waves = append(waves, nil)
	}
	opts := apply.Options{CleanUpOtherTools: ru.st.CleanUpOtherTools(), Policy: ru.objectPolicy(d.chart)}
	for i, wave := range waves {
		res, err := ru.r.Applier.Apply(ctx, c, wave, live, timeout, opts)
		d.applied = addApplied(d.applied, res)
		if err != nil || i == len(waves)-1 {
			return err
		}
		if err := ru.waitWave(ctx, wave, res.Observed, timeout); err != nil {
			return fmt.Errorf("sync wave %d did not become ready: %w", hookspkg.Wave(wave[0]), err)
		}
	}
	return nil
}

// waitWave waits until the objects of a sync wave are healthy (their own health: the
// SyncTarget's extra health checks are waited for with the whole set).
func (ru *run) waitWave(ctx context.Context, objects, observed []*unstructured.Unstructured, timeout time.Duration) error {
	if !ru.st.WaitEnabled() || ru.r.Health == nil {
		return nil
	}
	on, err := ru.cluster(ctx)
	if err != nil {
		return err
	}
	st := ru.st.DeepCopy()
	st.Spec.HealthChecks = nil
	return ru.r.Health.Wait(ctx, on, st, objects, observed, ru.r.Clock.Now(), timeout, nil)
}

// addApplied adds what one apply did to what the applies before it did.
func addApplied(sum, r apply.Result) apply.Result {
	if sum.ChangeSet == nil {
		return r
	}
	if r.ChangeSet != nil {
		sum.ChangeSet.Append(r.ChangeSet.Entries)
	}
	sum.Created += r.Created
	sum.Configured += r.Configured
	sum.Unchanged += r.Unchanged
	sum.Observed = append(sum.Observed, r.Observed...)
	return sum
}

// changedCRD says whether cs created or changed a CustomResourceDefinition.
func changedCRD(cs *ssa.ChangeSet) bool {
	if cs == nil {
		return false
	}
	for _, e := range cs.Entries {
		if e.ObjMetadata.GroupKind == crdkinds.GroupKind && (e.Action == ssa.CreatedAction || e.Action == ssa.ConfiguredAction) {
			return true
		}
	}
	return false
}

// prune deletes stale: what the previous inventory holds and the revision no longer
// declares.
func (ru *run) prune(ctx context.Context, c client.Client, d *deployment, stale []convergev1.InventoryEntry) *failure {
	var err error
	d.pruned, err = apply.Prune(ctx, c, ru.key, stale)
	if err != nil {
		return fail(phasePrune, fmt.Errorf("%w: %w", errRetryPrune, err))
	}
	return nil
}

// waitHealthy waits, when the SyncTarget asks for it, until the revision's objects are
// healthy, for what is left of the timeout. The source is looked at meanwhile: a revision
// that replaces this one cuts the wait short (see cancelsWait).
func (ru *run) waitHealthy(ctx context.Context, d *deployment, w healthWait, since time.Time, timeout time.Duration) *failure {
	if !ru.st.WaitEnabled() || ru.r.Health == nil {
		return nil
	}
	on, err := ru.cluster(ctx)
	if err != nil {
		return fail(phaseHealth, err)
	}
	// A SyncTarget that manages itself (converge bootstrap) is not Ready while it waits:
	// it would wait for itself until the timeout.
	objects, observed := withoutSelf(ru.key, d.objects), withoutSelf(ru.key, d.applied.Observed)
	waitCtx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	go ru.watchForNewerRevision(waitCtx, ru.st.DeepCopy(), w, stop) // a copy: the status is written meanwhile
	left := max(timeout-ru.r.Clock.Since(since), time.Second)
	// Say what a long wait is about (`converge reconcile` shows it); a short one is over
	// before the write would be read.
	var statusErr error
	onSlow := func() {
		statusErr = ru.progress(ctx, fmt.Sprintf("waiting for %d objects of %s to become ready", len(objects), w.revision))
	}
	if err := ru.r.Health.Wait(waitCtx, on, ru.st, objects, observed, since, left, onSlow); err != nil {
		if ctx.Err() != nil {
			// The daemon stops (or lost its lease): the revision did not fail; the next
			// leader waits for it again.
			return &failure{reason: convergev1.HealthCheckFailedReason, then: retry, err: fmt.Errorf("health check interrupted: %w", ctx.Err())}
		}
		if cause := context.Cause(waitCtx); errors.Is(cause, errSuperseded) {
			return &failure{reason: supersededReason, then: failRevision, err: cause}
		}
		return fail(phaseHealth, err)
	}
	if statusErr != nil {
		return fail(phaseStatus, statusErr)
	}
	return nil
}

// withoutSelf returns objects without the SyncTarget key itself.
func withoutSelf(key client.ObjectKey, objects []*unstructured.Unstructured) []*unstructured.Unstructured {
	out := make([]*unstructured.Unstructured, 0, len(objects))
	for _, o := range objects {
		if o != nil && o.GroupVersionKind().GroupKind() == convergev1.GroupVersion.WithKind(convergev1.SyncTargetKind).GroupKind() &&
			client.ObjectKeyFromObject(o) == key {
			continue
		}
		out = append(out, o)
	}
	return out
}

// watchForNewerRevision polls the source while a health wait runs and cancels the wait
// when the source points at a revision that replaces the one waited for.
func (ru *run) watchForNewerRevision(ctx context.Context, st *convergev1.SyncTarget, w healthWait, cancel context.CancelCauseFunc) {
	every := waitPollInterval(st.GetInterval())
	for {
		select {
		case <-ctx.Done():
			return
		case <-ru.r.Clock.After(every):
		}
		latest, err := ru.r.Fetcher.Resolve(ctx, st)
		if err == nil && cancelsWait(w, latest) {
			cancel(fmt.Errorf("%w by %s before it became healthy", errSuperseded, latest))
			return
		}
	}
}

// timed records how long a phase of a deploy took since start, and returns now.
func (r *Reconciler) timed(phase string, start time.Time) time.Time {
	now := r.Clock.Now()
	phaseDuration.WithLabelValues(phase).Observe(now.Sub(start).Seconds())
	return now
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
