package sync

import (
	"fmt"
	"strings"

	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
	"github.com/converge-gitops/converge/sync/apply"
)

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

// markReconciling says a reconcile is under way (kstatus: Reconciling=True, Ready=Unknown).
func markReconciling(st *convergev1.SyncTarget, msg string) {
	setCondition(st, convergev1.ReconcilingCondition, metav1.ConditionTrue, convergev1.ProgressingReason, msg)
	if apimeta.FindStatusCondition(st.Status.Conditions, convergev1.ReadyCondition) == nil {
		setCondition(st, convergev1.ReadyCondition, metav1.ConditionUnknown, convergev1.ProgressingReason, msg)
	}
}

// markReady records a finished, healthy sync.
func markReady(st *convergev1.SyncTarget, msg string) {
	setCondition(st, convergev1.ReadyCondition, metav1.ConditionTrue, convergev1.SucceededReason, msg)
	setCondition(st, convergev1.HealthyCondition, metav1.ConditionTrue, convergev1.SucceededReason, msg)
	apimeta.RemoveStatusCondition(&st.Status.Conditions, convergev1.ReconcilingCondition)
	apimeta.RemoveStatusCondition(&st.Status.Conditions, convergev1.StalledCondition)
	st.Status.ObservedGeneration = st.Generation
}

// markFailed records a failure. Final failures (a revision that was tried to the end, a
// rollback) set observedGeneration; transient ones keep Reconciling for the retry.
func markFailed(st *convergev1.SyncTarget, reason, msg string, final bool) {
	setCondition(st, convergev1.ReadyCondition, metav1.ConditionFalse, reason, msg)
	// The spec was acted on, so a Stalled left from an earlier spec no longer holds.
	apimeta.RemoveStatusCondition(&st.Status.Conditions, convergev1.StalledCondition)
	if reason == convergev1.HealthCheckFailedReason || reason == convergev1.RolledBackReason {
		setCondition(st, convergev1.HealthyCondition, metav1.ConditionFalse, reason, msg)
	}
	if final {
		apimeta.RemoveStatusCondition(&st.Status.Conditions, convergev1.ReconcilingCondition)
		st.Status.ObservedGeneration = st.Generation
	} else {
		setCondition(st, convergev1.ReconcilingCondition, metav1.ConditionTrue, reason, msg)
	}
}

// markStalled records a spec that cannot be acted on until it changes.
func markStalled(st *convergev1.SyncTarget, reason, msg string) {
	setCondition(st, convergev1.ReadyCondition, metav1.ConditionFalse, reason, msg)
	setCondition(st, convergev1.StalledCondition, metav1.ConditionTrue, reason, msg)
	apimeta.RemoveStatusCondition(&st.Status.Conditions, convergev1.ReconcilingCondition)
	st.Status.ObservedGeneration = st.Generation
}

// addHistory puts an entry first and drops the oldest past the SyncTarget's limit.
func addHistory(st *convergev1.SyncTarget, e convergev1.HistoryEntry) {
	e.Message = trim(e.Message)
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

func summary(res apply.Result, deleted int) string {
	parts := []string{}
	for _, p := range []struct {
		n    int
		what string
	}{{res.Created, "created"}, {res.Configured, "configured"}, {deleted, "pruned"}, {res.Unchanged, "unchanged"}} {
		if p.n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", p.n, p.what))
		}
	}
	if len(parts) == 0 {
		return "no objects"
	}
	return strings.Join(parts, ", ")
}
