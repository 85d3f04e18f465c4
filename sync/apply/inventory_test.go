package apply

import (
	"testing"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
)

func inv(ids ...string) *convergev1.ResourceInventory {
	out := &convergev1.ResourceInventory{}
	for _, id := range ids {
		out.Entries = append(out.Entries, convergev1.InventoryEntry{ID: id, Version: "v1"})
	}
	return out
}

func ids(entries []convergev1.InventoryEntry) []string {
	var out []string
	for _, e := range entries {
		out = append(out, e.ID)
	}
	return out
}

func TestNewInventoryAndEntryObject(t *testing.T) {
	g := NewWithT(t)
	web := obj("apps/v1", "Deployment", "shop", "web")
	ns := obj("v1", "Namespace", "", "shop")
	got := NewInventory([]*unstructured.Unstructured{web, ns})
	g.Expect(got.Entries).To(Equal([]convergev1.InventoryEntry{
		{ID: "_shop__Namespace", Version: "v1"},
		{ID: "shop_web_apps_Deployment", Version: "v1"},
	}), "sorted by ID")

	back, err := EntryObject(got.Entries[1])
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(back.GetAPIVersion()).To(Equal("apps/v1"))
	g.Expect(Describe(back)).To(Equal("apps/v1 Deployment shop/web"))
	g.Expect(ObjectID(back)).To(Equal(got.Entries[1].ID))

	_, err = EntryObject(convergev1.InventoryEntry{ID: "not-an-id"})
	g.Expect(err).To(MatchError(ContainSubstring(`invalid inventory entry "not-an-id"`)))
}

func TestStale(t *testing.T) {
	tests := []struct {
		name         string
		old, current *convergev1.ResourceInventory
		want         []string
	}{
		{name: "no previous inventory", old: nil, current: inv("a_x__ConfigMap"), want: nil},
		{name: "nothing left", old: inv("a_x__ConfigMap"), current: inv("a_x__ConfigMap"), want: nil},
		{name: "one left Git", old: inv("a_x__ConfigMap", "a_y__ConfigMap"), current: inv("a_x__ConfigMap"), want: []string{"a_y__ConfigMap"}},
		{name: "everything left Git", old: inv("a_x__ConfigMap", "a_y__ConfigMap"), current: nil, want: []string{"a_x__ConfigMap", "a_y__ConfigMap"}},
		{name: "only new ones", old: inv(), current: inv("a_x__ConfigMap"), want: nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			g.Expect(ids(Stale(tt.old, tt.current))).To(Equal(tt.want))
		})
	}
}

func TestMergeInventory(t *testing.T) {
	tests := []struct {
		name  string
		inv   *convergev1.ResourceInventory
		extra []convergev1.InventoryEntry
		want  []string
	}{
		{name: "nil inventory", inv: nil, extra: inv("b_y__ConfigMap").Entries, want: []string{"b_y__ConfigMap"}},
		{name: "adds and sorts", inv: inv("b_y__ConfigMap"), extra: inv("a_x__ConfigMap").Entries, want: []string{"a_x__ConfigMap", "b_y__ConfigMap"}},
		{name: "no duplicates", inv: inv("a_x__ConfigMap"), extra: inv("a_x__ConfigMap", "a_x__ConfigMap").Entries, want: []string{"a_x__ConfigMap"}},
		{name: "nothing extra", inv: inv("a_x__ConfigMap"), want: []string{"a_x__ConfigMap"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			before := tt.inv.DeepCopy()
			g.Expect(ids(MergeInventory(tt.inv, tt.extra).Entries)).To(Equal(tt.want))
			g.Expect(tt.inv).To(Equal(before), "the inventory given is left as it was")
		})
	}
}
