package apply

import (
	"github.com/fluxcd/pkg/ssa/utils"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
)

// Flux's per-object annotations, honoured like converge's own so that objects written
// for Flux's kustomize-controller keep their meaning (see Policy).
const (
	FluxPruneAnnotation     = "kustomize.toolkit.fluxcd.io/prune"
	FluxReconcileAnnotation = "kustomize.toolkit.fluxcd.io/reconcile"
	FluxSSAAnnotation       = "kustomize.toolkit.fluxcd.io/ssa"
	FluxForceAnnotation     = "kustomize.toolkit.fluxcd.io/force"
)

// The values of FluxSSAAnnotation (matched without regard to case, as Flux does).
const (
	FluxSSAIfNotPresent = "IfNotPresent"
	FluxSSAIgnore       = "Ignore"
	FluxSSAMerge        = "Merge"
)

// ObjectPolicy is what converge may do with one object, as its labels and annotations say.
type ObjectPolicy struct {
	// Skip: converge leaves the object alone, neither applied nor compared
	// (converge.dev/reconcile: disabled, kustomize.toolkit.fluxcd.io/reconcile: disabled,
	// kustomize.toolkit.fluxcd.io/ssa: Ignore).
	Skip bool
	// KeepOnPrune: the object stays when it leaves Git (converge.dev/prune: disabled,
	// kustomize.toolkit.fluxcd.io/prune: disabled, kustomize.toolkit.fluxcd.io/ssa: Ignore,
	// helm.sh/resource-policy: keep).
	KeepOnPrune bool
	// IfNotPresent: the object is created when missing, never updated
	// (kustomize.toolkit.fluxcd.io/ssa: IfNotPresent).
	IfNotPresent bool
	// Merge: the fields other field managers set are left to them: the object is not
	// taken over (see TakeoverManagers), only the fields Git sets are applied
	// (kustomize.toolkit.fluxcd.io/ssa: Merge).
	Merge bool
	// Force: a change to an immutable field is applied by deleting and recreating the
	// object (converge.dev/force: enabled, kustomize.toolkit.fluxcd.io/force: enabled).
	Force bool
}

var (
	skipSelectors = []map[string]string{
		{convergev1.ReconcileAnnotation: convergev1.DisabledValue},
		{FluxReconcileAnnotation: convergev1.DisabledValue},
		{FluxSSAAnnotation: FluxSSAIgnore},
	}
	keepSelectors = []map[string]string{
		{convergev1.PruneAnnotation: convergev1.DisabledValue},
		{FluxPruneAnnotation: convergev1.DisabledValue},
		{FluxSSAAnnotation: FluxSSAIgnore},
		{convergev1.HelmResourcePolicyAnnotation: convergev1.HelmKeepValue},
	}
	forceSelectors = []map[string]string{
		{ForceAnnotation: "enabled"},
		{FluxForceAnnotation: "enabled"},
	}
)

// Policy reads o's policy from its labels and annotations (values matched without regard
// to case); a nil o has the zero policy. The callers combine the policies of the object
// in Git and of the live one where either may opt out (see Plan and Prunable).
func Policy(o *unstructured.Unstructured) ObjectPolicy {
	if o == nil {
		return ObjectPolicy{}
	}
	return ObjectPolicy{
		Skip:         anyInMetadata(o, skipSelectors),
		KeepOnPrune:  anyInMetadata(o, keepSelectors),
		IfNotPresent: utils.AnyInMetadata(o, map[string]string{FluxSSAAnnotation: FluxSSAIfNotPresent}),
		Merge:        utils.AnyInMetadata(o, map[string]string{FluxSSAAnnotation: FluxSSAMerge}),
		Force:        anyInMetadata(o, forceSelectors),
	}
}

// Or is the policy of two views of one object (in Git and live): each opt-out of either.
func (p ObjectPolicy) Or(q ObjectPolicy) ObjectPolicy {
	return ObjectPolicy{
		Skip:         p.Skip || q.Skip,
		KeepOnPrune:  p.KeepOnPrune || q.KeepOnPrune,
		IfNotPresent: p.IfNotPresent || q.IfNotPresent,
		Merge:        p.Merge || q.Merge,
		Force:        p.Force || q.Force,
	}
}

func anyInMetadata(o *unstructured.Unstructured, selectors []map[string]string) bool {
	for _, s := range selectors {
		if utils.AnyInMetadata(o, s) {
			return true
		}
	}
	return false
}
