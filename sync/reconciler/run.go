package reconciler

import (
	"context"
	"fmt"
	"slices"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
	"github.com/converge-gitops/converge/sync/apply"
	"github.com/converge-gitops/converge/sync/postbuild"
)

// run is one reconcile of one SyncTarget: the object, its remembered state, the status as
// last written, and what this reconcile decided on the way. Its methods are the steps.
type run struct {
	r     *Reconciler
	st    *convergev1.SyncTarget
	key   client.ObjectKey
	state *targetState
	// written is the status as last written, so that a write sends only what changed.
	written convergev1.SyncTargetStatus
	req     request
	// fullApply asks for every object to be applied, not only those that changed.
	fullApply bool
	// verified is what the revision's verification found, for the SourceVerified condition.
	verified *verification
	// vars are the spec.postBuild variables read for this reconcile; cause says why an
	// unchanged revision is deployed again ("variables changed").
	vars  postbuild.Variables
	cause string
	// scope is the cluster the SyncTarget's objects are on, looked up once per run.
	scope clusterScope
	// origins are where the artifacts checked out in this run say they come from, by
	// revision (Origins), for the history.
	origins map[string]*convergev1.ArtifactOrigin
}

func (r *Reconciler) newRun(st *convergev1.SyncTarget) *run {
	key := client.ObjectKeyFromObject(st)
	return &run{r: r, st: st, key: key, state: r.states.get(key), written: *st.Status.DeepCopy(), req: requestOf(st)}
}

// patchStatus writes what changed in the status since the last write of this reconcile,
// and nothing when nothing did: an idle reconcile sends no request.
func (ru *run) patchStatus(ctx context.Context) error {
	if equality.Semantic.DeepEqual(ru.written, ru.st.Status) {
		return nil
	}
	if err := ru.r.writeStatus(ctx, ru.st, ru.written); err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("patching status: %w", err)
	}
	ru.written = *ru.st.Status.DeepCopy()
	ru.state.lastWrite = ru.st.ResourceVersion
	return nil
}

// writeStatus patches st's status from written (the status as this reconcile last wrote
// or read it) to st.Status, fenced by resourceVersion: a status another replica wrote
// meanwhile — one that took the lease while this one was cut off from the API server,
// whose writes may still arrive — is not overwritten: the write fails with a conflict.
// A conflict that only a change outside the status caused (an annotation a user or a
// webhook set) is retried at the fresh resourceVersion.
func (r *Reconciler) writeStatus(ctx context.Context, st *convergev1.SyncTarget, written convergev1.SyncTargetStatus) error {
	for try := 1; ; try++ {
		base := st.DeepCopy()
		base.Status = written
		err := r.Status().Patch(ctx, st, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{}))
		if !apierrors.IsConflict(err) || r.APIReader == nil || try == 3 {
			return err
		}
		latest := &convergev1.SyncTarget{}
		if gerr := r.APIReader.Get(ctx, client.ObjectKeyFromObject(st), latest); gerr != nil {
			return err
		}
		if !equality.Semantic.DeepEqual(latest.Status, written) {
			return fmt.Errorf("the status was written by another replica meanwhile: %w", err)
		}
		st.ResourceVersion = latest.ResourceVersion
	}
}

// progress shows a step under way in the status at once (a health wait may take minutes).
func (ru *run) progress(ctx context.Context, msg string) error {
	setConditions(ru.st, outcome{kind: progressing, reason: convergev1.ProgressingReason, message: msg, verified: ru.verified})
	return ru.patchStatus(ctx)
}

// progressIfSlow says msg in the status, as progress does, if the step under way lasts
// longer than slowWait; the returned done ends the step. The write, if any, is made on a
// copy of the SyncTarget from another goroutine, so the step may read ru.st meanwhile;
// done waits for it and takes it in.
func (ru *run) progressIfSlow(ctx context.Context, msg string) (done func() error) {
	o := outcome{kind: progressing, reason: convergev1.ProgressingReason, message: msg, verified: ru.verified}
	st, written := ru.st.DeepCopy(), *ru.written.DeepCopy()
	timer := ru.r.Clock.NewTimer(slowWait)
	stop, result := make(chan struct{}), make(chan error, 1)
	wrote := false
	go func() {
		select {
		case <-stop:
			result <- nil
			return
		case <-timer.C():
		}
		setConditions(st, o)
		err := ru.r.writeStatus(ctx, st, written)
		wrote = err == nil
		if apierrors.IsNotFound(err) {
			err = nil
		}
		result <- err
	}()
	return func() error {
		timer.Stop()
		close(stop)
		err := <-result
		if wrote {
			ru.st.Status.Conditions = slices.Clone(st.Status.Conditions) // as written, to the second
			ru.written = *st.Status.DeepCopy()
			ru.st.ResourceVersion = st.ResourceVersion
			ru.state.lastWrite = st.ResourceVersion
		}
		if err != nil {
			return fmt.Errorf("patching status: %w", err)
		}
		return nil
	}
}

