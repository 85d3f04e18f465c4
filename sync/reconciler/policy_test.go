package reconciler

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
)

const (
	revH = "main@sha1:1111111111111111111111111111111111111111"
	revR = "main@sha1:2222222222222222222222222222222222222222"
	revX = "main@sha1:3333333333333333333333333333333333333333"
)

// syncTarget returns a SyncTarget whose status is set by the mutators.
func syncTarget(mutate ...func(*convergev1.SyncTarget)) *convergev1.SyncTarget {
	st := &convergev1.SyncTarget{}
	st.Generation = 2
	st.Status.ObservedGeneration = 2
	for _, m := range mutate {
		m(st)
	}
	return st
}

func withHistory(rev string, res convergev1.SyncResult) func(*convergev1.SyncTarget) {
	return func(st *convergev1.SyncTarget) {
		st.Status.History = append([]convergev1.HistoryEntry{{Revision: rev, Result: res}}, st.Status.History...)
	}
}

func withReady(status metav1.ConditionStatus) func(*convergev1.SyncTarget) {
	return func(st *convergev1.SyncTarget) {
		st.Status.Conditions = append(st.Status.Conditions, metav1.Condition{Type: convergev1.ReadyCondition, Status: status})
	}
}

func applied(rev, healthy string) func(*convergev1.SyncTarget) {
	return func(st *convergev1.SyncTarget) {
		st.Status.LastAppliedRevision, st.Status.LastHealthyRevision = rev, healthy
	}
}

func TestRefused(t *testing.T) {
	for _, tc := range []struct {
		name string
		st   *convergev1.SyncTarget
		rev  string
		req  request
		want bool
	}{
		{name: "never tried", st: syncTarget(), rev: revR},
		{name: "succeeded", st: syncTarget(withHistory(revR, convergev1.SyncSucceeded)), rev: revR},
		{name: "failed", st: syncTarget(withHistory(revR, convergev1.SyncFailed)), rev: revR, want: true},
		{name: "rolled back", st: syncTarget(withHistory(revR, convergev1.SyncRolledBack)), rev: revR, want: true},
		{name: "rolled back, a user asks", st: syncTarget(withHistory(revR, convergev1.SyncRolledBack)), rev: revR,
			req: request{value: "now", isNew: true}},
		{name: "rolled back, the spec changed", st: syncTarget(withHistory(revR, convergev1.SyncRolledBack),
			func(st *convergev1.SyncTarget) { st.Generation = 3 }), rev: revR},
		{name: "the source moved on", st: syncTarget(withHistory(revR, convergev1.SyncRolledBack)), rev: revX},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			g.Expect(refused(tc.st, tc.rev, tc.req)).To(Equal(tc.want))
		})
	}
}

func TestSteady(t *testing.T) {
	for _, tc := range []struct {
		name string
		st   *convergev1.SyncTarget
		req  request
		full bool
		want bool
	}{
		{name: "applied, healthy, ready", st: syncTarget(applied(revR, revR), withReady(metav1.ConditionTrue)), want: true},
		{name: "not ready", st: syncTarget(applied(revR, revR), withReady(metav1.ConditionFalse))},
		{name: "applied, not healthy", st: syncTarget(applied(revR, revH), withReady(metav1.ConditionTrue))},
		{name: "another revision", st: syncTarget(applied(revH, revH), withReady(metav1.ConditionTrue))},
		{name: "spec changed", st: syncTarget(applied(revR, revR), withReady(metav1.ConditionTrue),
			func(st *convergev1.SyncTarget) { st.Generation = 3 })},
		{name: "a user asks", st: syncTarget(applied(revR, revR), withReady(metav1.ConditionTrue)),
			req: request{value: "now", isNew: true}},
		{name: "a full sync is due", st: syncTarget(applied(revR, revR), withReady(metav1.ConditionTrue)), full: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			g.Expect(steady(tc.st, revR, tc.req, tc.full)).To(Equal(tc.want))
		})
	}
}

func TestHeldRevision(t *testing.T) {
	g := NewWithT(t)
	h, ok := heldRevision(syncTarget(applied(revH, revH), withHistory(revR, convergev1.SyncRolledBack)))
	g.Expect(ok).To(BeTrue(), "rolled back: H is held")
	g.Expect(h).To(Equal(revH))
	_, ok = heldRevision(syncTarget(applied(revR, revH)))
	g.Expect(ok).To(BeFalse(), "a failed revision is applied: nothing healthy to hold")
	_, ok = heldRevision(syncTarget(applied(revR, "")))
	g.Expect(ok).To(BeFalse(), "a failed first deploy: nothing healthy to hold")
}

