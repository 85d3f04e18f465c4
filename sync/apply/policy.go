package apply

import (
	"context"
	"fmt"

	"github.com/fluxcd/pkg/ssa/utils"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

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

// PolicyFunc is the policy a SyncTarget sets for some of its objects apart from their
// labels and annotations (a chart's CRD policy: spec.helm.crds and spec.helm.pruneCRDs).
// It adds to the objects' own policy (see Or). A nil PolicyFunc sets none.
type PolicyFunc func(*unstructured.Unstructured) ObjectPolicy

// Of is f's policy for o.
func (f PolicyFunc) Of(o *unstructured.Unstructured) ObjectPolicy {
	if f == nil || o == nil {
		return ObjectPolicy{}
	}
	return f(o)
}

// Prunable returns the stale entries whose objects f does not keep on prune.
func (f PolicyFunc) Prunable(stale []convergev1.InventoryEntry) []convergev1.InventoryEntry {
	if f == nil {
		return stale
	}
	out := stale[:0:0]
	for _, e := range stale {
		if o, err := EntryObject(e); err == nil && f.Of(o).KeepOnPrune {
			continue
		}
		out = append(out, e)
	}
	return out
}

// CreateOnly splits objects for an apply by f's IfNotPresent: an object f creates only
// and that exists already is never written, so it is left out of the set (nor is it checked
// for ownership). Those of them the SyncTarget owner created are returned as kept: they
// are still its own, and stay in its inventory so that no prune finds them stale.
func (f PolicyFunc) CreateOnly(ctx context.Context, c client.Client, owner client.ObjectKey,
	objects []*unstructured.Unstructured) (set, kept []*unstructured.Unstructured, err error) {
	set = objects[:0:0]
	for _, o := range objects {
		if !f.Of(o).IfNotPresent {
			set = append(set, o)
			continue
		}
		live := &unstructured.Unstructured{}
		live.SetGroupVersionKind(o.GroupVersionKind())
		switch err := c.Get(ctx, client.ObjectKeyFromObject(o), live); {
		case apierrors.IsNotFound(err):
			set = append(set, o)
		case err != nil:
			return nil, nil, fmt.Errorf("%s: reading the live object: %w", Describe(o), err)
		case Owns(owner, live):
			kept = append(kept, o)
		}
	}
	return set, kept, nil
}
