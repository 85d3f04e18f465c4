package apply

import (
	"fmt"
	"sort"

	"github.com/fluxcd/cli-utils/pkg/object"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
	"github.com/converge-gitops/converge/health"
)

// NewInventory lists objects as inventory entries ("<ns>_<name>_<group>_<kind>" and the
// version they were applied with), sorted by ID.
func NewInventory(objects []*unstructured.Unstructured) *convergev1.ResourceInventory {
	inv := &convergev1.ResourceInventory{Entries: make([]convergev1.InventoryEntry, 0, len(objects))}
	for _, o := range objects {
		inv.Entries = append(inv.Entries, convergev1.InventoryEntry{
			ID:      ObjectID(o),
			Version: o.GroupVersionKind().Version,
		})
	}
	SortEntries(inv.Entries)
	return inv
}

// SortEntries sorts inventory entries by ID, the order of an inventory.
func SortEntries(e []convergev1.InventoryEntry) {
	sort.Slice(e, func(i, j int) bool { return e[i].ID < e[j].ID })
}

// ObjectID is the inventory ID of an object: "<namespace>_<name>_<group>_<kind>".
func ObjectID(o *unstructured.Unstructured) string {
	return object.UnstructuredToObjMetadata(o).String()
}

// Stale returns the entries of old that are not in current: what left Git.
func Stale(old, current *convergev1.ResourceInventory) []convergev1.InventoryEntry {
	if old == nil {
		return nil
	}
	keep := map[string]bool{}
	if current != nil {
		for _, e := range current.Entries {
			keep[e.ID] = true
		}
	}
	var stale []convergev1.InventoryEntry
	for _, e := range old.Entries {
		if !keep[e.ID] {
			stale = append(stale, e)
		}
	}
	return stale
}

// MergeInventory adds the entries of extra that inv lacks (objects a prune failed on stay
// in the inventory, so that they are retried).
func MergeInventory(inv *convergev1.ResourceInventory, extra []convergev1.InventoryEntry) *convergev1.ResourceInventory {
	out := inv.DeepCopy()
	if out == nil {
		out = &convergev1.ResourceInventory{}
	}
	have := map[string]bool{}
	for _, e := range out.Entries {
		have[e.ID] = true
	}
	for _, e := range extra {
		if !have[e.ID] {
			out.Entries = append(out.Entries, e)
			have[e.ID] = true
		}
	}
	SortEntries(out.Entries)
	return out
}

// EntryObject returns an empty object carrying the identity of an inventory entry.
func EntryObject(e convergev1.InventoryEntry) (*unstructured.Unstructured, error) {
	m, err := object.ParseObjMetadata(e.ID)
	if err != nil {
		return nil, fmt.Errorf("invalid inventory entry %q: %w", e.ID, err)
	}
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(m.GroupKind.WithVersion(e.Version))
	u.SetName(m.Name)
	u.SetNamespace(m.Namespace)
	return u, nil
}

// Describe names an object the way every converge message does ("apps/v1 Deployment
// shop/web"): with health's formatter, so prune and health messages read alike.
func Describe(u *unstructured.Unstructured) string {
	return health.RefForObject(u).String()
}
