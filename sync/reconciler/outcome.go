package reconciler

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
	"github.com/converge-gitops/converge/internal/category"
)

// phase is the step of a sync a failure happened in.
type phase int

const (
	phaseResolve  phase = iota // asking the source which revision it points at
	phaseCheckout              // fetching the revision's tree
	phaseVerify                // checking the revision's signatures (spec.source.verify)
	phaseRender
	phaseApply
	phasePrune
	phaseHealth
	phaseStatus    // writing the SyncTarget's status on the way
	phaseVariables // reading the ConfigMaps and Secrets of spec.postBuild.substituteFrom
)

// then is what follows a failure.
type then int

const (
	// failRevision: the revision failed for good; it is tried again when the source moves,
	// the spec changes or a user asks.
	failRevision then = iota
	// waitSource: the source could not be read; the poller backs off and wakes the
	// SyncTarget when it answers again.
	waitSource
	// retry: a transient failure, retried with backoff.
	retry
	// stall: the spec cannot work as written; it is looked at again only at its interval.
	stall
)

// failure is a classified error: the reason reported and what follows.
type failure struct {
	reason string
	then   then
	err    error
}

// rollsBack reports whether the failure is the revision's own and rolling back to the last
// healthy revision can repair it: an apply the API server refused, or objects that did
// not become healthy.
func (f failure) rollsBack() bool {
	return f.then == failRevision &&
		(f.reason == convergev1.ApplyFailedReason || f.reason == convergev1.HealthCheckFailedReason ||
			f.reason == convergev1.HookFailedReason)
}

// errRetryPrune marks deletes that failed: the revision is applied, the objects stay in
// the inventory and the prune is retried with backoff.
var errRetryPrune = errors.New("pruning failed")

// errSuperseded ends a health wait when the source moved on to a newer revision.
var errSuperseded = errors.New("superseded")

// classify maps an error of a phase to exactly one reason and what follows. Every failure
// of a sync goes through here. What an error says of itself (package category: a source
// that cannot work stalls, a revision over the caps or with a bad signature is refused, a
// remote cluster away is retried; a decryption or substitution failure has its reason) is
// read from it; the phase decides the rest.
func classify(p phase, err error) failure {
	says, reason := category.Of(err)
	f := failure{err: err, then: failRevision}
	passing := transientAPIError(err) || apierrors.IsNotFound(err) // a Secret not readable (yet)
	switch p {
	case phaseResolve:
		// No revision to fail yet: the poller is waited for, unless the source cannot work.
		f.reason, f.then = convergev1.FetchFailedReason, waitSource
		if says == category.Stall {
			f.then = stall
		} else if passing {
			f.then = retry
		}
	case phaseCheckout:
		f.reason, f.then = convergev1.FetchFailedReason, thenOf(says, retry)
	case phaseVerify:
		f.reason, f.then = convergev1.VerificationFailedReason, thenOf(says, retry)
	case phaseRender:
		f.reason, f.then = convergev1.BuildFailedReason, thenOf(says, failRevision)
		if passing {
			f.then = retry // the decryption Secret could not be read (yet)
		}
	case phaseVariables:
		// A referent missing or not readable (yet): looked at again at the interval, and
		// at once when a watched ConfigMap or Secret changes; no revision is at fault.
		f.reason, f.then = convergev1.SubstitutionFailedReason, waitSource
		if transientAPIError(err) {
			f.then = retry
		}
	case phaseApply:
		f.reason, f.then = convergev1.ApplyFailedReason, thenOf(says, failRevision)
		if transientAPIError(err) {
			f.then = retry // not the revision's fault: no rollback, try again
		}
	case phasePrune:
		f.reason = convergev1.PruneFailedReason
		if errors.Is(err, errRetryPrune) {
			f.then = retry
		}
	case phaseHealth:
		f.reason = convergev1.HealthCheckFailedReason
	case phaseStatus:
		f.reason, f.then = convergev1.ApplyFailedReason, retry
	}
	if reason != "" {
		f.reason = reason
	}
	return f
}

// thenOf is what follows an error of category c; def when it says none.
func thenOf(c category.Category, def then) then {
	switch c {
	case category.FailRevision:
		return failRevision
	case category.WaitSource:
		return waitSource
	case category.Retry:
		return retry
	case category.Stall:
		return stall
	}
	return def
}

