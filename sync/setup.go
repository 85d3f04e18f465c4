package sync

import (
	"context"
	"fmt"
	"time"

	"k8s.io/client-go/metadata"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
	"github.com/converge-gitops/converge/health"
	"github.com/converge-gitops/converge/sources"
	"github.com/converge-gitops/converge/sync/apply"
)

// ReconcilerOptions are the settings of the daemon's reconciler.
type ReconcilerOptions struct {
	// Cache configures the checkouts cache.
	Cache sources.CacheOptions
	// ApplyConcurrency of the dry-runs and reads of one apply stage.
	ApplyConcurrency int
	// DefaultServiceAccount is impersonated for SyncTargets that name none.
	DefaultServiceAccount string
	// FullSyncInterval is how often an unchanged revision is re-applied anyway.
	FullSyncInterval time.Duration
	// CacheGCInterval is the period of the checkout garbage collection (default 10m).
	CacheGCInterval time.Duration
	// DisableDriftWatch turns off the drift watcher, whose cluster-wide metadata watches
	// of every kind applied need rights a locked-down (multi-tenant) daemon does not have;
	// drift is then corrected by the full sync every FullSyncInterval. It also turns off
	// the metadata watch of the ConfigMaps and Secrets spec.postBuild.substituteFrom names
	// (Reconciler.WatchVariables), which needs list and watch cluster-wide as well.
	DisableDriftWatch bool
	// NoCrossNamespaceDependencies refuses dependsOn entries naming another namespace.
	NoCrossNamespaceDependencies bool
	// RenderTimeout bounds one render (render.DefaultTimeout, 2m, when zero).
	RenderTimeout time.Duration
	// MaxConcurrentPerNamespace caps the reconciles of one namespace that run at once
	// (NamespaceLimiter), so that one tenant cannot occupy every worker.
	MaxConcurrentPerNamespace int
}

// NewReconciler wires the reconciler of the daemon to a manager: pollers, git cache,
// renderer, watch-driven health (with the identity each SyncTarget impersonates), staged
// applier and drift watcher. The drift watcher's informers run until ctx ends.
func NewReconciler(ctx context.Context, mgr ctrl.Manager, o ReconcilerOptions) (*Reconciler, error) {
	cfg := mgr.GetConfig()
	checkouts, err := sources.NewCache(o.Cache)
	if err != nil {
		return nil, err
	}
	checker, err := health.New(cfg)
	if err != nil {
		return nil, err
	}
	scheduler := sources.NewScheduler(sources.SchedulerOptions{Cache: checkouts})
	if err := mgr.Add(scheduler); err != nil {
		return nil, err
	}
	gcEvery := o.CacheGCInterval
	if gcEvery <= 0 {
		gcEvery = 10 * time.Minute
	}
	if err := mgr.Add(&CacheGC{Reader: mgr.GetClient(), Cache: checkouts, Every: gcEvery}); err != nil {
		return nil, err
	}
	fetcher := &GitFetcher{Reader: mgr.GetAPIReader(), Cache: checkouts, Scheduler: scheduler,
		Wake: make(chan event.GenericEvent, 1024)}
	var drift *DriftWatcher
	if !o.DisableDriftWatch {
		md, err := metadata.NewForConfig(cfg)
		if err != nil {
			return nil, err
		}
		drift = NewDriftWatcher(ctx, md, mgr.GetRESTMapper())
	}
	watchHealth := &WatchHealth{Checker: checker, Config: cfg, Mapper: mgr.GetRESTMapper(),
		DefaultServiceAccount: o.DefaultServiceAccount}
	return &Reconciler{
		Client:                mgr.GetClient(),
		APIReader:             mgr.GetAPIReader(),
		Config:                cfg,
		Recorder:              mgr.GetEventRecorder("converge"),
		Fetcher:               fetcher,
		Renderer:              KustomizeRenderer{Mapper: mgr.GetRESTMapper(), Timeout: o.RenderTimeout, Secrets: mgr.GetAPIReader()},
		Health:                watchHealth,
		Applier:               apply.Applier{Concurrency: o.ApplyConcurrency},
		Clock:                 clock.RealClock{},
		DefaultServiceAccount: o.DefaultServiceAccount,
		FullSyncInterval:      o.FullSyncInterval,
		Drift:                 drift,
		WatchVariables:        !o.DisableDriftWatch,

		NoCrossNamespaceDependencies: o.NoCrossNamespaceDependencies,
		MaxConcurrentPerNamespace:    o.MaxConcurrentPerNamespace,
	}, nil
}

// NewWebhooks returns the webhook targets and triggers of a reconciler made by NewReconciler;
// they announce accepted pushes through the manager's client. narrowed says that the manager's
// cache holds only some SyncTargets (a shard's label selector): the receiver, which must find
// every SyncTarget following a repository, then lists them from a cache of its own (see
// NewWebhookTargetCache).
func NewWebhooks(ctx context.Context, mgr ctrl.Manager, r *Reconciler, narrowed bool) (*Webhooks, error) {
	f, _ := r.Fetcher.(*GitFetcher)
	w := &Webhooks{Reader: mgr.GetClient(), Writer: mgr.GetClient(), Fetcher: f,
		Log: ctrl.Log.WithName("webhook")}
	if narrowed {
		c, err := NewWebhookTargetCache(ctx, mgr)
		if err != nil {
			return nil, err
		}
		w.Targets = c
	}
	return w, nil
}

// NewWebhookTargetCache returns a cache of every SyncTarget, whatever the manager's cache
// selects, indexed by repository and stripped to what the webhook receiver reads (name,
// identity, source and suspend), and runs it with the manager on every replica.
func NewWebhookTargetCache(ctx context.Context, mgr ctrl.Manager) (cache.Cache, error) {
	c, err := cache.New(mgr.GetConfig(), cache.Options{
		Scheme: mgr.GetScheme(), Mapper: mgr.GetRESTMapper(),
		ByObject: map[client.Object]cache.ByObject{&convergev1.SyncTarget{}: {Transform: webhookView}},
	})
	if err != nil {
		return nil, fmt.Errorf("creating the webhook targets cache: %w", err)
	}
	if err := c.IndexField(ctx, &convergev1.SyncTarget{}, repoURLIndex, normalizedURL); err != nil {
		return nil, err
	}
	if err := mgr.Add(webhookCache{c}); err != nil {
		return nil, err
	}
	return c, nil
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
	out.Spec.Source, out.Spec.Suspend = st.Spec.Source, st.Spec.Suspend
	return out, nil
}
