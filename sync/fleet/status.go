package fleet

import (
	"context"
	"fmt"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/api/equality"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
)

// maxMessage caps a condition message (the API allows 32 KiB).
const maxMessage = 4096

// fail reports a set that could not be generated or rendered: Ready=False with reason, and
// Stalled for a template that cannot render until the set changes; SourceVerified=False
// for a Git source none of whose revisions verified. Its targets are kept.
func (r *Reconciler) fail(ctx context.Context, set *convergev1.SyncTargetSet, reason string, cause error) error {
	orig := set.DeepCopy()
	msg := cause.Error()
	setCondition(set, convergev1.ReadyCondition, metav1.ConditionFalse, reason, msg)
	if reason == convergev1.VerificationFailedReason {
		setCondition(set, convergev1.SourceVerifiedCondition, metav1.ConditionFalse, reason, msg)
	}
	if reason == convergev1.TemplateInvalidReason {
		setCondition(set, convergev1.StalledCondition, metav1.ConditionTrue, reason, msg)
	} else {
		apimeta.RemoveStatusCondition(&set.Status.Conditions, convergev1.StalledCondition)
	}
	apimeta.RemoveStatusCondition(&set.Status.Conditions, convergev1.ReconcilingCondition)
	set.Status.ObservedGeneration = set.Generation
	return r.patchStatus(ctx, orig, set)
}

// patchStatus writes the set's status when it differs from orig's: a reconcile that
// changes nothing sends nothing.
func (r *Reconciler) patchStatus(ctx context.Context, orig, set *convergev1.SyncTargetSet) error {
	if equality.Semantic.DeepEqual(orig.Status, set.Status) {
		return nil
	}
	return r.Client.Status().Patch(ctx, set, client.MergeFrom(orig))
}

// report writes the targets, the current step and the conditions the plan and the
// verification of the generators' sources lead to.
func (r *Reconciler) report(ctx context.Context, set *convergev1.SyncTargetSet, targets []*Target, p Plan, gen Generated) error {
	orig := set.DeepCopy()
	set.Status.Targets = generatedTargets(targets, p)
	set.Status.CurrentStep = int32(p.CurrentStep)
	set.Status.PullRequests = pullRequestStates(gen.PullRequests, targets)
	set.Status.ObservedGeneration = set.Generation
	apimeta.RemoveStatusCondition(&set.Status.Conditions, convergev1.StalledCondition)
	switch {
	case p.Failed != nil:
		c := p.Failed.Failed()
		msg := fmt.Sprintf("SyncTarget %s failed (%s: %s)", p.Failed.Name, c.Reason, c.Message)
		if set.Spec.Strategy != nil {
			msg += fmt.Sprintf("; the rollout stopped at step %d", p.CurrentStep)
		}
		setCondition(set, convergev1.ReadyCondition, metav1.ConditionFalse, convergev1.RolloutFailedReason, msg)
		apimeta.RemoveStatusCondition(&set.Status.Conditions, convergev1.ReconcilingCondition)
	case !p.Done:
		msg := progress(targets, p)
		setCondition(set, convergev1.ReadyCondition, metav1.ConditionFalse, convergev1.RolloutProgressingReason, msg)
		setCondition(set, convergev1.ReconcilingCondition, metav1.ConditionTrue, convergev1.RolloutProgressingReason, msg)
	default:
		msg := fmt.Sprintf("%d SyncTargets Ready", len(targets))
		setCondition(set, convergev1.ReadyCondition, metav1.ConditionTrue, convergev1.SucceededReason, msg)
		apimeta.RemoveStatusCondition(&set.Status.Conditions, convergev1.ReconcilingCondition)
	}
	reportVerification(set, gen, p.Failed != nil)
	if len(gen.Held) > 0 {
		setCondition(set, convergev1.ReadyCondition, metav1.ConditionFalse, convergev1.GenerationFailedReason,
			strings.Join(gen.Held, "; "))
	}
	return r.patchStatus(ctx, orig, set)
}

// pullRequestStates are the pull requests read, each with the SyncTargets rendered from
// its parameters (its url), in the order of their numbers.
func pullRequestStates(prs []convergev1.PullRequestState, targets []*Target) []convergev1.PullRequestState {
	if len(prs) == 0 {
		return nil
	}
	byURL := map[string][]string{}
	for _, t := range targets {
		if u := t.Params["url"]; u != "" {
			byURL[u] = append(byURL[u], t.Name)
		}
	}
	out := make([]convergev1.PullRequestState, 0, len(prs))
	seen := map[string]bool{}
	for _, pr := range prs {
		id := pr.URL + "\x00" + fmt.Sprint(pr.Number)
		if seen[id] {
			continue // two generators of one repository read the same pull request
		}
		seen[id] = true
		if pr.Waiting == "" {
			pr.SyncTargets = byURL[pr.URL]
			sort.Strings(pr.SyncTargets)
		}
		out = append(out, pr)
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Number < out[j].Number })
	return out
}

// reportVerification sets SourceVerified when a gitDirectories source has verify: False
// when its current revision did not verify (the set then generates from the last one that
// did, and is not Ready, unless a failed rollout says more), True naming the signers when
// it did. Without verify, there is no such condition.
func reportVerification(set *convergev1.SyncTargetSet, gen Generated, rolloutFailed bool) {
	switch {
	case len(gen.Refused) > 0:
		msg := strings.Join(gen.Refused, "; ")
		setCondition(set, convergev1.SourceVerifiedCondition, metav1.ConditionFalse, convergev1.VerificationFailedReason, msg)
		if !rolloutFailed {
			setCondition(set, convergev1.ReadyCondition, metav1.ConditionFalse, convergev1.VerificationFailedReason, msg)
		}
	case len(gen.Verified) > 0:
		setCondition(set, convergev1.SourceVerifiedCondition, metav1.ConditionTrue, convergev1.SucceededReason,
			strings.Join(gen.Verified, "; "))
	default:
		apimeta.RemoveStatusCondition(&set.Status.Conditions, convergev1.SourceVerifiedCondition)
	}
}

func progress(targets []*Target, p Plan) string {
	ready := 0
	for _, t := range targets {
		if t.Ready() {
			ready++
		}
	}
	return fmt.Sprintf("%d of %d SyncTargets Ready; step %d rolling out, %d waiting for their turn",
		ready, len(targets), p.CurrentStep, len(p.Pending))
}

// generatedTargets is the status list, sorted by name.
func generatedTargets(targets []*Target, p Plan) []convergev1.GeneratedTarget {
	out := make([]convergev1.GeneratedTarget, 0, len(targets))
	for _, t := range targets {
		g := convergev1.GeneratedTarget{Name: t.Name, Step: int32(t.Step), Pending: p.Pending[t.Name]}
		if t.Live != nil {
			if c := apimeta.FindStatusCondition(t.Live.Status.Conditions, convergev1.ReadyCondition); c != nil {
				g.Ready = c.Status
			}
		}
		out = append(out, g)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

func setCondition(set *convergev1.SyncTargetSet, typ string, status metav1.ConditionStatus, reason, msg string) {
	if len(msg) > maxMessage {
		msg = msg[:maxMessage] + "…"
	}
	apimeta.SetStatusCondition(&set.Status.Conditions, metav1.Condition{
		Type: typ, Status: status, Reason: reason, Message: msg, ObservedGeneration: set.Generation,
	})
}