func TestFullSyncDue(t *testing.T) {
	now := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	finished := metav1.NewTime(now.Add(-2 * time.Hour))
	synced := syncTarget(func(st *convergev1.SyncTarget) {
		st.Status.History = []convergev1.HistoryEntry{{FinishedAt: &finished}}
	})
	for _, tc := range []struct {
		name     string
		st       *convergev1.SyncTarget
		lastFull time.Time
		interval time.Duration
		want     bool
	}{
		{name: "nothing synced yet", st: syncTarget(), interval: time.Hour},
		{name: "off", st: synced, interval: 0},
		{name: "last sync long ago", st: synced, interval: time.Hour, want: true},
		{name: "full apply remembered recently", st: synced, lastFull: now.Add(-59 * time.Minute), interval: time.Hour},
		{name: "full apply remembered an interval ago", st: synced, lastFull: now.Add(-time.Hour), interval: time.Hour, want: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			g.Expect(fullSyncDue(now, tc.lastFull, tc.st, tc.interval)).To(Equal(tc.want))
		})
	}
}

func TestIncrementalAllowed(t *testing.T) {
	now := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	base := &renderedSet{generation: 2}
	for _, tc := range []struct {
		name                        string
		base                        *renderedSet
		watched, pending, fullApply bool
		lastFull                    time.Time
		want                        bool
	}{
		{name: "all good", base: base, watched: true, lastFull: now.Add(-time.Minute), want: true},
		{name: "nothing remembered", watched: true, lastFull: now.Add(-time.Minute)},
		{name: "drift not watched", base: base, lastFull: now.Add(-time.Minute)},
		{name: "drift pending", base: base, watched: true, pending: true, lastFull: now.Add(-time.Minute)},
		{name: "full apply asked", base: base, watched: true, fullApply: true, lastFull: now.Add(-time.Minute)},
		{name: "no full apply yet", base: base, watched: true},
		{name: "full apply too long ago", base: base, watched: true, lastFull: now.Add(-2 * time.Hour)},
		{name: "another spec", base: &renderedSet{generation: 1}, watched: true, lastFull: now.Add(-time.Minute)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			g.Expect(incrementalAllowed(tc.base, 2, tc.watched, tc.pending, tc.fullApply, tc.lastFull, now, time.Hour)).
				To(Equal(tc.want))
		})
	}
}

func TestDependencyReady(t *testing.T) {
	ready := func(st *convergev1.SyncTarget) {
		st.Status.LastAppliedRevision, st.Status.LastFetchedRevision = revR, revR
	}
	for _, tc := range []struct {
		name string
		dep  *convergev1.SyncTarget
		want bool
		why  string
	}{
		{name: "ready and current", dep: syncTarget(withReady(metav1.ConditionTrue), ready), want: true},
		{name: "not ready", dep: syncTarget(withReady(metav1.ConditionFalse), ready), why: "is not ready"},
		{name: "spec not acted on", dep: syncTarget(withReady(metav1.ConditionTrue), ready,
			func(st *convergev1.SyncTarget) { st.Generation = 3 }), why: "has a spec change not acted on yet"},
		{name: "behind its source", dep: syncTarget(withReady(metav1.ConditionTrue), ready,
			func(st *convergev1.SyncTarget) { st.Status.LastFetchedRevision = revX }),
			why: "has not applied the revision its source points at"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			ok, why := dependencyReady(tc.dep)
			g.Expect(ok).To(Equal(tc.want))
			g.Expect(why).To(Equal(tc.why))
		})
	}
}

func TestRollbackTarget(t *testing.T) {
	healthFailed := failure{reason: convergev1.HealthCheckFailedReason, then: failRevision}
	disabled := false
	for _, tc := range []struct {
		name string
		st   *convergev1.SyncTarget
		f    failure
		want string
	}{
		{name: "health failed", st: syncTarget(applied(revR, revH)), f: healthFailed, want: revH},
		{name: "apply refused", st: syncTarget(applied(revH, revH)),
			f: failure{reason: convergev1.ApplyFailedReason, then: failRevision}, want: revH},
		{name: "the API server is away: retried, not rolled back", st: syncTarget(applied(revH, revH)),
			f: failure{reason: convergev1.ApplyFailedReason, then: retry}},
		{name: "build failed: nothing was applied", st: syncTarget(applied(revH, revH)),
			f: failure{reason: convergev1.BuildFailedReason, then: failRevision}},
		{name: "first deploy", st: syncTarget(applied(revR, "")), f: healthFailed},
		{name: "the healthy revision itself", st: syncTarget(applied(revR, revR)), f: healthFailed},
		{name: "rollback disabled", st: syncTarget(applied(revR, revH), func(st *convergev1.SyncTarget) {
			st.Spec.Rollback = &convergev1.RollbackSpec{Enabled: &disabled}
		}), f: healthFailed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			got, ok := rollbackTarget(tc.st, revR, tc.f)
			g.Expect(ok).To(Equal(tc.want != ""))
			g.Expect(got).To(Equal(tc.want))
		})
	}
}

