package apply

import (
	"testing"

	. "github.com/onsi/gomega"
	"sigs.k8s.io/controller-runtime/pkg/client"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
)

func TestGuardEmpty(t *testing.T) {
	stale := inv("a_x__ConfigMap", "a_y__ConfigMap").Entries
	tests := []struct {
		name       string
		rendered   int
		stale      []convergev1.InventoryEntry
		allowEmpty bool
		wantErr    string
	}{
		{name: "renders nothing, would prune all", rendered: 0, stale: stale,
			wantErr: "renders no objects: refusing to prune all 2 objects (set spec.allowEmpty to allow it)"},
		{name: "renders nothing, allowed", rendered: 0, stale: stale, allowEmpty: true},
		{name: "renders nothing, nothing to prune", rendered: 0},
		{name: "renders something", rendered: 1, stale: stale},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			err := GuardEmpty(tt.rendered, tt.stale, tt.allowEmpty)
			if tt.wantErr == "" {
				g.Expect(err).NotTo(HaveOccurred())
				return
			}
			g.Expect(err).To(MatchError(ErrWouldPruneAll))
			g.Expect(err).To(MatchError(tt.wantErr))
		})
	}
}

func TestOwns(t *testing.T) {
	owner := client.ObjectKey{Namespace: "team", Name: "app"}
	tests := []struct {
		name   string
		labels map[string]string
		want   bool
	}{
		{name: "owner labels", labels: map[string]string{convergev1.NameLabel: "app", convergev1.NamespaceLabel: "team"}, want: true},
		{name: "another SyncTarget", labels: map[string]string{convergev1.NameLabel: "other", convergev1.NamespaceLabel: "team"}},
		{name: "same name, another namespace", labels: map[string]string{convergev1.NameLabel: "app", convergev1.NamespaceLabel: "elsewhere"}},
		{name: "no labels"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			o := obj("v1", "ConfigMap", "shop", "conf")
			o.SetLabels(tt.labels)
			g.Expect(Owns(owner, o)).To(Equal(tt.want))
		})
	}
}
