package apply

import (
	"context"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
)

// Live are objects as the cluster holds them, by kind, namespace and name: what a caller
// read already (see CheckOwnership), so that Plan need not read them again. A nil Live
// holds nothing. A kind and namespace whose owned objects were listed whole is marked, so
// that the apply does not list it again (see listOwned).
type Live map[schema.GroupVersionKind]map[client.ObjectKey]*unstructured.Unstructured

// Get returns the live object of o's kind, namespace and name, nil when unknown.
func (l Live) Get(o *unstructured.Unstructured) *unstructured.Unstructured {
	if o.GetName() == "" {
		return nil
	}
	return l[o.GroupVersionKind()][client.ObjectKeyFromObject(o)]
}

// markListed records that the owner's objects of kind gvk in namespace are all in l.
func (l Live) markListed(gvk schema.GroupVersionKind, namespace string) {
	if l[gvk] == nil {
		l[gvk] = map[client.ObjectKey]*unstructured.Unstructured{}
	}
	l[gvk][client.ObjectKey{Namespace: namespace}] = nil // no object has an empty name
}

// listed reports whether the owner's objects of kind gvk in namespace were listed whole.
func (l Live) listed(gvk schema.GroupVersionKind, namespace string) bool {
	_, ok := l[gvk][client.ObjectKey{Namespace: namespace}]
	return ok
}

// Add records o as the live object of kind gvk (which it is given: a list's items lack it).
func (l Live) Add(gvk schema.GroupVersionKind, o *unstructured.Unstructured) {
	if l[gvk] == nil {
		l[gvk] = map[client.ObjectKey]*unstructured.Unstructured{}
	}
	o.SetGroupVersionKind(gvk)
	l[gvk][client.ObjectKeyFromObject(o)] = o
}

// listOwned adds to live, per kind and namespace of two objects or more, the live objects
// labelled for the owner the objects carry, unless that kind and namespace was listed
// already. A list that fails (a kind not served yet, no right to list) only means the
// objects concerned are read one by one when needed.
func listOwned(ctx context.Context, c client.Client, objects []*unstructured.Unstructured, live Live) Live {
	if live == nil {
		live = Live{}
	}
	if len(objects) == 0 {
		return live
	}
	owner := ownerLabels(objects)
	if owner == nil {
		return live
	}
	counts := map[scope]int{}
	for _, o := range objects {
		counts[scope{o.GroupVersionKind(), o.GetNamespace()}]++
	}
	for s, n := range counts {
		if n < 2 || live.listed(s.gvk, s.namespace) {
			continue // a single object costs a read either way
		}
		live.listOwner(ctx, c, s, owner)
	}
	return live
}

// ownerLabels are the owner labels the objects carry, as the first one carries them; nil
// when it lacks one.
func ownerLabels(objects []*unstructured.Unstructured) client.MatchingLabels {
	if len(objects) == 0 {
		return nil
	}
	owner := client.MatchingLabels{}
	for _, k := range []string{convergev1.NameLabel, convergev1.NamespaceLabel} {
		v, ok := objects[0].GetLabels()[k]
		if !ok {
			return nil
		}
		owner[k] = v
	}
	return owner
}

// listOwner adds to l the objects of scope s carrying the owner labels, whole, and marks
// the scope listed; a list that fails adds nothing (the apply reads them one by one).
func (l Live) listOwner(ctx context.Context, c client.Client, s scope, owner client.MatchingLabels) {
	list := &unstructured.UnstructuredList{}
	list.SetGroupVersionKind(s.gvk.GroupVersion().WithKind(s.gvk.Kind + "List"))
	opts := []client.ListOption{owner}
	if s.namespace != "" {
		opts = append(opts, client.InNamespace(s.namespace))
	}
	if err := c.List(ctx, list, opts...); err != nil {
		return
	}
	for i := range list.Items {
		l.Add(s.gvk, &list.Items[i])
	}
	l.markListed(s.gvk, s.namespace)
}
