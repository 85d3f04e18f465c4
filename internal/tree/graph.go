package tree

import (
	"context"
	"fmt"
	"sort"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Bounds of an OwnedIndex.
const (
	// indexListLimit caps one list of a kind in a namespace for an index: a namespace
	// with more is noted, and the objects past it are not shown.
	indexListLimit = 2000
	// maxIndexOwned caps the owned objects Of returns for all parents of one index
	// together.
	maxIndexOwned = 3000
)

// OwnedIndex is what the objects of a SyncTarget own, read for all of them at once: one
// list of each kind that may be owned (ReplicaSets, Pods, Jobs, EndpointSlices) in each
// namespace holding an object that owns such, however many objects there are — where
// LoadOwned reads for one object. Of then answers for each object from memory.
type OwnedIndex struct {
	byOwner map[types.UID][]*unstructured.Unstructured
	// slices are the EndpointSlices of each Service, by "<namespace>/<name>".
	slices map[string][]*unstructured.Unstructured
	budget int
	// Notes say what could not be listed or was cut.
	Notes []string
}

// LoadOwnedIndex lists, with c, the kinds the nodes' objects may own in their namespaces,
// and what those own in turn (Deployment → ReplicaSet → Pod). Kinds may refuses are left
// out, noted; so is a list that fails.
func LoadOwnedIndex(ctx context.Context, c client.Reader, nodes []Node, may MayList) *OwnedIndex {
	ix := &OwnedIndex{byOwner: map[types.UID][]*unstructured.Unstructured{},
		slices: map[string][]*unstructured.Unstructured{}, budget: maxIndexOwned}
	wanted := map[string]map[schema.GroupVersionKind]bool{}
	var want func(ns string, gk string)
	want = func(ns, gk string) {
		for _, gvk := range ownedKinds[gk] {
			if wanted[ns] == nil {
				wanted[ns] = map[schema.GroupVersionKind]bool{}
			}
			if !wanted[ns][gvk] {
				wanted[ns][gvk] = true
				want(ns, gvk.Group+"/"+gvk.Kind)
			}
		}
	}
	for _, n := range nodes {
		if n.Namespace != "" && n.UID != "" {
			want(n.Namespace, schema.FromAPIVersionAndKind(n.APIVersion, n.Kind).Group+"/"+n.Kind)
		}
	}
	for _, ns := range sortedKeys(wanted) {
		kinds := make([]schema.GroupVersionKind, 0, len(wanted[ns]))
		for gvk := range wanted[ns] {
			kinds = append(kinds, gvk)
		}
		sort.Slice(kinds, func(i, j int) bool { return kinds[i].String() < kinds[j].String() })
		for _, gvk := range kinds {
			ix.list(ctx, c, ns, gvk, may)
		}
	}
	return ix
}

// list reads the objects of gvk in ns into the index.
func (ix *OwnedIndex) list(ctx context.Context, c client.Reader, ns string, gvk schema.GroupVersionKind, may MayList) {
	if may != nil && !may(ctx, gvk, ns) {
		ix.Notes = append(ix.Notes, fmt.Sprintf("you may not list %ss in namespace %s", gvk.Kind, ns))
		return
	}
	list := &unstructured.UnstructuredList{}
	list.SetGroupVersionKind(gvk.GroupVersion().WithKind(gvk.Kind + "List"))
	err := c.List(ctx, list, client.InNamespace(ns), client.Limit(indexListLimit))
	switch {
	case apierrors.IsForbidden(err):
		ix.Notes = append(ix.Notes, fmt.Sprintf("you may not list %ss in namespace %s", gvk.Kind, ns))
		return
	case err != nil:
		ix.Notes = append(ix.Notes, fmt.Sprintf("cannot list %ss in namespace %s: %v", gvk.Kind, ns, err))
		return
	}
	if list.GetContinue() != "" {
		ix.Notes = append(ix.Notes, fmt.Sprintf("namespace %s has more than %d %ss: only the first are shown", ns, indexListLimit, gvk.Kind))
	}
	for i := range list.Items {
		o := &list.Items[i]
		if gvk.Kind == "EndpointSlice" {
			if svc := o.GetLabels()["kubernetes.io/service-name"]; svc != "" {
				ix.slices[ns+"/"+svc] = append(ix.slices[ns+"/"+svc], o)
			}
			continue
		}
		for _, ref := range o.GetOwnerReferences() {
			if ref.Controller != nil && *ref.Controller {
				ix.byOwner[ref.UID] = append(ix.byOwner[ref.UID], o)
			}
		}
	}
}

// Of is what the object of n owns, maxOwnedDepth deep, newest first, each with its
// health — as LoadOwned reads it, from the index. Once the index's budget is spent it
// returns nothing more, noted once.
func (ix *OwnedIndex) Of(n Node) []Owned {
	if n.UID == "" {
		return nil
	}
	parent := &unstructured.Unstructured{}
	parent.SetAPIVersion(n.APIVersion)
	parent.SetKind(n.Kind)
	parent.SetNamespace(n.Namespace)
	parent.SetName(n.Name)
	parent.SetUID(n.UID)
	return ix.of(parent, 1)
}

func (ix *OwnedIndex) of(parent *unstructured.Unstructured, depth int) []Owned {
	var children []*unstructured.Unstructured
	if parent.GroupVersionKind().Group == "" && parent.GetKind() == "Service" {
		children = ix.slices[parent.GetNamespace()+"/"+parent.GetName()]
	} else if HasOwned(parent.GroupVersionKind()) {
		children = ix.byOwner[parent.GetUID()]
	}
	children = append([]*unstructured.Unstructured(nil), children...)
	newestFirst(children)
	var out []Owned
	for _, child := range children {
		if ix.budget <= 0 {
			if ix.budget == 0 {
				ix.Notes = append(ix.Notes, fmt.Sprintf("only the first %d owned objects are shown", maxIndexOwned))
				ix.budget--
			}
			return out
		}
		ix.budget--
		o := ownedNode(child)
		if depth < maxOwnedDepth {
			o.Owned = ix.of(child, depth+1)
		}
		out = append(out, o)
	}
	return out
}
