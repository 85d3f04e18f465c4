package fleet

import (
	"testing"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
)

// tgt is a generated SyncTarget labelled ring=<ring>; live says how the cluster has it:
// "" absent, "old" at an older rendering, "updating" at this one not Ready yet, "ready",
// "failed" (RolledBack) or "retrying" (Ready=False while Reconciling).
func tgt(name, ring, live string) *Target {
	t := &Target{Rendered: Rendered{Name: name, Hash: "new", Labels: map[string]string{"ring": ring}}}
	if live == "" {
		return t
	}
	st := &convergev1.SyncTarget{ObjectMeta: metav1.ObjectMeta{Name: name, Generation: 2,
		Annotations: map[string]string{TemplateHashAnnotation: "new"}}}
	st.Status.ObservedGeneration = 2
	cond := func(typ string, s metav1.ConditionStatus, reason string) {
		st.Status.Conditions = append(st.Status.Conditions, metav1.Condition{Type: typ, Status: s, Reason: reason})
	}
	switch live {
	case "old":
		st.Annotations[TemplateHashAnnotation] = "old"
		cond(convergev1.ReadyCondition, metav1.ConditionTrue, convergev1.SucceededReason)
	case "updating":
		st.Status.ObservedGeneration = 1
		cond(convergev1.ReadyCondition, metav1.ConditionTrue, convergev1.SucceededReason)
	case "ready":
		cond(convergev1.ReadyCondition, metav1.ConditionTrue, convergev1.SucceededReason)
	case "failed":
		cond(convergev1.ReadyCondition, metav1.ConditionFalse, convergev1.RolledBackReason)
	case "retrying":
		cond(convergev1.ReadyCondition, metav1.ConditionFalse, convergev1.FetchFailedReason)
		cond(convergev1.ReconcilingCondition, metav1.ConditionTrue, convergev1.FetchFailedReason)
	}
	t.Live = st
	return t
}

func names(ts []*Target) []string {
	out := []string{}
	for _, t := range ts {
		out = append(out, t.Name)
	}
	return out
}

var twoRings = &convergev1.RolloutStrategy{Steps: []convergev1.RolloutStep{
	{MatchLabels: map[string]string{"ring": "canary"}}, {MatchLabels: map[string]string{"ring": "main"}}}}

func plan(s *convergev1.RolloutStrategy, ts ...*Target) Plan {
	AssignSteps(ts, s)
	return PlanRollout(ts, s)
}

func TestRolloutWithoutStrategyWritesEverything(t *testing.T) {
	g := NewWithT(t)
	p := plan(nil, tgt("b", "main", "old"), tgt("a", "canary", ""), tgt("c", "main", "ready"))
	g.Expect(names(p.Apply)).To(Equal([]string{"a", "b"}))
	g.Expect(p.Pending).To(BeEmpty())
	g.Expect(p.Done).To(BeFalse())
}

func TestRolloutSteps(t *testing.T) {
	g := NewWithT(t)
	p := plan(twoRings, tgt("m1", "main", "old"), tgt("c1", "canary", "old"), tgt("x", "other", ""))
	g.Expect(names(p.Apply)).To(Equal([]string{"c1"}), "step 0 first")
	g.Expect(p.Pending).To(Equal(map[string]bool{"m1": true, "x": true}))
	g.Expect(p.CurrentStep).To(Equal(0))

	p = plan(twoRings, tgt("m1", "main", "old"), tgt("c1", "canary", "updating"), tgt("x", "other", ""))
	g.Expect(p.Apply).To(BeEmpty(), "step 0 is not Ready at its new generation")

	p = plan(twoRings, tgt("m1", "main", "old"), tgt("c1", "canary", "ready"), tgt("x", "other", ""))
	g.Expect(names(p.Apply)).To(Equal([]string{"m1"}))
	g.Expect(p.Pending).To(Equal(map[string]bool{"x": true}), "unmatched SyncTargets come last")
	g.Expect(p.CurrentStep).To(Equal(1))

	p = plan(twoRings, tgt("m1", "main", "ready"), tgt("c1", "canary", "ready"), tgt("x", "other", "ready"))
	g.Expect(p.Done).To(BeTrue())
	g.Expect(p.Apply).To(BeEmpty())
}

func TestRolloutStopsAtAFailure(t *testing.T) {
	g := NewWithT(t)
	p := plan(twoRings, tgt("m1", "main", "old"), tgt("c1", "canary", "failed"), tgt("c2", "canary", "old"))
	g.Expect(p.Failed.Name).To(Equal("c1"))
	g.Expect(p.Apply).To(BeEmpty())
	g.Expect(p.Pending).To(Equal(map[string]bool{"m1": true, "c2": true}))

	// Retrying is not failing.
	p = plan(twoRings, tgt("m1", "main", "old"), tgt("c1", "canary", "retrying"))
	g.Expect(p.Failed).To(BeNil())
	g.Expect(p.Pending).To(Equal(map[string]bool{"m1": true}))

	// A failure at an older rendering does not count: the new one may fix it.
	old := tgt("c1", "canary", "failed")
	old.Live.Annotations[TemplateHashAnnotation] = "old"
	p = plan(twoRings, old)
	g.Expect(p.Failed).To(BeNil())
	g.Expect(names(p.Apply)).To(Equal([]string{"c1"}))
}

func TestRolloutMaxConcurrent(t *testing.T) {
	g := NewWithT(t)
	s := &convergev1.RolloutStrategy{MaxConcurrent: ptr.To[int32](2)}
	p := plan(s, tgt("a", "", "updating"), tgt("b", "", "old"), tgt("c", "", "old"), tgt("d", "", ""))
	g.Expect(names(p.Apply)).To(Equal([]string{"b"}), "one is already being updated")
	g.Expect(p.Pending).To(Equal(map[string]bool{"c": true, "d": true}))
}
