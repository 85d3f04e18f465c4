package apply

import (
	"context"
	"errors"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
)

// ErrWouldPruneAll is GuardEmpty's error: a revision renders no objects, and pruning
// would delete everything the SyncTarget applied. Callers say which revision.
var ErrWouldPruneAll = errors.New("renders no objects")

// GuardEmpty refuses a prune of all stale objects because the revision rendered none —
// more likely a broken path or a bad commit than a wish — unless allowEmpty
// (spec.allowEmpty) says so. The error wraps ErrWouldPruneAll; its message reads after
// the subject ("revision X " + message).
func GuardEmpty(rendered int, stale []convergev1.InventoryEntry, allowEmpty bool) error {
	if rendered > 0 || len(stale) == 0 || allowEmpty {
		return nil
	}
	return fmt.Errorf("%w: refusing to prune all %d objects (set spec.allowEmpty to allow it)", ErrWouldPruneAll, len(stale))
}

// PruneResult says what a prune did.
type PruneResult struct {
	// Deleted are the objects deleted.
	Deleted []string
	// Skipped are objects left alone: gone already, owned by someone else, or opted out.
	Skipped []string
	// Failed are the entries whose delete failed; they stay in the inventory for a retry.
	Failed []convergev1.InventoryEntry
}

// Prunables are the stale entries a prune deletes, and those it leaves.
type Prunables struct {
	// Objects are the live objects to delete, with their entries.
	Objects []Candidate
	// Skipped are objects left alone: gone already, owned by someone else, or opted out.
	Skipped []string
	// Failed are the entries that could not be read.
	Failed []convergev1.InventoryEntry
}

// Candidate is a live object a prune deletes.
type Candidate struct {
	Entry convergev1.InventoryEntry
	Live  *unstructured.Unstructured
}

// Prunable reads the live object of each stale entry and keeps those the SyncTarget
// named by owner may delete: only objects whose live labels name it (converge.dev/name
// and converge.dev/namespace) and whose Policy does not keep them (converge.dev/prune:
// disabled, or Flux's prune: disabled or ssa: Ignore). It goes
// on past a failure and reports all of them.
func Prunable(ctx context.Context, c client.Client, owner client.ObjectKey, stale []convergev1.InventoryEntry) (Prunables, error) {
	var res Prunables
	var errs []error
	for _, e := range stale {
		live, err := EntryObject(e)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if err := c.Get(ctx, client.ObjectKeyFromObject(live), live); err != nil {
			if apierrors.IsNotFound(err) {
				res.Skipped = append(res.Skipped, Describe(live)+" (already gone)")
				continue
			}
			res.Failed = append(res.Failed, e)
			errs = append(errs, fmt.Errorf("%s: %w", Describe(live), err))
			continue
		}
		if !Owns(owner, live) {
			res.Skipped = append(res.Skipped, Describe(live)+" (not owned)")
			continue
		}
		if Policy(live).KeepOnPrune {
			res.Skipped = append(res.Skipped, Describe(live)+" (prune disabled)")
			continue
		}
		res.Objects = append(res.Objects, Candidate{Entry: e, Live: live})
	}
	return res, errors.Join(errs...)
}

// Prune deletes the stale entries that this SyncTarget owns (see Prunable). It goes on
// past a failure and reports all of them.
func Prune(ctx context.Context, c client.Client, owner client.ObjectKey, stale []convergev1.InventoryEntry) (PruneResult, error) {
	candidates, err := Prunable(ctx, c, owner, stale)
	res := PruneResult{Skipped: candidates.Skipped, Failed: candidates.Failed}
	errs := []error{err}
	for _, p := range candidates.Objects {
		// Delete only the object we looked at: a preconditioned UID guards against a
		// same-named object created by someone else in between.
		err := c.Delete(ctx, p.Live, client.PropagationPolicy(metav1.DeletePropagationBackground),
			client.Preconditions{UID: ptrUID(p.Live)})
		if err != nil && !apierrors.IsNotFound(err) {
			res.Failed = append(res.Failed, p.Entry)
			errs = append(errs, fmt.Errorf("deleting %s: %w", Describe(p.Live), err))
			continue
		}
		res.Deleted = append(res.Deleted, Describe(p.Live))
	}
	return res, errors.Join(errs...)
}

// Owns reports whether obj carries the owner labels of the SyncTarget named by owner.
func Owns(owner client.ObjectKey, obj metav1.Object) bool {
	return ownedBy(owner, obj.GetLabels())
}

// ownedBy reports whether labels are the owner labels of the SyncTarget named by owner.
func ownedBy(owner client.ObjectKey, labels map[string]string) bool {
	return labels[convergev1.NameLabel] == owner.Name && labels[convergev1.NamespaceLabel] == owner.Namespace
}

func ptrUID(o metav1.Object) *types.UID {
	u := o.GetUID()
	return &u
}
