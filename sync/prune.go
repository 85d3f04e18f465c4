package sync

import (
	"context"
	"errors"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
)

// PruneResult says what a prune did.
type PruneResult struct {
	// Deleted are the objects deleted.
	Deleted []string
	// Skipped are objects left alone: gone already, owned by someone else, or opted out.
	Skipped []string
	// Failed are the entries whose delete failed; they stay in the inventory for a retry.
	Failed []convergev1.InventoryEntry
}

// Prune deletes the stale entries that this SyncTarget owns: only objects whose live
// labels name it (converge.dev/name and converge.dev/namespace) and that do not carry
// converge.dev/prune: disabled. It goes on past a failure and reports all of them.
func Prune(ctx context.Context, c client.Client, owner client.ObjectKey, stale []convergev1.InventoryEntry) (PruneResult, error) {
	var res PruneResult
	var errs []error
	for _, e := range stale {
		obj, err := entryObject(e)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		live := &metav1.PartialObjectMetadata{}
		live.SetGroupVersionKind(obj.GroupVersionKind())
		if err := c.Get(ctx, client.ObjectKeyFromObject(obj), live); err != nil {
			if apierrors.IsNotFound(err) {
				res.Skipped = append(res.Skipped, describe(obj)+" (already gone)")
				continue
			}
			res.Failed = append(res.Failed, e)
			errs = append(errs, fmt.Errorf("%s: %w", describe(obj), err))
			continue
		}
		if !Owns(owner, live) {
			res.Skipped = append(res.Skipped, describe(obj)+" (not owned)")
			continue
		}
		if live.GetAnnotations()[convergev1.PruneAnnotation] == convergev1.DisabledValue {
			res.Skipped = append(res.Skipped, describe(obj)+" (prune disabled)")
			continue
		}
		// Delete only the object we looked at: a preconditioned UID guards against a
		// same-named object created by someone else in between.
		err = c.Delete(ctx, obj, client.PropagationPolicy(metav1.DeletePropagationBackground),
			client.Preconditions{UID: ptrUID(live)})
		if err != nil && !apierrors.IsNotFound(err) {
			res.Failed = append(res.Failed, e)
			errs = append(errs, fmt.Errorf("deleting %s: %w", describe(obj), err))
			continue
		}
		res.Deleted = append(res.Deleted, describe(obj))
	}
	return res, errors.Join(errs...)
}

// Owns reports whether obj carries the owner labels of the SyncTarget named by owner.
func Owns(owner client.ObjectKey, obj metav1.Object) bool {
	l := obj.GetLabels()
	return l[convergev1.NameLabel] == owner.Name && l[convergev1.NamespaceLabel] == owner.Namespace
}

func ptrUID(o metav1.Object) *types.UID {
	u := o.GetUID()
	return &u
}
