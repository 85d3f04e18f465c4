package drift

import (
	"context"
	"crypto/sha256"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/fluxcd/cli-utils/pkg/object"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/metadata/metadatainformer"
	"k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/event"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
	"github.com/converge-gitops/converge/sync/apply"
)

// Watcher watches the objects SyncTargets manage — metadata only, narrowed by the
// owner label — and wakes a SyncTarget when one of its objects is changed or deleted by
// someone else, so that it is restored in seconds instead of at the next poll, and so that
// an idle reconcile needs no request per object to find out nothing drifted.
type Watcher struct {
	client metadata.Interface
	mapper meta.RESTMapper
	// Events wakes the reconciler: one GenericEvent per SyncTarget with drift.
	Events chan event.GenericEvent

	ctx       context.Context
	mu        sync.Mutex
	informers map[schema.GroupVersionResource]cache.SharedIndexInformer
	started   map[schema.GroupVersionResource]time.Time
	drifted   map[types.NamespacedName]map[string]bool // SyncTarget → object IDs
}

// NewWatcher returns a watcher; its informers run until ctx ends.
func NewWatcher(ctx context.Context, client metadata.Interface, mapper meta.RESTMapper) *Watcher {
	return &Watcher{
		client:    client,
		mapper:    mapper,
		Events:    make(chan event.GenericEvent, 1024),
		ctx:       ctx,
		informers: map[schema.GroupVersionResource]cache.SharedIndexInformer{},
		started:   map[schema.GroupVersionResource]time.Time{},
		drifted:   map[types.NamespacedName]map[string]bool{},
	}
}

// ForCluster returns a watcher of another cluster (a SyncTarget's remote one) that wakes
// SyncTargets through w's Events; its informers run until ctx ends (the cluster is
// closed). What it notes of a SyncTarget is its own: Take and Pending are asked of it.
func (w *Watcher) ForCluster(ctx context.Context, client metadata.Interface, mapper meta.RESTMapper) *Watcher {
	other := NewWatcher(ctx, client, mapper)
	other.Events = w.Events
	return other
}

// Watch makes sure the kinds of objects are watched. It is cheap for kinds already watched,
// and does nothing on a nil watcher.
func (w *Watcher) Watch(objects []*unstructured.Unstructured) error {
	if w == nil {
		return nil
	}
	seen := map[schema.GroupVersionKind]bool{}
	for _, o := range objects {
		gvk := o.GroupVersionKind()
		if seen[gvk] {
			continue
		}
		seen[gvk] = true
		mapping, err := w.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			return fmt.Errorf("watching %s: %w", gvk, err)
		}
		w.start(mapping.Resource)
	}
	return nil
}

func (w *Watcher) start(gvr schema.GroupVersionResource) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.informers[gvr] != nil {
		return
	}
	inf := metadatainformer.NewFilteredMetadataInformer(w.client, gvr, metav1.NamespaceAll, 0,
		cache.Indexers{}, func(o *metav1.ListOptions) { o.LabelSelector = convergev1.NameLabel }).Informer()
	w.informers[gvr], w.started[gvr] = inf, time.Now()
	_ = inf.SetTransform(slimForDrift)
	_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		UpdateFunc: func(oldObj, obj any) {
			m, ok := obj.(*metav1.PartialObjectMetadata)
			if !ok {
				return
			}
			old, _ := oldObj.(*metav1.PartialObjectMetadata)
			if changedByOthers(m) || untimedWriteByOthers(old, m) {
				w.flag(m, gvr)
			}
		},
		DeleteFunc: func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			if m, ok := obj.(*metav1.PartialObjectMetadata); ok {
				w.flag(m, gvr)
			}
		},
	})
	go inf.Run(w.ctx.Done())
}

// cacheSyncWait bounds how long Managed waits for a watch that started but has not
// listed its kind yet; after it, the cluster is read instead. A watch that has not listed
// within cacheSyncWait of its start (it may not be allowed to) is not waited for again.
const cacheSyncWait = 5 * time.Second

