package reconciler

import (
	"context"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
	"github.com/converge-gitops/converge/sync/apply"
	hookspkg "github.com/converge-gitops/converge/sync/hooks"
)

// isHelm reports whether the SyncTarget deploys a chart by its spec: spec.chart, or
// spec.helm for a chart kept in Git.
func isHelm(st *convergev1.SyncTarget) bool {
	return st.IsChart() || st.Spec.Helm != nil
}

// chartObjects splits a chart's hooks from the objects of its revision and, under the
// Create CRD policy, leaves out the CRDs that exist already: they are never changed.
func (ru *run) chartObjects(ctx context.Context, c client.Client, objects []*unstructured.Unstructured) (rest, hooks []*unstructured.Unstructured, err error) {
	rest, hooks = hookspkg.Split(objects)
	if ru.st.CRDPolicy() != convergev1.CRDsCreate || !isHelm(ru.st) {
		return rest, hooks, nil
	}
	out := rest[:0:0]
	for _, o := range rest {
		if isCRD(o) {
			live := &unstructured.Unstructured{}
			live.SetGroupVersionKind(o.GroupVersionKind())
			err := c.Get(ctx, client.ObjectKeyFromObject(o), live)
			if err == nil {
				continue
			}
			if !apierrors.IsNotFound(err) {
				return nil, nil, err
			}
		}
		out = append(out, o)
	}
	return out, hooks, nil
}

func isCRD(o *unstructured.Unstructured) bool {
	gk := o.GroupVersionKind().GroupKind()
	return gk.Group == "apiextensions.k8s.io" && gk.Kind == "CustomResourceDefinition"
}

// keepChartCRDs leaves the CRDs out of what a chart's prune deletes, unless
// spec.helm.pruneCRDs: deleting a CRD deletes every object of its kind.
func keepChartCRDs(st *convergev1.SyncTarget, stale []convergev1.InventoryEntry) []convergev1.InventoryEntry {
	if !isHelm(st) || (st.Spec.Helm != nil && st.Spec.Helm.PruneCRDs) {
		return stale
	}
	out := stale[:0:0]
	for _, e := range stale {
		if o, err := apply.EntryObject(e); err == nil && isCRD(o) {
			continue
		}
		out = append(out, e)
	}
	return out
}