// announce emits the event of an outcome that is not the reconcile's last word (a failure
// whose rollback follows), leaving status and history to the final outcome.
func (ru *run) announce(o outcome) {
	o.message = ru.redact(o.message)
	fx := effectsOf(ru.st, o, 0)
	ru.r.event(ru.st, fx.eventType, fx.eventReason, o.revision, o.message)
}

// finish turns the outcome into status, history, event and metrics.
func (ru *run) finish(o outcome) (ctrl.Result, error) {
	now := ru.r.Clock.Now()
	o.message = ru.redact(o.message)
	if len(ru.vars.Sensitive) > 0 {
		o.err = apply.RedactValues(o.err, ru.vars.Sensitive)
	}
	if o.verified == nil {
		o.verified = ru.verified
	}
	fx := summarize(ru.st, o, now, ru.r.interval(ru.st))
	if h := ru.st.Status.History; o.attempt != nil && len(h) > 0 && h[0].Revision == o.revision {
		h[0].Origin = ru.origins[o.revision]
	}
	msg := o.message
	if o.kind == idle && o.restored > 0 {
		msg = fmt.Sprintf("restored %d objects changed or deleted outside Git", o.restored)
		objectsTotal.WithLabelValues("restored").Add(float64(o.restored))
	}
	ru.r.event(ru.st, fx.eventType, fx.eventReason, o.revision, msg)
	if fx.result != "" {
		ru.observe(o, fx.result, now)
	}
	return fx.requeue, fx.err
}

// redact removes from msg the values read from Secrets for the spec.postBuild variables and
// the spec.helm values: a
// value substituted into a field the API server refuses is quoted in its error, which would
// reach the status, events, commit statuses and logs.
func (ru *run) redact(msg string) string {
	return apply.RedactString(msg, ru.vars.Sensitive)
}

// observe records the metrics of an attempt that ended. The latencies to healthy are
// observed once per revision: a periodic full sync of it again is no new deploy.
func (ru *run) observe(o outcome, result convergev1.SyncResult, now time.Time) {
	a := o.attempt
	syncTotal.WithLabelValues(string(result)).Inc()
	syncDuration.WithLabelValues(string(result)).Observe(now.Sub(a.started).Seconds())
	objectsTotal.WithLabelValues("created").Add(float64(a.created))
	objectsTotal.WithLabelValues("configured").Add(float64(a.configured))
	objectsTotal.WithLabelValues("pruned").Add(float64(a.deleted))
	if result != convergev1.SyncSucceeded || !a.firstHealthy {
		return
	}
	if f := ru.state.fetched; f.revision == o.revision && !f.at.IsZero() {
		seenToHealthy.Observe(now.Sub(f.at).Seconds())
	}
	if t, ok := ru.r.Fetcher.CommitTime(ru.st, o.revision); ok {
		commitToHealthy.Observe(max(now.Sub(t), 0).Seconds())
	}
}

// sync fetches the source and decides: refused (hold the healthy revision), steady (heal
// drift), or a new attempt.
func (ru *run) sync(ctx context.Context) outcome {
	revision, o := ru.resolve(ctx)
	if o != nil {
		return *o
	}
	st, now := ru.st, ru.r.Clock.Now()
	st.Status.LastFetchedRevision = revision
	if ru.state.fetched.revision != revision {
		ru.state.fetched = revisionSeen{revision: revision, at: now}
	}
	st.Status.LastHandledReconcileAt = ru.req.value
	if o := ru.readVariables(ctx); o != nil {
		return *o
	}
	full := fullSyncDue(now, ru.state.lastFull, st, ru.r.FullSyncInterval)
	changed, unknown := variablesState(ru.state.variables, ru.vars.Digest)
	isRefused, isSteady := refused(st, revision, ru.req), steady(st, revision, ru.req, full)
	retryRefused := changed || (unknown && failedOnVariables(st))
	switch {
	case isRefused && !retryRefused:
		ru.state.variables = ru.vars.Digest // the baseline, after a restart
		return ru.hold(ctx, full)
	case isSteady && !changed && !unknown:
		return ru.heal(ctx, revision)
	case isRefused || isSteady: // only the variables make it deploy again
		ru.cause = variablesCause(changed, unknown)
	}
	ru.fullApply = ru.req.isNew || full
	ru.state.variables = ru.vars.Digest
	if o, ok := ru.verify(ctx, revision); !ok {
		return o
	}
	return ru.attempt(ctx, revision)
}