// transientAPIError reports whether err is the API server (or the way to it) failing
// for a while, not a request it refuses. An internal error is not taken as one: the API
// server answers some invalid objects with it ("failed to create typed patch object").
func transientAPIError(err error) bool {
	var netErr net.Error
	return apierrors.IsServerTimeout(err) || apierrors.IsTimeout(err) || apierrors.IsTooManyRequests(err) ||
		apierrors.IsServiceUnavailable(err) || (errors.As(err, &netErr) && !errors.Is(err, context.DeadlineExceeded))
}

// kind is what a reconcile came to.
type kind int

const (
	progressing kind = iota // a sync is under way, or about to look again shortly
	idle                    // nothing to do: the cluster is what the revision declares
	suspended
	waitingDependency // a SyncTarget depended on is not ready
	outsideWindow     // the sync windows are closed
	stalled           // the spec cannot work as written
	retrying          // a transient failure, or a source that could not be read
	failed            // the revision failed for good
	rolledBack        // the revision failed and the last healthy one was applied again
	superseded        // a newer revision cut the revision's health wait short
	succeeded
	// polling: the poll of the source this reconcile asked for has not finished yet, and
	// started a moment ago. The status stays as it is (saying so would cost a write that
	// is stale before anyone reads it); the poll's end wakes the SyncTarget.
	polling
)

// attempt is a sync of a revision to its end: it becomes a history entry and metrics.
type attempt struct {
	started                      time.Time
	created, configured, deleted int
	// firstHealthy: the revision became healthy for the first time (not a full sync of it
	// again, not a rollback).
	firstHealthy bool
	// hooks are the hooks the attempt ran.
	hooks []convergev1.HookRun
}

// outcome is the result of a reconcile, the one value turned into status, history, event,
// metrics and requeue by summarize.
type outcome struct {
	kind     kind
	reason   string
	message  string
	revision string
	// attempt is set for a sync of a revision that ended (succeeded, failed, rolled back,
	// superseded): it is recorded in the history.
	attempt *attempt
	// after is the requeue delay of progressing and waiting outcomes.
	after time.Duration
	// err is returned to controller-runtime to retry with backoff.
	err error
	// restored counts the drifted objects an idle reconcile restored.
	restored int
	// verified is what the SourceVerified condition says; nil leaves it as it is.
	verified *verification
}

// driftCorrectedReason is the event of objects restored after someone else changed them.
const driftCorrectedReason = "DriftCorrected"

// supersededReason is the outcome of a revision whose health wait a newer revision cut
// short: not a failure to roll back from, the newer one deploys next.
const supersededReason = "Superseded"

// fromFailure is the outcome of a classified failure of revision.
func fromFailure(f failure, revision string, a *attempt, msg string) outcome {
	o := outcome{reason: f.reason, message: msg, revision: revision}
	switch f.then {
	case stall:
		o.kind = stalled
		if revision != "" {
			o.attempt = a // the revision is refused like a failed one
		}
	case retry:
		o.kind, o.err = retrying, f.err
	case waitSource:
		o.kind = retrying
	default:
		o.kind, o.attempt = failed, a
	}
	return o
}

// effects are what summarize decided beyond the status: the event, the history result for
// the metrics, and when to look again.
type effects struct {
	eventType, eventReason string // no event when eventReason is empty
	result                 convergev1.SyncResult
	requeue                ctrl.Result
	err                    error
}

// summarize turns an outcome into the SyncTarget's conditions and history (observedGeneration
// set when the outcome is final), and says which event to emit and when to look again.
// interval is when the source should be looked at again.
func summarize(st *convergev1.SyncTarget, o outcome, now time.Time, interval time.Duration) effects {
	fx := effectsOf(st, o, interval)
	setConditions(st, o)
	if o.attempt != nil {
		fx.result = historyResult(o.kind)
		e := historyEntry(o, fx.result, now)
		e.Values = recordedValues(st)
		addHistory(st, e)
	}
	return fx
}

