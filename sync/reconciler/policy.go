package reconciler

import (
	"fmt"
	"time"

	apimeta "k8s.io/apimachinery/pkg/api/meta"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
)

// The decisions of the reconciler. Each is a plain function of plain values, so that
// every rule is table-tested without a cluster; the reconciler only asks them.

// request is a reconcile a user asked for through the converge.dev/requestedAt annotation.
type request struct {
	// value is the annotation's value; empty when there is none.
	value string
	// isNew: the value differs from the last one handled.
	isNew bool
}

// requestOf reads the reconcile request of st.
func requestOf(st *convergev1.SyncTarget) request {
	v := st.Annotations[convergev1.RequestedAtAnnotation]
	return request{value: v, isNew: v != "" && v != st.Status.LastHandledReconcileAt}
}

// pushPoll says whether a push announced through the converge.dev/pushedAt annotation
// (value) is still to be served — the last one served was handled — and the time a poll must
// have started after to see it: the push's own time, but never later than when the reconciler
// first saw the value (seen), so that a clock ahead of ours or a malformed value costs one
// poll now and not a wait.
func pushPoll(value, handled string, seen time.Time) (time.Time, bool) {
	if value == "" || value == handled {
		return time.Time{}, false
	}
	at, err := time.Parse(time.RFC3339Nano, value)
	if err != nil || at.After(seen) {
		return seen, true
	}
	return at, true
}

// refused reports whether revision is not to be tried again: its last attempt failed or
// was rolled back, for the same spec, and no user asked for a new attempt. It is tried
// again when the source moves, the spec changes or a user asks.
func refused(st *convergev1.SyncTarget, revision string, req request) bool {
	res, ok := lastResult(st, revision)
	return ok && res != convergev1.SyncSucceeded && !req.isNew && st.Status.ObservedGeneration == st.Generation
}

// steady reports whether nothing changed since the last successful sync of revision:
// neither the revision nor the spec, no user asked, the SyncTarget is Ready and no full
// sync is due. Only drift is left to correct then.
func steady(st *convergev1.SyncTarget, revision string, req request, fullSyncDue bool) bool {
	return revision == st.Status.LastAppliedRevision && revision == st.Status.LastHealthyRevision &&
		st.Status.ObservedGeneration == st.Generation && !req.isNew && !fullSyncDue &&
		apimeta.IsStatusConditionTrue(st.Status.Conditions, convergev1.ReadyCondition)
}

// heldRevision is the healthy revision in place while the source's revision is refused:
// after a rollback, the last healthy revision stays applied and is still held against
// drift. There is none when what is applied never became healthy.
func heldRevision(st *convergev1.SyncTarget) (string, bool) {
	h := st.Status.LastHealthyRevision
	return h, h != "" && h == st.Status.LastAppliedRevision
}

// fullSyncDue reports whether every object should be applied again: interval has passed
// since the last full apply (lastFull, or when unknown the end of the last recorded sync).
// Zero interval turns the periodic full sync off; nothing synced yet is never due (the
// normal path applies everything then).
func fullSyncDue(now, lastFull time.Time, st *convergev1.SyncTarget, interval time.Duration) bool {
	if interval <= 0 {
		return false
	}
	if lastFull.IsZero() {
		if len(st.Status.History) == 0 || st.Status.History[0].FinishedAt == nil {
			return false
		}
		lastFull = st.Status.History[0].FinishedAt.Time
	}
	return now.Sub(lastFull) >= interval
}

// incrementalAllowed reports whether a new revision may apply only the objects that
// changed since the last successful sync (base): drift is watched and none is pending, the
// spec is the one base was applied for, a full apply happened (lastFull) within the
// full-sync interval, and no full apply was asked for (a user's request, a due full sync).
func incrementalAllowed(base *renderedSet, generation int64, driftWatched, driftPending, fullApply bool,
	lastFull, now time.Time, fullSyncInterval time.Duration) bool {
	if base == nil || !driftWatched || driftPending || fullApply || base.generation != generation || lastFull.IsZero() {
		return false
	}
	return fullSyncInterval <= 0 || now.Sub(lastFull) < fullSyncInterval
}

