package soak

import (
	"bytes"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
)

func TestCheckLive(t *testing.T) {
	g := NewWithT(t)
	want := map[string]string{"ConfigMap/a": "1", "ConfigMap/b": "2"}
	g.Expect(CheckLive("ns/st", "r1", want, map[string]string{"ConfigMap/a": "1", "ConfigMap/b": "2"})).To(BeEmpty())

	half := CheckLive("ns/st", "r2", want, map[string]string{"ConfigMap/a": "1", "ConfigMap/b": "old", "ConfigMap/c": "3"})
	g.Expect(half).To(HaveLen(1))
	g.Expect(half[0].Invariant).To(Equal(NoHalfApplied))
	g.Expect(half[0].Detail).To(And(ContainSubstring("r2"), ContainSubstring(`ConfigMap/b is "old", the revision has "2"`),
		ContainSubstring("ConfigMap/c is not in the revision")))
	g.Expect(CheckLive("ns/st", "r2", want, map[string]string{"ConfigMap/a": "1"})[0].Detail).To(ContainSubstring("ConfigMap/b is missing"))
}

func TestCheckForeign(t *testing.T) {
	g := NewWithT(t)
	before := map[string]Version{"ns/ConfigMap/x": {"u1", "10"}, "ns/ConfigMap/y": {"u2", "11"}, "ns/ConfigMap/z": {"u3", "12"}}
	g.Expect(CheckForeign(before, before)).To(BeEmpty())
	found := CheckForeign(before, map[string]Version{"ns/ConfigMap/x": {"u1", "15"}, "ns/ConfigMap/y": {"u9", "20"}})
	g.Expect(found).To(HaveLen(3))
	g.Expect(found[0]).To(Equal(Violation{ForeignUntouched, "ns/ConfigMap/x", "changed (resourceVersion 10 → 15)"}))
	g.Expect(found[1]).To(Equal(Violation{ForeignUntouched, "ns/ConfigMap/y", "deleted and created again"}))
	g.Expect(found[2]).To(Equal(Violation{ForeignUntouched, "ns/ConfigMap/z", "deleted"}))
}

func status(applied, attempted string, ready metav1.ConditionStatus, reason string) *convergev1.SyncTarget {
	st := &convergev1.SyncTarget{}
	st.Status.LastAppliedRevision, st.Status.LastAttemptedRevision = applied, attempted
	st.Status.Conditions = []metav1.Condition{{Type: convergev1.ReadyCondition, Status: ready, Reason: reason}}
	return st
}

func TestCheckOutcome(t *testing.T) {
	g := NewWithT(t)
	commits := map[string]Commit{
		"good": {Revision: "good", Kind: Good}, "sick": {Revision: "sick", Kind: FailsHealth},
		"broken": {Revision: "broken", Kind: FailsRender},
	}
	g.Expect(CheckOutcome("ns/st", status("good", "good", metav1.ConditionTrue, "Succeeded"), commits)).To(BeEmpty())
	g.Expect(CheckOutcome("ns/st", status("good", "sick", metav1.ConditionFalse, "RolledBack"), commits)).To(BeEmpty())
	g.Expect(CheckOutcome("ns/st", status("good", "broken", metav1.ConditionFalse, "BuildFailed"), commits)).To(BeEmpty())

	left := CheckOutcome("ns/st", status("sick", "sick", metav1.ConditionFalse, "HealthCheckFailed"), commits)
	g.Expect(left).To(HaveLen(1))
	g.Expect(left[0].Invariant).To(Equal(FailedRolledBack))
	g.Expect(left[0].Detail).To(ContainSubstring("sick, a revision meant to fails-health, is the applied revision"))
	rolling := status("sick", "sick", metav1.ConditionFalse, "HealthCheckFailed")
	rolling.Status.Conditions[0].Message = "revision sick failed: health check failed; rolling back to good"
	g.Expect(CheckOutcome("ns/st", rolling, commits)).To(BeEmpty(), "a rollback under way says why")
	rolling.Status.Conditions[0].Message = "revision sick failed: health check failed; rolling back to good failed too: connection refused"
	g.Expect(CheckOutcome("ns/st", rolling, commits)).To(BeEmpty(), "a rollback that failed for now says why, and is tried again")
	rolling.Status.Conditions[0].Message = "revision broken failed: render failed; applying good again in place of sick, which never became healthy, failed too: health check failed"
	g.Expect(CheckOutcome("ns/st", rolling, commits)).To(BeEmpty(), "a rollback after a later failure that failed for now says why, and is tried again")
	rolling.Status.Conditions[0].Message = "revision broken failed: render failed"
	g.Expect(CheckOutcome("ns/st", rolling, commits)).To(HaveLen(1), "a failed revision left applied without a word")
	silent := CheckOutcome("ns/st", status("good", "broken", metav1.ConditionTrue, "Succeeded"), commits)
	g.Expect(silent).To(HaveLen(1))
	g.Expect(silent[0].Detail).To(ContainSubstring("Ready does not say it failed"))
}

