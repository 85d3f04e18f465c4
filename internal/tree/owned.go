package tree

import (
	"context"
	"fmt"
	"sort"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/converge-gitops/converge/health"
)

// Bounds of what Owned reads.
const (
	// maxOwnedDepth is how deep ownership is followed: Deployment → ReplicaSet → Pod,
	// CronJob → Job → Pod.
	maxOwnedDepth = 3
	// maxOwned caps the objects one call returns, all levels together.
	maxOwned = 300
	// ownedListLimit caps one list of a kind in a namespace.
	ownedListLimit = 500
)

// Owned is an object that another owns (its controller), with its live health and
// what it owns in turn.
type Owned struct {
	APIVersion, Kind, Name string
	Status                 health.Status
	// Message says why, from kstatus; never object data.
	Message string
	Owned   []Owned
}

// OwnedResult is what an object owns, and what was left out and why.
type OwnedResult struct {
	Owned []Owned
	// Notes say what could not be listed or was cut.
	Notes []string
}

// ownedKinds are the kinds the controllers make for a kind, by "group/Kind".
var ownedKinds = map[string][]schema.GroupVersionKind{
	"apps/Deployment":  {{Group: "apps", Version: "v1", Kind: "ReplicaSet"}},
	"apps/ReplicaSet":  {{Version: "v1", Kind: "Pod"}},
	"apps/StatefulSet": {{Version: "v1", Kind: "Pod"}},
	"apps/DaemonSet":   {{Version: "v1", Kind: "Pod"}},
	"batch/Job":        {{Version: "v1", Kind: "Pod"}},
	"batch/CronJob":    {{Group: "batch", Version: "v1", Kind: "Job"}},
	"/Service":         {{Group: "discovery.k8s.io", Version: "v1", Kind: "EndpointSlice"}},
}

// HasOwned says whether objects of gvk own objects Owned follows.
func HasOwned(gvk schema.GroupVersionKind) bool { return ownedKinds[gvk.Group+"/"+gvk.Kind] != nil }

// MayList says whether the caller may list a kind in a namespace (a server reading for
// its users asks; nil allows all).
type MayList func(ctx context.Context, gvk schema.GroupVersionKind, namespace string) bool

// LoadOwned reads, with c, the objects that parent (a live object) owns through its
// controller references, and what they own, maxOwnedDepth deep and at most maxOwned in
// all, each with its health: a Deployment's ReplicaSets and their Pods, a CronJob's Jobs
// and theirs, a Service's EndpointSlices. Kinds may refuses are left out, noted.
func LoadOwned(ctx context.Context, c client.Reader, parent *unstructured.Unstructured, may MayList) OwnedResult {
	var res OwnedResult
	budget := maxOwned
	var notes []string
	res.Owned = loadOwned(ctx, c, parent, may, 1, &budget, &notes)
	if budget <= 0 {
		notes = append(notes, fmt.Sprintf("only the first %d owned objects are shown", maxOwned))
	}
	seen := map[string]bool{}
	for _, n := range notes { // each ReplicaSet's Pods say the same
		if !seen[n] {
			seen[n] = true
			res.Notes = append(res.Notes, n)
		}
	}
	return res
}

func loadOwned(ctx context.Context, c client.Reader, parent *unstructured.Unstructured, may MayList, depth int,
	budget *int, notes *[]string) []Owned {
	var out []Owned
	for _, gvk := range ownedKinds[parent.GroupVersionKind().Group+"/"+parent.GetKind()] {
		if *budget <= 0 {
			return out
		}
		if may != nil && !may(ctx, gvk, parent.GetNamespace()) {
			*notes = append(*notes, fmt.Sprintf("you may not list %ss in namespace %s", gvk.Kind, parent.GetNamespace()))
			continue
		}
		children, err := listOwned(ctx, c, parent, gvk)
		if err != nil {
			if apierrors.IsForbidden(err) {
				*notes = append(*notes, fmt.Sprintf("you may not list %ss in namespace %s", gvk.Kind, parent.GetNamespace()))
			} else {
				*notes = append(*notes, fmt.Sprintf("cannot list %ss: %v", gvk.Kind, err))
			}
			continue
		}
		for _, child := range children {
			if *budget <= 0 {
				return out
			}
			*budget--
			o := ownedNode(child)
			if depth < maxOwnedDepth {
				o.Owned = loadOwned(ctx, c, child, may, depth+1, budget, notes)
			}
			out = append(out, o)
		}
	}
	return out
}

// listOwned lists the objects of gvk in parent's namespace whose controller is parent:
// by parent's selector when it has one (a ReplicaSet's Pods), by the service-name label
// for a Service's EndpointSlices, newest first.
func listOwned(ctx context.Context, c client.Reader, parent *unstructured.Unstructured, gvk schema.GroupVersionKind) ([]*unstructured.Unstructured, error) {
	list := &unstructured.UnstructuredList{}
	list.SetGroupVersionKind(gvk.GroupVersion().WithKind(gvk.Kind + "List"))
	opts := []client.ListOption{client.InNamespace(parent.GetNamespace()), client.Limit(ownedListLimit)}
	if gvk.Kind == "EndpointSlice" {
		opts = append(opts, client.MatchingLabels{"kubernetes.io/service-name": parent.GetName()})
	} else if sel := selectorOf(parent); sel != nil {
		opts = append(opts, client.MatchingLabelsSelector{Selector: sel})
	}
	if err := c.List(ctx, list, opts...); err != nil {
		return nil, err
	}
	var out []*unstructured.Unstructured
	for i := range list.Items {
		if o := &list.Items[i]; gvk.Kind == "EndpointSlice" || ownedBy(o, parent) {
			out = append(out, o)
		}
	}
	newestFirst(out)
	return out, nil
}

// newestFirst sorts objects by creation, newest first, then by name.
func newestFirst(objs []*unstructured.Unstructured) {
	sort.SliceStable(objs, func(i, j int) bool {
		a, b := objs[i].GetCreationTimestamp(), objs[j].GetCreationTimestamp()
		if !a.Equal(&b) {
			return b.Before(&a)
		}
		return objs[i].GetName() < objs[j].GetName()
	})
}

// ownedNode is an owned object and its health, without what it owns.
func ownedNode(o *unstructured.Unstructured) Owned {
	n := Owned{APIVersion: o.GetAPIVersion(), Kind: o.GetKind(), Name: o.GetName()}
	var err error
	if n.Status, n.Message, err = health.StatusOf(o, nil); err != nil {
		n.Status, n.Message = health.Unknown, err.Error()
	}
	return n
}

// ownedBy says whether parent is o's controller.
func ownedBy(o, parent *unstructured.Unstructured) bool {
	for _, ref := range o.GetOwnerReferences() {
		if ref.UID == parent.GetUID() && ref.Controller != nil && *ref.Controller {
			return true
		}
	}
	return false
}

// selectorOf is the label selector of parent's spec.selector, nil when it has none that
// selects anything (a Job's is made by its controller, and is one too).
func selectorOf(parent *unstructured.Unstructured) labels.Selector {
	raw, ok, _ := unstructured.NestedMap(parent.Object, "spec", "selector")
	if !ok {
		return nil
	}
	var ls metav1.LabelSelector
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(raw, &ls); err != nil {
		return nil
	}
	sel, err := metav1.LabelSelectorAsSelector(&ls)
	if err != nil || sel.Empty() {
		return nil
	}
	return sel
}
