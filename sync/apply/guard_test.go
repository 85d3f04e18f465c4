package apply

import (
	"errors"
	"fmt"
	"testing"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/util/intstr"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
)

func TestGuardDeletions(t *testing.T) {
	stale := func(n int) []convergev1.InventoryEntry {
		out := make([]convergev1.InventoryEntry, n)
		for i := range out {
			out[i] = convergev1.InventoryEntry{ID: fmt.Sprintf("ns_cm%d__ConfigMap", i), Version: "v1"}
		}
		return out
	}
	count, pct := intstr.FromInt32, intstr.FromString
	for _, tc := range []struct {
		name    string
		stale   int
		applied int
		limit   *intstr.IntOrString
		wantErr string
	}{
		{name: "no limit", stale: 40, applied: 40},
		{name: "nothing to prune", stale: 0, applied: 40, limit: ptr(count(0))},
		{name: "under the count", stale: 3, applied: 40, limit: ptr(count(3))},
		{name: "over the count", stale: 4, applied: 40, limit: ptr(count(3)),
			wantErr: "would delete too many objects: it prunes 4 of the 40 objects applied, more than spec.maxDeletions (3)"},
		{name: "zero forbids any prune", stale: 1, applied: 40, limit: ptr(count(0)), wantErr: "prunes 1 of the 40"},
		{name: "under the percentage", stale: 10, applied: 40, limit: ptr(pct("25%"))},
		{name: "over the percentage", stale: 11, applied: 40, limit: ptr(pct("25%")),
			wantErr: "it prunes 11 of the 40 objects applied, more than spec.maxDeletions (25%)"},
		{name: "a percentage rounds down", stale: 2, applied: 3, limit: ptr(pct("50%")), wantErr: "prunes 2 of the 3"},
		{name: "100% allows everything", stale: 40, applied: 40, limit: ptr(pct("100%"))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			err := GuardDeletions(stale(tc.stale), tc.applied, tc.limit)
			if tc.wantErr == "" {
				g.Expect(err).NotTo(HaveOccurred())
				return
			}
			g.Expect(err).To(MatchError(ContainSubstring(tc.wantErr)))
			g.Expect(errors.Is(err, ErrTooManyDeletions)).To(BeTrue())
		})
	}
}

func ptr[T any](v T) *T { return &v }