// resolve asks the source which revision it points at. A reconcile a user asked for, or a
// push a webhook announced, deploys what the source holds now, not what it held at the last
// poll.
func (ru *run) resolve(ctx context.Context) (string, *outcome) {
	var revision string
	var err error
	if since, wanted := ru.freshSince(); wanted {
		var ready bool
		revision, ready, err = ru.r.Fetcher.ResolveFresh(ctx, ru.st, since)
		if err == nil && !ready {
			o := outcome{kind: progressing, reason: convergev1.ProgressingReason, message: "fetching the source", after: 250 * time.Millisecond}
			if ru.r.Clock.Since(since) < slowWait {
				o.kind = polling
			}
			return "", &o
		}
		ru.state.request = requestSeen{}
		ru.state.pushHandled, ru.state.push = ru.state.push.value, requestSeen{}
	} else {
		revision, err = ru.r.Fetcher.Resolve(ctx, ru.st)
	}
	if err != nil {
		// The poller backs off and wakes the SyncTarget when the source answers again;
		// retrying here would only repeat its last error. The cluster is not touched.
		o := fromFailure(classify(phaseResolve, err), "", nil, err.Error())
		o.after = ru.r.interval(ru.st)
		return "", &o
	}
	return revision, nil
}

// freshSince says whether the source must be polled now, and the time the poll must have
// started after: when a new reconcile request was first seen, when an announced push was
// accepted (pushPoll), and when a SyncTarget that has attempted nothing yet was first
// seen. An announced push asks for nothing else.
func (ru *run) freshSince() (time.Time, bool) {
	now := ru.r.Clock.Now()
	var since time.Time
	if ru.req.isNew {
		if ru.state.request.value != ru.req.value {
			ru.state.request = requestSeen{value: ru.req.value, at: now}
		}
		since = ru.state.request.at
	}
	// A new SyncTarget deploys what its source holds when it is created, not what a poll
	// of a shared source saw before (a commit adding its path may be newer).
	if ru.st.Status.LastAttemptedRevision == "" && len(ru.st.Status.History) == 0 {
		if ru.state.firstLook.IsZero() {
			ru.state.firstLook = now
		}
		if ru.state.firstLook.After(since) {
			since = ru.state.firstLook
		}
	}
	pushed := ru.st.Annotations[convergev1.PushedAtAnnotation]
	if ru.state.push.value != pushed {
		ru.state.push = requestSeen{value: pushed, at: now}
	}
	if at, ok := pushPoll(pushed, ru.state.pushHandled, ru.state.push.at); ok && at.After(since) {
		since = at
	}
	return since, !since.IsZero()
}

// heal restores the objects the drift watcher saw changed or deleted by someone else;
// with no drift it costs no request at all.
func (ru *run) heal(ctx context.Context, revision string) outcome {
	if ru.drift() == nil {
		return outcome{kind: idle}
	}
	drifted := ru.drift().Take(ru.key)
	set := ru.state.rendered
	if set == nil {
		// After a restart: watch what the inventory lists; a drift made while no daemon
		// watched, or seen from now on, brings a full apply, as nothing rendered is kept
		// in memory yet.
		missed, o, failed := ru.watchInventory(ctx)
		if failed {
			return o
		}
		if len(drifted) == 0 && len(missed) == 0 {
			return outcome{kind: idle}
		}
		ru.fullApply = true
		return ru.attempt(ctx, revision)
	}
	if set.revision != revision || set.generation != ru.st.Generation {
		return ru.attempt(ctx, revision)
	}
	if len(drifted) == 0 {
		return outcome{kind: idle}
	}
	return ru.restore(ctx, set, drifted)
}

