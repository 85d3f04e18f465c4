package ui

import (
	"context"
	"fmt"
	"sort"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
)

// Store is what the pages read: the SyncTargets and their events, as one shared watch
// per kind keeps them, and a feed of what changed.
type Store interface {
	// Targets lists every SyncTarget, by namespace and name.
	Targets(ctx context.Context) ([]convergev1.SyncTarget, error)
	// Target reads one SyncTarget; found is false when there is none.
	Target(ctx context.Context, key client.ObjectKey) (st *convergev1.SyncTarget, found bool, err error)
	// Events lists the events of one SyncTarget, newest first.
	Events(ctx context.Context, key client.ObjectKey) ([]corev1.Event, error)
	// Set reads one SyncTargetSet; found is false when there is none, or when the store
	// does not watch them (its identity may not list them, or their CRD is missing).
	Set(ctx context.Context, key client.ObjectKey) (set *convergev1.SyncTargetSet, found bool, err error)
}

// informerStore is a Store on controller-runtime's cache: one informer for SyncTargets,
// one for the events of SyncTargets and, when its identity may list them, one for
// SyncTargetSets, shared by every viewer; changes go to hub.
type informerStore struct {
	cache cache.Cache
	sets  bool
}

// newInformerStore starts the informers with cfg (the user's identity), limited to
// namespace when it is set, and waits for their first list.
func newInformerStore(ctx context.Context, cfg *rest.Config, namespace string, hub *hub) (*informerStore, error) {
	opts := cache.Options{Scheme: scheme(), ByObject: map[client.Object]cache.ByObject{
		&corev1.Event{}: {Field: fields.OneTermEqualSelector("involvedObject.kind", convergev1.SyncTargetKind)},
	}}
	if namespace != "" {
		opts.DefaultNamespaces = map[string]cache.Config{namespace: {}}
	}
	c, err := cache.New(cfg, opts)
	if err != nil {
		return nil, fmt.Errorf("setting up the watches: %w", err)
	}
	watched := []client.Object{&convergev1.SyncTarget{}, &corev1.Event{}}
	sets := maySeeSets(ctx, cfg, namespace)
	if sets {
		watched = append(watched, &convergev1.SyncTargetSet{})
	}
	for _, obj := range watched {
		inf, err := c.GetInformer(ctx, obj, cache.BlockUntilSynced(false))
		if err != nil {
			return nil, fmt.Errorf("watching %T: %w", obj, err)
		}
		if _, err := inf.AddEventHandler(hub.handler()); err != nil {
			return nil, err
		}
	}
	go func() { _ = c.Start(ctx) }()
	if !c.WaitForCacheSync(ctx) {
		return nil, fmt.Errorf("listing SyncTargets and their events did not finish: %w", context.Cause(ctx))
	}
	return &informerStore{cache: c, sets: sets}, nil
}

// maySeeSets says whether cfg's identity can list the SyncTargetSets (of namespace, when
// set): one list of at most one, so that a user without the right, or a cluster without
// the CRD, still gets the SyncTargets.
func maySeeSets(ctx context.Context, cfg *rest.Config, namespace string) bool {
	c, err := client.New(cfg, client.Options{Scheme: scheme()})
	if err != nil {
		return false
	}
	return c.List(ctx, &convergev1.SyncTargetSetList{}, client.InNamespace(namespace), client.Limit(1)) == nil
}

func (s *informerStore) Set(ctx context.Context, key client.ObjectKey) (*convergev1.SyncTargetSet, bool, error) {
	if !s.sets {
		return nil, false, nil
	}
	set := &convergev1.SyncTargetSet{}
	if err := s.cache.Get(ctx, key, set); err != nil {
		if client.IgnoreNotFound(err) == nil {
			return nil, false, nil
		}
		return nil, false, err
	}
	return set, true, nil
}

func (s *informerStore) Targets(ctx context.Context) ([]convergev1.SyncTarget, error) {
	var list convergev1.SyncTargetList
	if err := s.cache.List(ctx, &list); err != nil {
		return nil, err
	}
	sortTargets(list.Items)
	return list.Items, nil
}