// Managed answers from the watches which object converge manages under a kind, namespace
// and name, so that the ownership check of an apply needs no request for kinds watched
// already (see apply.CheckOwnershipCached). A kind not watched, or whose watch has not
// listed it within cacheSyncWait, is not answered. Nil on a nil watcher.
func (w *Watcher) Managed(ctx context.Context) apply.Managed {
	if w == nil {
		return nil
	}
	lookup := w.lookup(ctx)
	return func(gvk schema.GroupVersionKind, namespace, name string) (map[string]string, bool, bool) {
		m, known := lookup(gvk, namespace, name)
		if m == nil {
			return nil, false, known
		}
		return m.Labels, true, true
	}
}

// lookup returns a function that finds an object in the store of its kind's watch (each
// store looked up once): the object (nil when absent), and whether the watch could answer
// (its kind watched and listed within cacheSyncWait).
func (w *Watcher) lookup(ctx context.Context) func(gvk schema.GroupVersionKind, namespace, name string) (*metav1.PartialObjectMetadata, bool) {
	stores := map[schema.GroupVersionKind]cache.Store{}
	return func(gvk schema.GroupVersionKind, namespace, name string) (*metav1.PartialObjectMetadata, bool) {
		store, known := stores[gvk]
		if !known {
			store = w.syncedStore(ctx, gvk)
			stores[gvk] = store
		}
		if store == nil {
			return nil, false
		}
		key := name
		if namespace != "" {
			key = namespace + "/" + name
		}
		obj, found, err := store.GetByKey(key)
		if err != nil {
			return nil, false
		}
		if !found {
			return nil, true
		}
		m, ok := obj.(*metav1.PartialObjectMetadata)
		if !ok {
			return nil, false
		}
		return m, true
	}
}

// syncedStore returns the store of the watch of gvk once it has listed, nil when there is
// none or it has not listed in time.
func (w *Watcher) syncedStore(ctx context.Context, gvk schema.GroupVersionKind) cache.Store {
	mapping, err := w.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		return nil
	}
	w.mu.Lock()
	inf, started := w.informers[mapping.Resource], w.started[mapping.Resource]
	w.mu.Unlock()
	if inf == nil {
		return nil
	}
	if !inf.HasSynced() {
		left := cacheSyncWait - time.Since(started)
		if left <= 0 {
			return nil
		}
		waitCtx, cancel := context.WithTimeout(ctx, left)
		defer cancel()
		if !cache.WaitForCacheSync(waitCtx.Done(), inf.HasSynced) {
			return nil
		}
	}
	return inf.GetStore()
}

// Missed returns the IDs of the objects, of those given, that drifted while no watch saw
// it: a daemon that starts (a restart, a new leader) learns of edits and deletions made
// while none ran only from what its watches list. An object is missed when its kind's
// watch has listed it and it is gone (or has lost its owner label), or when the newest
// write to it came from another field manager. Objects whose kind is not watched, or whose
// watch has not listed within cacheSyncWait of its start, are not answered. None on a nil
// watcher.
func (w *Watcher) Missed(ctx context.Context, objects []*unstructured.Unstructured) map[string]bool {
	if w == nil {
		return nil
	}
	missed := map[string]bool{}
	lookup := w.lookup(ctx)
	for _, o := range objects {
		gvk := o.GroupVersionKind()
		m, known := lookup(gvk, o.GetNamespace(), o.GetName())
		if !known || (m != nil && !changedByOthers(m)) {
			continue
		}
		id := object.ObjMetadata{Namespace: o.GetNamespace(), Name: o.GetName(), GroupKind: gvk.GroupKind()}
		missed[id.String()] = true
	}
	return missed
}