// effectsOf says, for an outcome, which event to emit and when to look again.
func effectsOf(st *convergev1.SyncTarget, o outcome, interval time.Duration) effects {
	fx := effects{requeue: ctrl.Result{RequeueAfter: interval}}
	warn := func() { fx.eventType, fx.eventReason = corev1.EventTypeWarning, o.reason }
	switch o.kind {
	case progressing, waitingDependency, outsideWindow, polling:
		fx.requeue = ctrl.Result{RequeueAfter: o.after}
	case suspended:
		fx.requeue = ctrl.Result{}
	case stalled:
		fx.requeue = ctrl.Result{RequeueAfter: o.after}
		if c := apimeta.FindStatusCondition(st.Status.Conditions, convergev1.StalledCondition); c == nil ||
			c.Status != metav1.ConditionTrue || c.Message != trim(o.message) {
			warn() // once, not at every look
		}
	case retrying, failed, rolledBack:
		warn()
	case succeeded:
		fx.eventType, fx.eventReason = corev1.EventTypeNormal, convergev1.SucceededReason
	case superseded:
		fx.requeue = ctrl.Result{RequeueAfter: time.Millisecond}
		fx.eventType, fx.eventReason = corev1.EventTypeNormal, o.reason
	case idle:
		if o.restored > 0 {
			fx.eventType, fx.eventReason = corev1.EventTypeNormal, driftCorrectedReason
		}
		if o.err != nil { // restoring drifted objects failed: retried, the status stands
			warn()
		}
	}
	if o.err != nil {
		fx.requeue, fx.err = ctrl.Result{}, o.err
	}
	return fx
}

// setConditions sets the conditions an outcome means, kstatus-style: Ready, Healthy,
// Stalled, and Reconciling while something is under way or will be retried.
func setConditions(st *convergev1.SyncTarget, o outcome) {
	msg := o.message
	setVerified(st, o.verified)
	switch o.kind {
	case progressing, superseded:
		setReconciling(st, o.reason, msg)
	case idle, suspended:
		// A Reconciling left by a daemon that stopped mid-sync no longer holds.
		apimeta.RemoveStatusCondition(&st.Status.Conditions, convergev1.ReconcilingCondition)
	case waitingDependency, retrying:
		setFailed(st, o.reason, msg)
		setReconciling(st, o.reason, msg)
	case outsideWindow:
		setCondition(st, convergev1.ReadyCondition, metav1.ConditionFalse, o.reason, msg)
		apimeta.RemoveStatusCondition(&st.Status.Conditions, convergev1.ReconcilingCondition)
	case stalled:
		setCondition(st, convergev1.ReadyCondition, metav1.ConditionFalse, o.reason, msg)
		setCondition(st, convergev1.StalledCondition, metav1.ConditionTrue, o.reason, msg)
		apimeta.RemoveStatusCondition(&st.Status.Conditions, convergev1.ReconcilingCondition)
		st.Status.ObservedGeneration = st.Generation
	case failed, rolledBack:
		setFailed(st, o.reason, msg)
		apimeta.RemoveStatusCondition(&st.Status.Conditions, convergev1.ReconcilingCondition)
		st.Status.ObservedGeneration = st.Generation
	case succeeded:
		setCondition(st, convergev1.ReadyCondition, metav1.ConditionTrue, convergev1.SucceededReason, msg)
		setCondition(st, convergev1.HealthyCondition, metav1.ConditionTrue, convergev1.SucceededReason, msg)
		apimeta.RemoveStatusCondition(&st.Status.Conditions, convergev1.ReconcilingCondition)
		apimeta.RemoveStatusCondition(&st.Status.Conditions, convergev1.StalledCondition)
		st.Status.ObservedGeneration = st.Generation
	}
}

// setVerified sets the SourceVerified condition, or removes it when the SyncTarget asks for
// no verification.
func setVerified(st *convergev1.SyncTarget, v *verification) {
	switch {
	case v == nil:
	case v.status == "":
		apimeta.RemoveStatusCondition(&st.Status.Conditions, convergev1.SourceVerifiedCondition)
	case v.status == metav1.ConditionTrue:
		setCondition(st, convergev1.SourceVerifiedCondition, v.status, convergev1.SucceededReason, v.message)
	default:
		setCondition(st, convergev1.SourceVerifiedCondition, v.status, convergev1.VerificationFailedReason, v.message)
	}
}

// historyResult is the result an attempt that came to k is recorded with.
func historyResult(k kind) convergev1.SyncResult {
	switch k {
	case succeeded:
		return convergev1.SyncSucceeded
	case rolledBack:
		return convergev1.SyncRolledBack
	}
	return convergev1.SyncFailed
}