func TestCheckRefused(t *testing.T) {
	g := NewWithT(t)
	sick := Commit{Revision: "sick", Kind: FailsHealth}
	away := entry("sick", 1, convergev1.SyncFailed)
	away.Message = "apply: the server is currently unable to handle the request"
	rolled := entry("sick", 2, convergev1.SyncRolledBack)
	var l Ledger
	l.Add("ns/st", hist(rolled, away))
	l.Add("ns/st", hist(rolled, away)) // seen again: the same entries
	g.Expect(l.CheckRefused("ns/st", sick)).To(BeEmpty(), "a passing failure before its own is tried again")

	l.Add("ns/st", hist(entry("sick", 5, convergev1.SyncRolledBack), rolled))
	again := l.CheckRefused("ns/st", sick)
	g.Expect(again).To(HaveLen(1))
	g.Expect(again[0].Detail).To(ContainSubstring("refused (attempt 2), was attempted again"))

	var m Ledger
	m.Add("ns/st", hist(entry("broken", 1, convergev1.SyncSucceeded)))
	ok := m.CheckRefused("ns/st", Commit{Revision: "broken", Kind: FailsRender})
	g.Expect(ok).To(HaveLen(1))
	g.Expect(ok[0].Detail).To(ContainSubstring("meant to fails-render, succeeded"))

	pruned := entry("typo", 1, convergev1.SyncFailed)
	pruned.Message = "prunes 4 of the 5 objects applied, more than spec.maxDeletions (50%)"
	m.Add("ns/st", hist(entry("typo", 3, convergev1.SyncFailed), pruned))
	g.Expect(m.CheckRefused("ns/st", Commit{Revision: "typo", Kind: PrunesTooMuch})).To(HaveLen(1))
}

func TestCheckDrift(t *testing.T) {
	g := NewWithT(t)
	d := Drift{Target: "ns/st", Object: "ConfigMap/a", At: t0}
	g.Expect(CheckDrift(d, 10*time.Second, 0, t0.Add(9*time.Second))).To(BeEmpty(), "not yet due")
	late := CheckDrift(d, 10*time.Second, 0, t0.Add(11*time.Second))
	g.Expect(late).To(HaveLen(1))
	g.Expect(late[0].Invariant).To(Equal(DriftRestored))
	g.Expect(late[0].Detail).To(ContainSubstring("not restored after 11s"))
	g.Expect(CheckDrift(d, 10*time.Second, 5*time.Second, t0.Add(14*time.Second))).To(BeEmpty(), "time of faults is not counted")
	d.Restored = t0.Add(30 * time.Second)
	g.Expect(CheckDrift(d, 10*time.Second, 0, t0.Add(time.Hour))[0].Detail).To(ContainSubstring("restored after 30s"))
}

