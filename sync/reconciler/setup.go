package reconciler

import (
	"context"
	"os"
	"time"

	"k8s.io/client-go/metadata"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"

	"github.com/converge-gitops/converge/health"
	"github.com/converge-gitops/converge/sources"
	"github.com/converge-gitops/converge/sources/charts"
	"github.com/converge-gitops/converge/sync/apply"
	"github.com/converge-gitops/converge/sync/cluster"
	"github.com/converge-gitops/converge/sync/drift"
	"github.com/converge-gitops/converge/sync/remote"
	"github.com/converge-gitops/converge/sync/render"
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
	// (the Reconciler's metadata cache), which needs list and watch cluster-wide as well.
	DisableDriftWatch bool
	// NoCrossNamespaceDependencies refuses dependsOn entries naming another namespace.
	NoCrossNamespaceDependencies bool
	// RenderTimeout bounds one render (render.DefaultTimeout, 2m, when zero).
	RenderTimeout time.Duration
	// RenderPool, when set, renders in its worker processes (see render.Pool); nil renders
	// in the daemon's own process.
	RenderPool *render.Pool
	// MaxConcurrentPerNamespace caps the reconciles of one namespace that run at once
	// (NamespaceLimiter), so that one tenant cannot occupy every worker.
	MaxConcurrentPerNamespace int
	// AllowLoopbackClusters lets a spec.kubeConfig point at a loopback or link-local
	// address, over http too (see sync/remote), and a spec.chart repository be at one (see
	// charts.Client.AllowLoopback): for tests and local development only.
	AllowLoopbackClusters bool
	// RemoteClusterNetworks, when not empty, are the only networks a remote cluster may be
	// in (remote.Options.Networks).
	RemoteClusterNetworks remote.Networks
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
		Wakes: Wakes{Wake: make(chan event.GenericEvent, 1024)}}
	chartFetcher, err := newChartFetcher(mgr, o.Cache.Dir, fetcher.Wake, o.AllowLoopbackClusters)
	if err != nil {
		return nil, err
	}
	drifts, err := newDriftWatcher(ctx, mgr, o.DisableDriftWatch)
	if err != nil {
		return nil, err
	}
	remotes, metadataCache, err := newClusters(mgr, o)
	if err != nil {
		return nil, err
	}
	local := cluster.NewLocal(cluster.LocalOptions{Config: cfg, Scheme: mgr.GetScheme(), Mapper: mgr.GetRESTMapper(),
		Checker: checker, Drift: drifts})
	return &Reconciler{
		Client:    mgr.GetClient(),
		APIReader: mgr.GetAPIReader(),
		Recorder:  mgr.GetEventRecorder("converge"),
		Fetcher:   SourceFetchers{Git: fetcher, Chart: chartFetcher},
		Renderer: KustomizeRenderer{Mapper: mgr.GetRESTMapper(), Timeout: o.RenderTimeout, Secrets: mgr.GetAPIReader(),
			Charts: NewChartRenders(chartRendersKept), Pool: o.RenderPool},
		Health:                &WatchHealth{DefaultServiceAccount: o.DefaultServiceAccount},
		Applier:               apply.Applier{Concurrency: o.ApplyConcurrency},
		Clusters:              cluster.NewSet(local, remotes),
		Clock:                 clock.RealClock{},
		DefaultServiceAccount: o.DefaultServiceAccount,
		FullSyncInterval:      o.FullSyncInterval,

		NoCrossNamespaceDependencies: o.NoCrossNamespaceDependencies,
		MaxConcurrentPerNamespace:    o.MaxConcurrentPerNamespace,

		scheduler: scheduler,
		charts:    chartFetcher,
		metadata:  metadataCache,
	}, nil
}

// newClusters makes the remote clusters of the daemon and, watched with drift, the cache of
// ConfigMaps' and Secrets' metadata: what wakes a SyncTarget whose variables changed, and
// tells a remote cluster's kubeconfig Secret unchanged.
func newClusters(mgr ctrl.Manager, o ReconcilerOptions) (*remote.Clusters, cache.Cache, error) {
	var metadataCache cache.Cache
	versions := client.Reader(nil)
	if !o.DisableDriftWatch {
		var err error
		if metadataCache, err = newMetadataCache(mgr); err != nil {
			return nil, nil, err
		}
		versions = metadataCache
	}
	return remote.NewClusters(remote.Options{Secrets: mgr.GetAPIReader(), Versions: versions, Scheme: mgr.GetScheme(),
		AllowLoopback: o.AllowLoopbackClusters, Networks: o.RemoteClusterNetworks}), metadataCache, nil
}

// chartRendersKept is how many chart renders the daemon keeps (see ChartRenders): a few
// per chart SyncTarget of a large installation.
const chartRendersKept = 1024

// Scheduler runs the pollers of the sources of a reconciler made by NewReconciler: a push
// webhook triggers them (sync/webhook).
func (r *Reconciler) Scheduler() *sources.Scheduler { return r.scheduler }

// Charts is the fetcher of the charts and artifacts of a reconciler made by NewReconciler:
// a registry's push webhook triggers its pollers (sync/webhook).
func (r *Reconciler) Charts() *ChartFetcher { return r.charts }

// newChartFetcher makes the fetcher of charts of chart repositories, its archives extracted
// into charts.CacheDir(dir), inside the cache directory (a temporary directory when dir is
// empty), its pollers stopped with the manager.
func newChartFetcher(mgr ctrl.Manager, dir string, wake chan event.GenericEvent, allowLoopback bool) (*ChartFetcher, error) {
	if dir == "" {
		var err error
		if dir, err = os.MkdirTemp("", "converge-charts-"); err != nil {
			return nil, err
		}
	}
	f := &ChartFetcher{Reader: mgr.GetAPIReader(), Wakes: Wakes{Wake: wake},
		Client: &charts.Client{CacheDir: charts.CacheDir(dir), AllowLoopback: allowLoopback}}
	return f, mgr.Add(f)
}

// newDriftWatcher makes the drift watcher of the daemon's cluster, nil when disabled.
func newDriftWatcher(ctx context.Context, mgr ctrl.Manager, disabled bool) (*drift.Watcher, error) {
	if disabled {
		return nil, nil
	}
	md, err := metadata.NewForConfig(mgr.GetConfig())
	if err != nil {
		return nil, err
	}
	return drift.NewWatcher(ctx, md, mgr.GetRESTMapper()), nil
}