// slimForDrift keeps of an object what drift detection reads: its identity, labels and
// who wrote it when, with the fields each writer owns reduced to a digest. The informers
// hold every object converge manages; annotations and managed fields would be most of it.
func slimForDrift(obj any) (any, error) {
	m, ok := obj.(*metav1.PartialObjectMetadata)
	if !ok {
		return obj, nil
	}
	slim := &metav1.PartialObjectMetadata{TypeMeta: m.TypeMeta, ObjectMeta: metav1.ObjectMeta{
		Name: m.Name, Namespace: m.Namespace, UID: m.UID, ResourceVersion: m.ResourceVersion,
		Generation: m.Generation, DeletionTimestamp: m.DeletionTimestamp, Labels: m.Labels,
	}}
	if len(m.ManagedFields) > 0 {
		slim.ManagedFields = make([]metav1.ManagedFieldsEntry, len(m.ManagedFields))
	}
	for i, e := range m.ManagedFields {
		if e.FieldsV1 != nil {
			sum := sha256.Sum256(e.FieldsV1.GetRawBytes())
			e.FieldsV1 = metav1.NewFieldsV1(string(sum[:]))
		}
		slim.ManagedFields[i] = e
	}
	return slim, nil
}

// changedByOthers reports whether the newest write to the object, status writes aside,
// came from another field manager than converge's.
func changedByOthers(m *metav1.PartialObjectMetadata) bool {
	var newest *metav1.ManagedFieldsEntry
	for i := range m.ManagedFields {
		e := &m.ManagedFields[i]
		if e.Subresource == "status" || e.Time == nil {
			continue
		}
		if newest == nil || e.Time.After(newest.Time.Time) ||
			(e.Time.Equal(newest.Time) && e.Manager != apply.FieldManager) {
			newest = e
		}
	}
	return newest != nil && newest.Manager != apply.FieldManager
}

// untimedWriteByOthers reports a managed fields entry of another manager, status writes
// aside, that has no time and is new or changed since old: the API server records writes
// through the scale subresource (kubectl scale) without a time, so changedByOthers
// cannot see them.
func untimedWriteByOthers(old, m *metav1.PartialObjectMetadata) bool {
	for _, e := range m.ManagedFields {
		if e.Time != nil || e.Subresource == "status" || e.Manager == apply.FieldManager {
			continue
		}
		if old == nil || !slices.ContainsFunc(old.ManagedFields, func(o metav1.ManagedFieldsEntry) bool {
			return o.Manager == e.Manager && o.Operation == e.Operation && o.Subresource == e.Subresource &&
				o.APIVersion == e.APIVersion && equality.Semantic.DeepEqual(o.FieldsV1, e.FieldsV1)
		}) {
			return true
		}
	}
	return false
}

func (w *Watcher) flag(m *metav1.PartialObjectMetadata, gvr schema.GroupVersionResource) {
	owner := types.NamespacedName{Name: m.Labels[convergev1.NameLabel], Namespace: m.Labels[convergev1.NamespaceLabel]}
	if owner.Name == "" || owner.Namespace == "" {
		return
	}
	gk := schema.GroupKind{Group: gvr.Group, Kind: m.Kind}
	if m.Kind == "" {
		if kinds, err := w.mapper.KindsFor(gvr); err == nil && len(kinds) > 0 {
			gk.Kind = kinds[0].Kind
		}
	}
	id := object.ObjMetadata{Namespace: m.Namespace, Name: m.Name, GroupKind: gk}.String()
	w.mu.Lock()
	if w.drifted[owner] == nil {
		w.drifted[owner] = map[string]bool{}
	}
	w.drifted[owner][id] = true
	w.mu.Unlock()

	st := &convergev1.SyncTarget{}
	st.Name, st.Namespace = owner.Name, owner.Namespace
	select {
	case w.Events <- event.GenericEvent{Object: st}:
	case <-time.After(time.Second):
		// The reconciler is far behind; the periodic full sync will catch up.
	}
}

// Pending reports whether objects of the SyncTarget drifted since the last Take.
func (w *Watcher) Pending(owner types.NamespacedName) bool {
	if w == nil {
		return false
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.drifted[owner]) > 0
}

// Take returns the IDs of the SyncTarget's objects that drifted since the last call (none
// on a nil watcher).
func (w *Watcher) Take(owner types.NamespacedName) map[string]bool {
	if w == nil {
		return nil
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	ids := w.drifted[owner]
	delete(w.drifted, owner)
	return ids
}

// Forget drops what the watcher noted of a SyncTarget that is gone, so that one created
// again under the same name does not start with drift of objects it never applied.
func (w *Watcher) Forget(owner types.NamespacedName) {
	if w == nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.drifted, owner)
}
