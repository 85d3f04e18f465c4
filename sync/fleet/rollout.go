package fleet

import (
	"sort"

	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
)

// waitingReasons are the reasons of a Ready=False that say a SyncTarget waits, not that
// it failed.
var waitingReasons = map[string]bool{
	convergev1.ProgressingReason:        true,
	convergev1.DependencyNotReadyReason: true,
	convergev1.OutsideSyncWindowReason:  true,
	convergev1.SuspendedReason:          true,
}

// Target is one generated SyncTarget as the rollout sees it.
type Target struct {
	Rendered
	// Live is the SyncTarget in the cluster; nil when it does not exist yet.
	Live *convergev1.SyncTarget
	// Step is the index of the first rollout step whose labels it matches; SyncTargets no
	// step matches come last (the number of steps).
	Step int
}

// UpToDate reports whether the SyncTarget exists with the set's current rendering.
func (t *Target) UpToDate() bool {
	return t.Live != nil && t.Live.Annotations[TemplateHashAnnotation] == t.Hash
}

// observed reports whether the SyncTarget's controller acted on its current spec.
func (t *Target) observed() bool {
	return t.Live.Status.ObservedGeneration == t.Live.Generation
}

// Ready reports whether it is up to date and Ready at its current generation.
func (t *Target) Ready() bool {
	return t.UpToDate() && t.observed() &&
		apimeta.IsStatusConditionTrue(t.Live.Status.Conditions, convergev1.ReadyCondition)
}

// Failed returns the condition that says it failed at its current rendering and
// generation: Stalled, or Ready=False with a failure reason while not Reconciling.
func (t *Target) Failed() *metav1.Condition {
	if !t.UpToDate() || !t.observed() {
		return nil
	}
	conds := t.Live.Status.Conditions
	if c := apimeta.FindStatusCondition(conds, convergev1.StalledCondition); c != nil && c.Status == metav1.ConditionTrue {
		return c
	}
	c := apimeta.FindStatusCondition(conds, convergev1.ReadyCondition)
	if c == nil || c.Status != metav1.ConditionFalse || waitingReasons[c.Reason] ||
		apimeta.IsStatusConditionTrue(conds, convergev1.ReconcilingCondition) {
		return nil
	}
	return c
}

// Plan is what one reconcile writes, and what waits.
type Plan struct {
	// Apply are the SyncTargets to write now.
	Apply []*Target
	// Pending wait for their step, or for room under maxConcurrent.
	Pending map[string]bool
	// CurrentStep is the lowest step with a SyncTarget not Ready at its rendering.
	CurrentStep int
	// Failed is the first SyncTarget (by step, then name) that failed at its rendering.
	Failed *Target
	// Done is true when every SyncTarget is Ready at its rendering.
	Done bool
}

// AssignSteps sets the step of every target from the strategy's steps.
func AssignSteps(targets []*Target, s *convergev1.RolloutStrategy) {
	var steps []convergev1.RolloutStep
	if s != nil {
		steps = s.Steps
	}
	for _, t := range targets {
		t.Step = len(steps)
		if len(steps) == 0 {
			t.Step = 0
		}
		for i, st := range steps {
			if labels.SelectorFromSet(st.MatchLabels).Matches(labels.Set(t.Labels)) {
				t.Step = i
				break
			}
		}
	}
	sort.SliceStable(targets, func(i, j int) bool {
		if targets[i].Step != targets[j].Step {
			return targets[i].Step < targets[j].Step
		}
		return targets[i].Name < targets[j].Name
	})
}

// PlanRollout decides which of targets (sorted by AssignSteps) are written now. Without a
// strategy every one out of date is. With one, a failed SyncTarget stops the rollout; only
// the current step's are written, and no more at once than maxConcurrent allows, counting
// those written and not Ready yet.
func PlanRollout(targets []*Target, s *convergev1.RolloutStrategy) Plan {
	p := Plan{Pending: map[string]bool{}, CurrentStep: -1}
	inFlight := 0
	for _, t := range targets {
		if p.Failed == nil && t.Failed() != nil {
			p.Failed = t
		}
		if !t.Ready() {
			if p.CurrentStep < 0 {
				p.CurrentStep = t.Step
			}
			if t.UpToDate() {
				inFlight++
			}
		}
	}
	p.Done = p.CurrentStep < 0
	if p.Done {
		p.CurrentStep = 0
		if len(targets) > 0 {
			p.CurrentStep = targets[len(targets)-1].Step
		}
	}
	budget := len(targets)
	if s != nil && s.MaxConcurrent != nil {
		budget = int(*s.MaxConcurrent) - inFlight
	}
	for _, t := range targets {
		if t.UpToDate() {
			continue
		}
		if s != nil && (p.Failed != nil || t.Step > p.CurrentStep || budget <= 0) {
			p.Pending[t.Name] = true
			continue
		}
		p.Apply = append(p.Apply, t)
		budget--
	}
	return p
}
