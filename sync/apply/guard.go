package apply

import (
	"errors"
	"fmt"

	"k8s.io/apimachinery/pkg/util/intstr"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
)

// ErrTooManyDeletions is GuardDeletions' error: a revision would prune more objects than
// spec.maxDeletions allows.
var ErrTooManyDeletions = errors.New("would delete too many objects")

// GuardDeletions refuses a revision that would prune more of the applied objects than
// limit allows: a count, or a percentage of applied (rounded down). The stale entries are
// counted, not the ones a prune would really delete (some may be gone, or not owned):
// the guard must hold before anything is read or written. nil limit allows any number.
// The error wraps ErrTooManyDeletions; its message reads after the subject
// ("revision X " + message).
func GuardDeletions(stale []convergev1.InventoryEntry, applied int, limit *intstr.IntOrString) error {
	if limit == nil || len(stale) == 0 {
		return nil
	}
	allowed, err := intstr.GetScaledValueFromIntOrPercent(limit, applied, false)
	if err != nil {
		return fmt.Errorf("spec.maxDeletions: %w", err)
	}
	if len(stale) <= allowed {
		return nil
	}
	return fmt.Errorf("%w: it prunes %d of the %d objects applied, more than spec.maxDeletions (%s); nothing was applied "+
		"(a wrong path or a broken kustomization?) — raise spec.maxDeletions or ask for a reconcile to allow it",
		ErrTooManyDeletions, len(stale), applied, limit.String())
}