func historyEntry(o outcome, result convergev1.SyncResult, now time.Time) convergev1.HistoryEntry {
	a := o.attempt
	finished := metav1.NewTime(now)
	return convergev1.HistoryEntry{
		Revision:   o.revision,
		StartedAt:  metav1.NewTime(a.started),
		FinishedAt: &finished,
		Duration:   &metav1.Duration{Duration: now.Sub(a.started).Round(time.Millisecond)},
		Result:     result,
		Created:    int32(a.created),
		Configured: int32(a.configured),
		Deleted:    int32(a.deleted),
		Message:    o.message,
		Hooks:      a.hooks,
	}
}

// maxRecordedValues bounds the inline chart values a history entry keeps (JSON bytes):
// the history lives in the object's status.
const maxRecordedValues = 4 << 10

// recordedValues are the inline values of st's chart ({} when it has none) for its
// history, nil when st deploys no chart or they are too large to keep.
func recordedValues(st *convergev1.SyncTarget) *apiextensionsv1.JSON {
	if st.Spec.Helm == nil && !st.IsChart() {
		return nil
	}
	if st.Spec.Helm == nil || st.Spec.Helm.Values == nil || len(st.Spec.Helm.Values.Raw) == 0 {
		return &apiextensionsv1.JSON{Raw: []byte("{}")}
	}
	if len(st.Spec.Helm.Values.Raw) > maxRecordedValues {
		return nil
	}
	return st.Spec.Helm.Values.DeepCopy()
}

// maxMessage bounds condition and history messages, which live in the object's status.
const maxMessage = 2000

func trim(msg string) string {
	if len(msg) > maxMessage {
		return msg[:maxMessage-3] + "..."
	}
	return msg
}

func setCondition(st *convergev1.SyncTarget, typ string, status metav1.ConditionStatus, reason, msg string) {
	apimeta.SetStatusCondition(&st.Status.Conditions, metav1.Condition{
		Type:               typ,
		Status:             status,
		Reason:             reason,
		Message:            trim(msg),
		ObservedGeneration: st.Generation,
	})
}

// setReconciling says a reconcile is under way (kstatus: Reconciling=True, and Ready
// Unknown when nothing was reported yet).
func setReconciling(st *convergev1.SyncTarget, reason, msg string) {
	setCondition(st, convergev1.ReconcilingCondition, metav1.ConditionTrue, reason, msg)
	if apimeta.FindStatusCondition(st.Status.Conditions, convergev1.ReadyCondition) == nil {
		setCondition(st, convergev1.ReadyCondition, metav1.ConditionUnknown, reason, msg)
	}
}

// setFailed reports a failure on Ready, and on Healthy when health is what failed.
func setFailed(st *convergev1.SyncTarget, reason, msg string) {
	setCondition(st, convergev1.ReadyCondition, metav1.ConditionFalse, reason, msg)
	// The spec was acted on, so a Stalled left from an earlier spec no longer holds.
	apimeta.RemoveStatusCondition(&st.Status.Conditions, convergev1.StalledCondition)
	if reason == convergev1.HealthCheckFailedReason || reason == convergev1.RolledBackReason {
		setCondition(st, convergev1.HealthyCondition, metav1.ConditionFalse, reason, msg)
	}
}

// addHistory puts an entry first and drops the oldest past the SyncTarget's limit.
func addHistory(st *convergev1.SyncTarget, e convergev1.HistoryEntry) {
	e.Message = trim(e.Message)
	st.Status.Attempts = max(st.Status.Attempts, int64(len(st.Status.History))) + 1
	h := append([]convergev1.HistoryEntry{e}, st.Status.History...)
	if limit := st.GetHistoryLimit(); len(h) > limit {
		h = h[:limit]
	}
	st.Status.History = h
}

// lastResult is the result of the newest history entry for revision, if any.
func lastResult(st *convergev1.SyncTarget, revision string) (convergev1.SyncResult, bool) {
	if len(st.Status.History) == 0 || st.Status.History[0].Revision != revision {
		return "", false
	}
	return st.Status.History[0].Result, true
}

// summary says what an apply and prune did: "2 created, 1 configured, 1 pruned".
func summary(created, configured, deleted, unchanged int) string {
	parts := []string{}
	for _, p := range []struct {
		n    int
		what string
	}{{created, "created"}, {configured, "configured"}, {deleted, "pruned"}, {unchanged, "unchanged"}} {
		if p.n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", p.n, p.what))
		}
	}
	if len(parts) == 0 {
		return "no objects"
	}
	return strings.Join(parts, ", ")
}