func (s *informerStore) Target(ctx context.Context, key client.ObjectKey) (*convergev1.SyncTarget, bool, error) {
	st := &convergev1.SyncTarget{}
	if err := s.cache.Get(ctx, key, st); err != nil {
		if client.IgnoreNotFound(err) == nil {
			return nil, false, nil
		}
		return nil, false, err
	}
	return st, true, nil
}

func (s *informerStore) Events(ctx context.Context, key client.ObjectKey) ([]corev1.Event, error) {
	var list corev1.EventList
	if err := s.cache.List(ctx, &list, client.InNamespace(key.Namespace)); err != nil {
		return nil, err
	}
	return eventsOf(list.Items, key), nil
}

// eventsOf keeps the events of the SyncTarget key, newest first.
func eventsOf(all []corev1.Event, key client.ObjectKey) []corev1.Event {
	var out []corev1.Event
	for _, e := range all {
		o := e.InvolvedObject
		if o.Kind == convergev1.SyncTargetKind && o.Name == key.Name && o.Namespace == key.Namespace {
			out = append(out, e)
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return eventTime(out[i]).After(eventTime(out[j])) })
	return out
}

func sortTargets(items []convergev1.SyncTarget) {
	sort.Slice(items, func(i, j int) bool {
		if items[i].Namespace != items[j].Namespace {
			return items[i].Namespace < items[j].Namespace
		}
		return items[i].Name < items[j].Name
	})
}

// MemoryStore is a Store over fixed objects, for tests and benchmarks.
type MemoryStore struct {
	mu      sync.Mutex
	targets []convergev1.SyncTarget
	events  []corev1.Event
	sets    []convergev1.SyncTargetSet
}

// AddSets adds SyncTargetSets to the store.
func (m *MemoryStore) AddSets(sets ...convergev1.SyncTargetSet) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.sets = append(m.sets, sets...)
}

// Set finds one SyncTargetSet.
func (m *MemoryStore) Set(_ context.Context, key client.ObjectKey) (*convergev1.SyncTargetSet, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for i := range m.sets {
		if client.ObjectKeyFromObject(&m.sets[i]) == key {
			return m.sets[i].DeepCopy(), true, nil
		}
	}
	return nil, false, nil
}

// NewMemoryStore returns a Store holding targets and events.
func NewMemoryStore(targets []convergev1.SyncTarget, events []corev1.Event) *MemoryStore {
	t := append([]convergev1.SyncTarget(nil), targets...)
	sortTargets(t)
	return &MemoryStore{targets: t, events: events}
}

// Targets lists the SyncTargets.
func (m *MemoryStore) Targets(context.Context) ([]convergev1.SyncTarget, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]convergev1.SyncTarget(nil), m.targets...), nil
}

// Target finds one SyncTarget.
func (m *MemoryStore) Target(_ context.Context, key client.ObjectKey) (*convergev1.SyncTarget, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for i := range m.targets {
		if client.ObjectKeyFromObject(&m.targets[i]) == key {
			return m.targets[i].DeepCopy(), true, nil
		}
	}
	return nil, false, nil
}

// Events lists the events of one SyncTarget.
func (m *MemoryStore) Events(_ context.Context, key client.ObjectKey) ([]corev1.Event, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return eventsOf(m.events, key), nil
}

// hubHandler turns informer notifications into changes for the hub.
func (h *hub) handler() toolscache.ResourceEventHandlerFuncs {
	notify := func(obj any) {
		if d, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
			obj = d.Obj
		}
		switch o := obj.(type) {
		case *convergev1.SyncTarget:
			h.publish(change{Kind: "target", Key: o.Namespace + "/" + o.Name})
		case *corev1.Event:
			h.publish(change{Kind: "event", Key: o.InvolvedObject.Namespace + "/" + o.InvolvedObject.Name})
		}
		// A SyncTargetSet's change is not published: its page is read when opened, and a
		// change named by a set's key would be authorized as a SyncTarget's.
	}
	return toolscache.ResourceEventHandlerFuncs{
		AddFunc:    notify,
		UpdateFunc: func(_, obj any) { notify(obj) },
		DeleteFunc: notify,
	}
}