// hold keeps the healthy revision in place while the source points at a refused one:
// drift is restored and the periodic full sync runs as in steady state, from the held
// revision's objects, without a new attempt or history entry.
func (ru *run) hold(ctx context.Context, full bool) outcome {
	if left := unsettled(ru.st, ""); left != "" {
		return ru.rollBackAgain(ctx, left)
	}
	held, ok := heldRevision(ru.st)
	if !ok || (ru.drift() == nil && !full) {
		return outcome{kind: idle}
	}
	var drifted map[string]bool
	if ru.drift() != nil {
		drifted = ru.drift().Take(ru.key)
	}
	if !full && len(drifted) == 0 {
		if ru.state.rendered != nil {
			return outcome{kind: idle}
		}
		// After a restart: watch what the inventory lists, and restore in full what
		// drifted while no daemon watched.
		missed, o, failed := ru.watchInventory(ctx)
		if failed {
			return o
		}
		if len(missed) == 0 {
			return outcome{kind: idle}
		}
		full = true
	}
	set := ru.state.rendered
	if set == nil || set.revision != held || set.generation != ru.st.Generation {
		// Not in memory (a restart, or no drift watch): render the held revision again.
		out, f := ru.render(ctx, held)
		objects := out.Objects
		if f != nil {
			return outcome{kind: idle, reason: f.reason, message: "restoring " + held + ": " + f.err.Error(), err: f.err}
		}
		ru.remember(held, objects)
		if set = ru.state.rendered; set == nil {
			set = newRenderedSet(held, ru.st.Generation, objects)
		}
		full = true
	}
	if full {
		return ru.restore(ctx, set, nil)
	}
	return ru.restore(ctx, set, drifted)
}

// rollBackAgain applies the last healthy revision again while the source points at a
// refused revision and the cluster may still hold left, one that never became healthy: a
// rollback that failed for a while (the API server or the source away) or that a daemon
// stopped in is tried again, not left undone. No history entry: the refused revision's
// attempt has one.
func (ru *run) rollBackAgain(ctx context.Context, left string) outcome {
	st := ru.st
	healthy := st.Status.LastHealthyRevision
	w := healthWait{revision: healthy, healthy: healthy, failed: st.Status.LastFetchedRevision}
	d, f := ru.deploy(ctx, w, st.Status.Inventory)
	if f != nil {
		return fromFailure(*f, "", nil, fmt.Sprintf("rolling back from %s, which never became healthy, to %s: %v", left, healthy, f.err))
	}
	st.Status.LastAppliedRevision = healthy
	st.Status.Inventory = apply.MergeInventory(d.inventory, d.pruned.Failed)
	ru.remember(healthy, d.objects)
	return outcome{kind: rolledBack, reason: convergev1.RolledBackReason, revision: left,
		message: fmt.Sprintf("%s never became healthy; rolled back to %s (%s)", left, healthy, d.summary())}
}

// restore applies again the objects of set with the given IDs (all of them, a full sync,
// when ids is nil), without pruning or waiting: what Git declares is put back.
func (ru *run) restore(ctx context.Context, set *renderedSet, ids map[string]bool) outcome {
	objects, err := set.decode(ids)
	if err == nil && len(objects) == 0 {
		return outcome{kind: idle}
	}
	var c client.Client
	if err == nil {
		c, err = ru.client(ctx)
	}
	var res apply.Result
	if err == nil {
		res, err = ru.r.Applier.Apply(ctx, c, objects, nil, ru.st.GetTimeout(),
			apply.Options{CleanUpOtherTools: ru.st.CleanUpOtherTools()})
	}
	if err != nil {
		return outcome{kind: idle, reason: convergev1.ApplyFailedReason, revision: set.revision,
			message: "restoring drifted objects: " + err.Error(), err: err}
	}
	if ids == nil {
		ru.state.lastFull = ru.r.Clock.Now()
	}
	return outcome{kind: idle, revision: set.revision, restored: res.Created + res.Configured}
}

// remember keeps what was applied for self-healing, and watches its kinds.
func (ru *run) remember(revision string, objects []*unstructured.Unstructured) {
	if ru.drift() == nil {
		return
	}
	ru.state.rendered = newRenderedSet(revision, ru.st.Generation, objects)
	_ = ru.drift().Take(ru.key) // what our own apply changed is not drift
	if err := ru.drift().Watch(objects); err != nil {
		ru.r.event(ru.st, "Warning", watchFailedReason, revision, err.Error())
	}
}

// watchInventory watches the kinds of what the inventory lists (after a restart, when
// nothing rendered is in memory) and returns what of it drifted while no watch saw it;
// the outcome to return when that fails.
func (ru *run) watchInventory(ctx context.Context) (map[string]bool, outcome, bool) {
	objects := inventoryObjects(ru.st.Status.Inventory)
	if err := ru.drift().Watch(objects); err != nil {
		return nil, outcome{kind: idle, reason: watchFailedReason, message: err.Error(), err: err}, true
	}
	return ru.drift().Missed(ctx, objects), outcome{}, false
}

// watchFailedReason is the event of objects whose kind the drift watcher cannot watch.
const watchFailedReason = "WatchFailed"

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