func TestUnsettled(t *testing.T) {
	const revY = "main@sha1:4444444444444444444444444444444444444444"
	attempted := func(rev string) func(*convergev1.SyncTarget) {
		return func(st *convergev1.SyncTarget) { st.Status.LastAttemptedRevision = rev }
	}
	disabled := false
	for _, tc := range []struct {
		name string
		st   *convergev1.SyncTarget
		want string
	}{
		{name: "the healthy revision applied, its attempt recorded",
			st: syncTarget(applied(revH, revH), attempted(revH), withHistory(revH, convergev1.SyncSucceeded))},
		{name: "a failed revision rolled back",
			st: syncTarget(applied(revH, revH), attempted(revR), withHistory(revR, convergev1.SyncRolledBack))},
		{name: "a daemon stopped in the attempt of R",
			st: syncTarget(applied(revH, revH), attempted(revR), withHistory(revH, convergev1.SyncSucceeded)), want: revR},
		{name: "a daemon stopped in the rollback from R",
			st: syncTarget(applied(revR, revH), attempted(revR), withHistory(revH, convergev1.SyncSucceeded)), want: revR},
		{name: "R superseded in its health wait",
			st: syncTarget(applied(revR, revH), attempted(revR), withHistory(revR, convergev1.SyncFailed)), want: revR},
		{name: "the revision about to be attempted is not counted",
			st: syncTarget(applied(revH, revH), attempted(revX), withHistory(revH, convergev1.SyncSucceeded))},
		{name: "applied R and an unfinished attempt of Y: R first",
			st: syncTarget(applied(revR, revH), attempted(revY), withHistory(revR, convergev1.SyncFailed)), want: revR},
		{name: "nothing healthy to go back to",
			st: syncTarget(applied(revR, ""), attempted(revR))},
		{name: "rollback disabled", st: syncTarget(applied(revR, revH), attempted(revR), func(st *convergev1.SyncTarget) {
			st.Spec.Rollback = &convergev1.RollbackSpec{Enabled: &disabled}
		})},
	} {
		t.Run(tc.name, func(t *testing.T) {
			NewWithT(t).Expect(unsettled(tc.st, revX)).To(Equal(tc.want))
		})
	}
}

func TestCancelsWait(t *testing.T) {
	deploy := healthWait{revision: revR, healthy: revH}
	rollback := healthWait{revision: revH, healthy: revH, failed: revR}
	for _, tc := range []struct {
		name   string
		w      healthWait
		latest string
		want   bool
	}{
		{name: "deploy: source unchanged", w: deploy, latest: revR},
		{name: "deploy: source back at the healthy revision", w: deploy, latest: revH},
		{name: "deploy: a newer revision", w: deploy, latest: revX, want: true},
		{name: "deploy: source not read", w: deploy, latest: ""},
		{name: "rollback: source still at the failed revision", w: rollback, latest: revR},
		{name: "rollback: source at the healthy revision", w: rollback, latest: revH},
		{name: "rollback: a newer revision", w: rollback, latest: revX, want: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			g.Expect(cancelsWait(tc.w, tc.latest)).To(Equal(tc.want))
		})
	}
}

func TestWindowWait(t *testing.T) {
	g := NewWithT(t)
	now := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	g.Expect(windowWait(now, now.Add(10*time.Second), time.Minute)).To(Equal(10 * time.Second))
	g.Expect(windowWait(now, now.Add(time.Hour), time.Minute)).To(Equal(time.Minute), "no longer than the interval")
	g.Expect(windowWait(now, now.Add(-time.Second), time.Minute)).To(Equal(time.Minute))
}

// With cross-namespace dependencies refused, a dependsOn naming another namespace stalls
// the SyncTarget without reading anything there (the client is nil: a read would panic).
func TestCrossNamespaceDependencyIsRefused(t *testing.T) {
	g := NewWithT(t)
	r := &Reconciler{NoCrossNamespaceDependencies: true}
	st := syncTarget(func(st *convergev1.SyncTarget) {
		st.Namespace = "team-a"
		st.Spec.DependsOn = []convergev1.DependencyReference{{Name: "platform", Namespace: "team-b"}}
	})
	o := r.newRun(st).checkDependencies(t.Context())
	g.Expect(o).NotTo(BeNil())
	g.Expect(o.kind).To(Equal(stalled))
	g.Expect(o.reason).To(Equal(convergev1.InvalidSpecReason))
	g.Expect(o.message).To(ContainSubstring("team-b/platform is in another namespace"))
}

func TestPushPoll(t *testing.T) {
	seen := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	pushed := seen.Add(-300 * time.Millisecond)
	value := pushed.Format(time.RFC3339Nano)
	for _, tc := range []struct {
		name, value, handled string
		want                 time.Time
		wantPoll             bool
	}{
		{name: "no push announced"},
		{name: "push handled already", value: value, handled: value},
		{name: "new push: a poll after it", value: value, want: pushed, wantPoll: true},
		{name: "newer push than the handled one", value: value, handled: seen.Add(-time.Hour).Format(time.RFC3339Nano),
			want: pushed, wantPoll: true},
		{name: "announced by a clock ahead of ours: a poll now", value: seen.Add(time.Hour).Format(time.RFC3339Nano),
			want: seen, wantPoll: true},
		{name: "malformed value: a poll now", value: "soon", want: seen, wantPoll: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			since, poll := pushPoll(tc.value, tc.handled, seen)
			g.Expect(poll).To(Equal(tc.wantPoll))
			g.Expect(since).To(BeTemporally("==", tc.want))
		})
	}
}