// dependencyReady says whether a SyncTarget depended on lets its dependents go ahead:
// Ready, for its current spec, with the revision its source points at applied.
func dependencyReady(dep *convergev1.SyncTarget) (bool, string) {
	if !apimeta.IsStatusConditionTrue(dep.Status.Conditions, convergev1.ReadyCondition) {
		return false, "is not ready"
	}
	if dep.Status.ObservedGeneration != dep.Generation {
		return false, "has a spec change not acted on yet"
	}
	if dep.Status.LastAppliedRevision == "" || dep.Status.LastAppliedRevision != dep.Status.LastFetchedRevision {
		return false, "has not applied the revision its source points at"
	}
	return true, ""
}

// rollbackTarget is the revision to roll back to after revision failed with f, or none:
// rollback is enabled, a healthy revision other than the failed one exists, and the
// failure is the revision's own (an apply the API server refused, or objects that did
// not become healthy).
func rollbackTarget(st *convergev1.SyncTarget, revision string, f failure) (string, bool) {
	healthy := st.Status.LastHealthyRevision
	if !st.RollbackEnabled() || healthy == "" || healthy == revision || !f.rollsBack() {
		return "", false
	}
	return healthy, true
}

// unsettled names a revision the cluster may hold that never became healthy, other than
// revision (the one about to be attempted), when rollback is on and there is a healthy
// revision to go back to: the applied revision, when it is not the healthy one (it failed
// with rollback's own deploy failing or interrupted, or a newer one superseded its health
// wait), or the last attempted one, when its attempt never ended (no history entry: a
// daemon stopped in it, or it is being retried). "" when the cluster holds the last
// healthy revision.
func unsettled(st *convergev1.SyncTarget, revision string) string {
	s := st.Status
	h := s.LastHealthyRevision
	if h == "" || h == revision || !st.RollbackEnabled() {
		return ""
	}
	if a := s.LastAppliedRevision; a != "" && a != h && a != revision {
		return a
	}
	if a := s.LastAttemptedRevision; a != "" && a != h && a != revision &&
		(len(s.History) == 0 || s.History[0].Revision != a) {
		return a
	}
	return ""
}

// healthWait is what a health wait waits for: revision, and when the wait is a
// rollback's, the revision that failed (the source still points at it).
type healthWait struct {
	revision string
	healthy  string // the last healthy revision
	failed   string // set during a rollback
}

// cancelsWait reports whether the source pointing at latest ends the wait: a revision
// nobody wants any more should not hold up the one that replaced it. A normal wait ends
// for any revision but its own and the last healthy one; a rollback's wait for H, with
// the source still at the failed R, ends only for a revision that is neither R nor H.
func cancelsWait(w healthWait, latest string) bool {
	if latest == "" || latest == w.revision {
		return false
	}
	if w.failed != "" {
		return latest != w.failed
	}
	return latest != w.healthy
}

// waitPollInterval is how often the source is looked at during a health wait.
func waitPollInterval(interval time.Duration) time.Duration {
	return min(max(interval, time.Second), 30*time.Second)
}

// windowWait is how long to wait before looking again at a SyncTarget held outside its
// sync windows until next: until the window opens, but no longer than its interval.
func windowWait(now, next time.Time, interval time.Duration) time.Duration {
	wait := next.Sub(now)
	if wait <= 0 || wait > interval {
		return interval
	}
	return wait
}

// outsideWindowMessage says when a closed sync window opens.
func outsideWindowMessage(next time.Time) string {
	return fmt.Sprintf("outside the sync windows; the next one opens at %s", next.UTC().Format(time.RFC3339))
}
