package webhook

import (
	"context"
	"fmt"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
	"github.com/converge-gitops/converge/sources"
)

// New returns the dispatcher of pushes to the pollers of scheduler (the reconciler's, see
// reconciler.Reconciler.Scheduler); it announces accepted pushes through the manager's client. narrowed says that the manager's
// cache holds only some SyncTargets (a shard's label selector): the receiver, which must find
// every SyncTarget following a repository, then lists them from a cache of its own (see
// NewTargetCache).
func New(ctx context.Context, mgr ctrl.Manager, scheduler *sources.Scheduler, narrowed bool) (*Dispatcher, error) {
	w := &Dispatcher{Reader: mgr.GetClient(), Writer: mgr.GetClient(), Scheduler: scheduler,
		Log: ctrl.Log.WithName("webhook")}
	if !narrowed {
		// The manager's cache holds every SyncTarget: index it by repository.
		return w, indexTargets(ctx, mgr.GetFieldIndexer())
	}
	c, err := NewTargetCache(ctx, mgr)
	if err != nil {
		return nil, err
	}
	w.Targets = c
	return w, nil
}

// NewTargetCache returns a cache of every SyncTarget, whatever the manager's cache
// selects, indexed by repository and stripped to what the webhook receiver reads (name,
// identity, Git or OCI source and suspend), and runs it with the manager on every replica.
func NewTargetCache(ctx context.Context, mgr ctrl.Manager) (cache.Cache, error) {
	c, err := cache.New(mgr.GetConfig(), cache.Options{
		Scheme: mgr.GetScheme(), Mapper: mgr.GetRESTMapper(),
		ByObject: map[client.Object]cache.ByObject{&convergev1.SyncTarget{}: {Transform: webhookView}},
	})
	if err != nil {
		return nil, fmt.Errorf("creating the webhook targets cache: %w", err)
	}
	if err := indexTargets(ctx, c); err != nil {
		return nil, err
	}
	if err := mgr.Add(webhookCache{c}); err != nil {
		return nil, err
	}
	return c, nil
}

// indexTargets indexes SyncTargets by Git repository (RepoURLIndex) and by OCI repository
// (OCIRepoIndex).
func indexTargets(ctx context.Context, idx client.FieldIndexer) error {
	if err := idx.IndexField(ctx, &convergev1.SyncTarget{}, RepoURLIndex, NormalizedURL); err != nil {
		return err
	}
	return idx.IndexField(ctx, &convergev1.SyncTarget{}, OCIRepoIndex, NormalizedOCIRepository)
}

// webhookCache runs with the manager's caches, on every replica (not only the leader).
type webhookCache struct{ cache.Cache }

// GetCache has the manager start the cache with its own and wait for it to sync.
func (c webhookCache) GetCache() cache.Cache { return c.Cache }

// webhookView keeps of a SyncTarget what the webhook receiver reads.
func webhookView(o any) (any, error) {
	st, ok := o.(*convergev1.SyncTarget)
	if !ok {
		return o, nil
	}
	out := &convergev1.SyncTarget{TypeMeta: st.TypeMeta}
	out.Namespace, out.Name, out.UID = st.Namespace, st.Name, st.UID
	out.Generation, out.ResourceVersion = st.Generation, st.ResourceVersion
	out.Spec.Source, out.Spec.OCI, out.Spec.Suspend = st.Spec.Source, st.Spec.OCI, st.Spec.Suspend
	return out, nil
}