func TestCheckConverged(t *testing.T) {
	g := NewWithT(t)
	g.Expect(CheckConverged("ns/st", "new", status("new", "new", metav1.ConditionTrue, "Succeeded"))).To(BeEmpty())
	v := CheckConverged("ns/st", "new", status("old", "new", metav1.ConditionFalse, "ApplyFailed"))
	g.Expect(v).To(HaveLen(1))
	g.Expect(v[0].Invariant).To(Equal(Converges))
	g.Expect(v[0].Detail).To(ContainSubstring(`applied "old", Ready False ApplyFailed`))
}

func TestCheckBounded(t *testing.T) {
	g := NewWithT(t)
	steady := make([]Sample, 40)
	for i := range steady {
		steady[i] = Sample{At: t0.Add(time.Duration(i) * time.Second), RSS: 100 << 20, Goroutines: 300 + i%7}
	}
	steady[0].RSS, steady[0].Goroutines = 20<<20, 50 // the warm-up is not compared
	g.Expect(CheckBounded("daemon a", steady)).To(BeEmpty())
	g.Expect(CheckBounded("daemon a", steady[:5])).To(BeEmpty(), "too few samples to say")

	leaking := make([]Sample, 40)
	for i := range leaking {
		leaking[i] = Sample{RSS: int64(100+10*i) << 20, Goroutines: 300 + 30*i}
	}
	found := CheckBounded("daemon a", leaking)
	g.Expect(found).To(HaveLen(2))
	g.Expect(found[0].Detail).To(Equal("resident memory grew from 290 MiB to 490 MiB"))
	g.Expect(found[1].Detail).To(Equal("goroutines grew from 870 to 1470"))
}

func TestQuiet(t *testing.T) {
	g := NewWithT(t)
	st := status("a", "a", metav1.ConditionTrue, "Succeeded")
	st.Generation, st.Status.ObservedGeneration = 2, 2
	g.Expect(Quiet(st)).To(BeTrue())
	st.Status.Conditions = append(st.Status.Conditions, metav1.Condition{Type: convergev1.ReconcilingCondition, Status: metav1.ConditionTrue})
	g.Expect(Quiet(st)).To(BeFalse(), "a sync runs")
	st.Status.Conditions = st.Status.Conditions[:1]
	st.Generation = 3
	g.Expect(Quiet(st)).To(BeFalse(), "the spec changed and is not observed yet")
}

func TestReport(t *testing.T) {
	g := NewWithT(t)
	r := &Report{Seed: 42, Duration: 90 * time.Second}
	r.Op("commit good")
	r.Op("commit good")
	r.Fault("kill -9")
	for _, ms := range []int{100, 200, 300, 400, 5000} {
		r.Deployed(time.Duration(ms) * time.Millisecond)
	}
	r.RolledBack()
	v := Violation{Invariant: ForeignUntouched, Object: "ns/ConfigMap/x", Detail: "deleted"}
	r.Checked(ForeignUntouched, []Violation{v})
	r.Checked(ForeignUntouched, []Violation{v})
	r.Checked(NoHalfApplied, nil)
	g.Expect(r.Violations()).To(Equal([]Violation{v}), "one violation seen twice is reported once")
	g.Expect(r.Checks()).To(Equal(map[int]int{ForeignUntouched: 2, NoHalfApplied: 1}))
	var b bytes.Buffer
	r.Write(&b)
	out := b.String()
	for _, want := range []string{"seed 42", "SOAK_SEED=42", "operations  2: commit good=2", "faults      1: kill -9=1",
		"5 deployed healthy, 1 rolled back", "p50 300ms, p99 5s", "checks      3 by invariant: 1=1 2=2", "violations  1",
		"invariant 2 (objects converge does not own are untouched) broken by ns/ConfigMap/x: deleted (seed 42)"} {
		g.Expect(out).To(ContainSubstring(want))
	}
	g.Expect(strings.Count(out, "broken by")).To(Equal(1))
}
