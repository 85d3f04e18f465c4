// Package tree reads the inventory of a SyncTarget (status.inventory) as a tree grouped
// by namespace, then kind, each object with its live health as the daemon's health
// checks read it. `converge tree` prints it; the web UI draws it.
package tree

import (
	"context"
	"fmt"
	"sort"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
	"github.com/converge-gitops/converge/health"
	"github.com/converge-gitops/converge/sync/apply"
)

// Node is one object of the inventory and its live health.
type Node struct {
	// ID is the object's inventory entry ID.
	ID         string
	APIVersion string
	Kind       string
	Namespace  string
	Name       string
	// UID is the live object's, when it was read.
	UID    types.UID
	Status health.Status
	// Message says why, from kstatus or the SyncTarget's CEL rules; never object data.
	Message string
}

// KindGroup is the objects of one kind in one namespace, by name.
type KindGroup struct {
	// Kind is the kind, qualified by its group unless core: "Deployment.apps", "ConfigMap".
	Kind    string
	Objects []Node
}

// NamespaceGroup is the objects of one namespace; Namespace is empty for cluster-scoped ones.
type NamespaceGroup struct {
	Namespace string
	Kinds     []KindGroup
}

// Tree is a SyncTarget's inventory: cluster-scoped objects first, then by namespace.
type Tree struct {
	Namespaces []NamespaceGroup
	// Counts are the objects by status.
	Counts map[health.Status]int
	Total  int
}

// forbiddenMessage is the message of an object the caller may not read.
const forbiddenMessage = "you may not read it"

// concurrency bounds the reads of live objects running at once.
const concurrency = 8

// Options tune LoadWith.
type Options struct {
	// MayRead, when set, is asked before each object is read: an object it refuses is
	// Unknown, "you may not read it", and is not read. A server that reads for its users
	// with its own identity sets it.
	MayRead func(ctx context.Context, id *unstructured.Unstructured) bool
}

// Load reads every object of st's inventory with c (the caller's own rights) and
// computes its health. An object that is gone is NotFound; one the caller may not read
// is Unknown, saying so. Secrets are read as metadata only.
func Load(ctx context.Context, c client.Reader, st *convergev1.SyncTarget) (*Tree, error) {
	return LoadWith(ctx, c, st, Options{})
}

// LoadWith is Load with options.
func LoadWith(ctx context.Context, c client.Reader, st *convergev1.SyncTarget, opts Options) (*Tree, error) {
	var entries []convergev1.InventoryEntry
	if st.Status.Inventory != nil {
		entries = st.Status.Inventory.Entries
	}
	nodes := make([]Node, len(entries))
	sem := make(chan struct{}, concurrency)
	var wg sync.WaitGroup
	for i, e := range entries {
		id, err := apply.EntryObject(e)
		if err != nil {
			return nil, err
		}
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			if opts.MayRead != nil && !opts.MayRead(ctx, id) {
				nodes[i] = Node{ID: e.ID, APIVersion: id.GetAPIVersion(), Kind: id.GetKind(), Namespace: id.GetNamespace(),
					Name: id.GetName(), Status: health.Unknown, Message: forbiddenMessage}
				return
			}
			nodes[i] = read(ctx, c, id, st.Spec.HealthCheckExprs)
			nodes[i].ID = e.ID
		}()
	}
	wg.Wait()
	return Build(nodes), nil
}

// read gets one live object and computes its health.
func read(ctx context.Context, c client.Reader, id *unstructured.Unstructured, exprs []convergev1.CustomHealthCheck) Node {
	n := Node{APIVersion: id.GetAPIVersion(), Kind: id.GetKind(), Namespace: id.GetNamespace(), Name: id.GetName()}
	key := client.ObjectKeyFromObject(id)
	var err error
	live := &unstructured.Unstructured{}
	if gvk := id.GroupVersionKind(); gvk.Group == "" && gvk.Kind == "Secret" {
		meta := &metav1.PartialObjectMetadata{}
		meta.SetGroupVersionKind(gvk)
		if err = c.Get(ctx, key, meta); err == nil {
			live.SetGroupVersionKind(gvk)
			live.SetName(meta.Name)
			live.SetNamespace(meta.Namespace)
			live.SetDeletionTimestamp(meta.DeletionTimestamp)
			live.SetUID(meta.UID)
		}
	} else {
		live.SetGroupVersionKind(id.GroupVersionKind())
		err = c.Get(ctx, key, live)
	}
	switch {
	case apierrors.IsNotFound(err):
		n.Status, n.Message = health.NotFound, "not found in the cluster"
	case apierrors.IsForbidden(err):
		n.Status, n.Message = health.Unknown, forbiddenMessage
	case err != nil:
		n.Status, n.Message = health.Unknown, fmt.Sprintf("cannot read it: %v", err)
	default:
		n.UID = live.GetUID()
		if n.Status, n.Message, err = health.StatusOf(live, exprs); err != nil {
			n.Status, n.Message = health.Unknown, err.Error()
		}
	}
	return n
}

// Build groups nodes by namespace (cluster-scoped first) and kind, sorted by name.
func Build(nodes []Node) *Tree {
	t := &Tree{Counts: map[health.Status]int{}, Total: len(nodes)}
	byNS := map[string]map[string][]Node{}
	for _, n := range nodes {
		t.Counts[n.Status]++
		if byNS[n.Namespace] == nil {
			byNS[n.Namespace] = map[string][]Node{}
		}
		k := qualifiedKind(n.APIVersion, n.Kind)
		byNS[n.Namespace][k] = append(byNS[n.Namespace][k], n)
	}
	for _, ns := range sortedKeys(byNS) {
		g := NamespaceGroup{Namespace: ns}
		for _, k := range sortedKeys(byNS[ns]) {
			objs := byNS[ns][k]
			sort.Slice(objs, func(i, j int) bool { return objs[i].Name < objs[j].Name })
			g.Kinds = append(g.Kinds, KindGroup{Kind: k, Objects: objs})
		}
		t.Namespaces = append(t.Namespaces, g)
	}
	return t
}

// qualifiedKind is "Deployment.apps" for a kind of a named group, else the kind.
func qualifiedKind(apiVersion, kind string) string {
	for i := 0; i < len(apiVersion); i++ {
		if apiVersion[i] == '/' {
			return kind + "." + apiVersion[:i]
		}
	}
	return kind
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
