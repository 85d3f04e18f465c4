package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/go-logr/logr"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
	"github.com/converge-gitops/converge/notify"
	"github.com/converge-gitops/converge/sources"
	"github.com/converge-gitops/converge/sync/fleet"
	"github.com/converge-gitops/converge/sync/reconciler"
	"github.com/converge-gitops/converge/sync/remote"
	"github.com/converge-gitops/converge/sync/render"
	"github.com/converge-gitops/converge/sync/webhook"
)

// managerOptions configure the controller manager: endpoints, leader election, sharding.
type managerOptions struct {
	metricsAddr        string
	probeAddr          string
	pprofAddr          string
	leaderElect        bool
	leaderElectionNS   string
	leaderElectionID   string
	leaseDuration      time.Duration
	renewDeadline      time.Duration
	retryPeriod        time.Duration
	concurrency        int
	perNamespace       int
	qps                float32
	burst              int
	watchLabelSelector string
}

func (o *managerOptions) BindFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.metricsAddr, "metrics-bind-address", ":8080", "address of the Prometheus metrics endpoint (0 disables it)")
	fs.StringVar(&o.probeAddr, "health-probe-bind-address", ":8081", "address of the /healthz and /readyz probes")
	fs.StringVar(&o.pprofAddr, "pprof-bind-address", "", "address of the Go profiler's /debug/pprof endpoints (empty or 0 disables them); keep it on loopback")
	fs.BoolVar(&o.leaderElect, "leader-elect", false, "elect a leader, so that only one replica (per shard) reconciles")
	fs.StringVar(&o.leaderElectionNS, "leader-election-namespace", "", "namespace of the leader election lease (default: in-cluster namespace)")
	fs.StringVar(&o.leaderElectionID, "leader-election-id", "converge-leader", "name of the leader election lease; give each shard its own")
	fs.DurationVar(&o.leaseDuration, "leader-election-lease-duration", 15*time.Second, "how long a leader's lease lasts without renewal: the failover time")
	fs.DurationVar(&o.renewDeadline, "leader-election-renew-deadline", 10*time.Second, "how long the leader tries to renew before it gives up leading")
	fs.DurationVar(&o.retryPeriod, "leader-election-retry-period", 2*time.Second, "how often candidates try to acquire or renew the lease")
	fs.IntVar(&o.concurrency, "concurrency", 20, "SyncTargets reconciled at once")
	fs.IntVar(&o.perNamespace, "max-concurrent-per-namespace", 0,
		"SyncTargets of one namespace reconciled at once, so that one tenant cannot occupy every worker; 0: no cap (the multi-tenant install sets half of --concurrency)")
	fs.Float32Var(&o.qps, "kube-api-qps", 500, "client-side limit of API requests per second (the API server's priority and fairness still applies)")
	fs.IntVar(&o.burst, "kube-api-burst", 1000, "burst above --kube-api-qps")
	fs.StringVar(&o.watchLabelSelector, "watch-label-selector", "", "only reconcile SyncTargets matching this label selector (sharding)")
}

// maxPerNamespace is --max-concurrent-per-namespace; 0 leaves namespaces uncapped. The
// default install has no tenants to protect from each other (whoever creates a SyncTarget
// there acts as cluster-admin), and a cap would halve how fast the SyncTargets of one
// namespace converge; the multi-tenant install sets it.
func (o *managerOptions) maxPerNamespace() int {
	return max(o.perNamespace, 0)
}

// sourceOptions configure fetching and the checkout cache.
type sourceOptions struct {
	cacheDir     string
	maxBytes     int64
	maxFiles     int64
	fetchTimeout time.Duration
	webhookAddr  string
	// The webhook receiver answers anyone who can reach it.
	webhookRateLimit float64
	webhookRateBurst int
	webhookTokenTTL  time.Duration
}

// setCache configures the checkouts the SyncTargetSets' gitDirectories generator lists.
func (o *sourceOptions) setCache() sources.CacheOptions {
	return sources.CacheOptions{
		Dir: fleet.CacheDir(o.cacheDir), MaxBytes: o.maxBytes, MaxFiles: o.maxFiles, FetchTimeout: o.fetchTimeout,
	}
}

func (o *sourceOptions) BindFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.cacheDir, "cache-dir", filepath.Join(os.TempDir(), "converge", "checkouts"), "directory of the checkouts cache")
	fs.Int64Var(&o.maxBytes, "max-checkout-bytes", sources.DefaultMaxBytes, "size cap of one checkout")
	fs.Int64Var(&o.maxFiles, "max-checkout-files", sources.DefaultMaxFiles, "file count cap of one checkout")
	fs.DurationVar(&o.fetchTimeout, "fetch-timeout", sources.DefaultFetchTimeout, "timeout of one fetch")
	fs.StringVar(&o.webhookAddr, "webhook-bind-address", ":9292", "address of the push webhook receiver (POST /hooks/git, and /hooks/oci for registries); empty disables it")
	fs.Float64Var(&o.webhookRateLimit, "webhook-rate-limit", 10,
		"webhook requests per second accepted from one client address (IPv6: one /64), above which it answers 429; 0 disables the limit")
	fs.IntVar(&o.webhookRateBurst, "webhook-rate-burst", 50, "webhook requests one client address may send at once above --webhook-rate-limit")
	fs.DurationVar(&o.webhookTokenTTL, "webhook-token-ttl", webhook.DefaultTokenTTL,
		"how long a webhook token read from its Secret is used before it is read again: a rotated token is accepted within this time")
}

// syncOptions configure applying.
type syncOptions struct {
	defaultServiceAccount string
	fullSyncInterval      time.Duration
	applyConcurrency      int
	driftWatch            bool
	crossNamespaceDeps    bool
	renderTimeout         time.Duration
	renderWorkers         int
	renderPerNamespace    int
	renderMemory          string
	allowLoopbackClusters bool
	remoteClusterNetworks remote.Networks
}

func (o *syncOptions) BindFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.defaultServiceAccount, "default-service-account", "",
		"service account impersonated for SyncTargets that name none (multi-tenancy: give it no rights)")
	fs.DurationVar(&o.fullSyncInterval, "full-sync-interval", time.Hour, "how often an unchanged revision is re-applied in full anyway")
	fs.IntVar(&o.applyConcurrency, "apply-concurrency", 16, "concurrent dry-runs and writes within one apply stage")
	fs.BoolVar(&o.driftWatch, "drift-watch", true,
		"watch managed objects cluster-wide to undo changes made outside Git at once, and the metadata of ConfigMaps and Secrets to redeploy when spec.postBuild variables change; without it (multi-tenancy: the daemon may not watch), the full sync corrects drift and variables are read again at each interval")
	fs.BoolVar(&o.crossNamespaceDeps, "allow-cross-namespace-dependencies", true,
		"let spec.dependsOn name SyncTargets of other namespaces; without it (multi-tenancy) such a SyncTarget is Stalled and the other namespace is never read")
	fs.BoolVar(&o.allowLoopbackClusters, "allow-loopback-clusters", false,
		"let spec.kubeConfig point at a loopback or link-local address (and plain http), and spec.chart.repository (and where its redirects, chart URLs and token realms lead) at one too: for tests and local development only, as a tenant would reach the daemon's host and cloud metadata")
	fs.Var(&o.remoteClusterNetworks, "remote-cluster-cidrs",
		"CIDRs (comma-separated or repeated) that the API servers of spec.kubeConfig clusters must be in, checked on the address dialled; empty: any address but loopback, link-local and cloud metadata")
	fs.DurationVar(&o.renderTimeout, "render-timeout", render.DefaultTimeout,
		"deadline of one render (kustomize build, manifests read or chart templates); a render that takes longer is killed and fails with BuildFailed")
	fs.IntVar(&o.renderWorkers, "render-workers", render.DefaultWorkers,
		"render worker processes: renders run in them, each bounded by --render-memory-limit, --render-timeout and one core, so that a template costs only its own SyncTarget")
	fs.IntVar(&o.renderPerNamespace, "render-workers-per-namespace", 0,
		"render workers the SyncTargets of one namespace are sure of (0: half of --render-workers, at least 1); a namespace may use more while no other waits, and gives them back after a second when another does")
	fs.StringVar(&o.renderMemory, "render-memory-limit", "512Mi",
		"memory one render worker may use while it renders (a quantity: 512Mi, 1Gi); past it the worker is killed and the render fails with BuildFailed")
}

// renderPool is the daemon's render boundary: the worker processes every render runs in.
func (o *syncOptions) renderPool() (*render.Pool, error) {
	if o.renderWorkers < 1 {
		return nil, fmt.Errorf("--render-workers must be at least 1, got %d", o.renderWorkers)
	}
	if o.renderPerNamespace < 0 {
		return nil, fmt.Errorf("--render-workers-per-namespace must not be negative, got %d", o.renderPerNamespace)
	}
	mem, err := resource.ParseQuantity(o.renderMemory)
	if err != nil || mem.Value() < 64<<20 {
		return nil, fmt.Errorf("--render-memory-limit must be a quantity of at least 64Mi, got %q", o.renderMemory)
	}
	return render.NewPool(render.PoolOptions{Workers: o.renderWorkers, PerTenant: o.renderPerNamespace,
		MemoryLimit: mem.Value(), Stopped: reconciler.RenderWorkerStopped})
}

type serveOptions struct {
	kube      kubeOptions
	manager   managerOptions
	source    sourceOptions
	sync      syncOptions
	ui        serveUIOptions
	logFormat string
}

func newServeCommand() *cobra.Command {
	o := &serveOptions{}
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run the converge daemon: reconcile SyncTargets",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return o.run(ctrl.SetupSignalHandler())
		},
	}
	o.kube.BindFlags(cmd.Flags())
	o.manager.BindFlags(cmd.Flags())
	o.source.BindFlags(cmd.Flags())
	o.sync.BindFlags(cmd.Flags())
	o.ui.BindFlags(cmd.Flags())
	cmd.Flags().StringVar(&o.logFormat, "log-format", "json", "format of the log on stderr: json (a line per record, for machines) or text (for a person)")
	return cmd
}

// newLogger is the daemon's logger writing to w in format: "json" or "text".
func newLogger(format string, w io.Writer) (logr.Logger, error) {
	switch format {
	case "json":
		return zap.New(zap.WriteTo(w), zap.JSONEncoder()), nil
	case "text":
		return zap.New(zap.WriteTo(w), zap.ConsoleEncoder()), nil
	}
	return logr.Logger{}, fmt.Errorf("--log-format must be json or text, got %q", format)
}

func (o *serveOptions) run(ctx context.Context) error {
	logger, err := newLogger(o.logFormat, os.Stderr)
	if err != nil {
		return err
	}
	if o.sync.renderTimeout <= 0 {
		return fmt.Errorf("--render-timeout must be positive, got %s", o.sync.renderTimeout)
	}
	if o.manager.perNamespace < 0 {
		return fmt.Errorf("--max-concurrent-per-namespace must not be negative, got %d", o.manager.perNamespace)
	}
	pool, err := o.sync.renderPool()
	if err != nil {
		return err
	}
	defer pool.Close()
	ctrl.SetLogger(logger)
	cfg, err := o.kube.restConfig()
	if err != nil {
		return err
	}
	cfg.QPS, cfg.Burst = o.manager.qps, o.manager.burst
	mgr, err := o.manager.newManager(cfg)
	if err != nil {
		return err
	}

	r, err := reconciler.NewReconciler(ctx, mgr, reconciler.ReconcilerOptions{
		Cache: sources.CacheOptions{
			Dir: o.source.cacheDir, MaxBytes: o.source.maxBytes, MaxFiles: o.source.maxFiles, FetchTimeout: o.source.fetchTimeout,
		},
		ApplyConcurrency:             o.sync.applyConcurrency,
		DefaultServiceAccount:        o.sync.defaultServiceAccount,
		FullSyncInterval:             o.sync.fullSyncInterval,
		DisableDriftWatch:            !o.sync.driftWatch,
		RenderTimeout:                o.sync.renderTimeout,
		RenderPool:                   pool,
		MaxConcurrentPerNamespace:    o.manager.maxPerNamespace(),
		NoCrossNamespaceDependencies: !o.sync.crossNamespaceDeps,
		AllowLoopbackClusters:        o.sync.allowLoopbackClusters,
		RemoteClusterNetworks:        o.sync.remoteClusterNetworks,
	})
	if err != nil {
		return err
	}
	if err := o.ui.addTo(mgr, cfg); err != nil {
		return err
	}
	if err := o.addControllers(ctx, mgr, r, pool); err != nil {
		return err
	}
	return mgr.Start(ctx)
}

// addControllers registers the SyncTarget, Notifier and SyncTargetSet controllers with
// mgr, and the webhook receiver, which wakes the SyncTargets' pollers and the sets that
// list pull requests.
func (o *serveOptions) addControllers(ctx context.Context, mgr ctrl.Manager, r *reconciler.Reconciler, pool *render.Pool) error {
	if err := r.SetupWithManager(ctx, mgr, reconciler.Options{Concurrency: o.manager.concurrency}); err != nil {
		return fmt.Errorf("setting up the controller: %w", err)
	}
	if _, err := notify.SetupWithManager(mgr, notify.Options{}); err != nil {
		return fmt.Errorf("setting up the notifier controller: %w", err)
	}
	sets, err := fleet.SetupWithManager(mgr, fleet.Options{Cache: o.source.setCache(), Polls: r.Scheduler().Polls(),
		AllowLoopback: o.sync.allowLoopbackClusters, RenderPool: pool})
	if err != nil {
		return fmt.Errorf("setting up the SyncTargetSet controller: %w", err)
	}
	return o.addWebhooks(ctx, mgr, r, sets)
}

// newManager is the controller manager the daemon runs in, with its probes.
func (o *managerOptions) newManager(cfg *rest.Config) (ctrl.Manager, error) {
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return nil, err
	}
	if err := convergev1.AddToScheme(scheme); err != nil {
		return nil, err
	}
	cacheOpts := cache.Options{}
	if o.watchLabelSelector != "" {
		sel, err := labels.Parse(o.watchLabelSelector)
		if err != nil {
			return nil, fmt.Errorf("--watch-label-selector: %w", err)
		}
		// A shard reports on its own SyncTargets only, and generates those of its own sets
		// (whose template should carry the shard's label).
		cacheOpts.ByObject = map[client.Object]cache.ByObject{&convergev1.SyncTarget{}: {Label: sel},
			&convergev1.Notifier{}: {Label: sel}, &convergev1.SyncTargetSet{}: {Label: sel}}
	}
	// Secrets (git credentials, webhook tokens) are read one by one when needed: caching
	// them would watch every Secret of the cluster, which a locked-down daemon may not.
	clientOpts := client.Options{Cache: &client.CacheOptions{DisableFor: []client.Object{&corev1.Secret{}}}}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                        scheme,
		Cache:                         cacheOpts,
		Client:                        clientOpts,
		Metrics:                       metricsserver.Options{BindAddress: o.metricsAddr},
		HealthProbeBindAddress:        o.probeAddr,
		PprofBindAddress:              o.pprofAddr,
		LeaderElection:                o.leaderElect,
		LeaderElectionID:              o.leaderElectionID,
		LeaderElectionNamespace:       o.leaderElectionNS,
		LeaderElectionReleaseOnCancel: true,
		LeaseDuration:                 &o.leaseDuration,
		RenewDeadline:                 &o.renewDeadline,
		RetryPeriod:                   &o.retryPeriod,
	})
	if err != nil {
		return nil, fmt.Errorf("creating the manager: %w", err)
	}
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		return nil, err
	}
	if err := mgr.AddReadyzCheck("readyz", healthz.Ping); err != nil {
		return nil, err
	}
	return mgr, nil
}

// addWebhooks runs the push webhook receiver with mgr, when --webhook-bind-address asks for it.
func (o *serveOptions) addWebhooks(ctx context.Context, mgr ctrl.Manager, r *reconciler.Reconciler, sets *fleet.Reconciler) error {
	if o.source.webhookAddr == "" {
		return nil
	}
	hooks, err := webhook.New(ctx, mgr, r.Scheduler(), o.manager.watchLabelSelector != "")
	if err != nil {
		return err
	}
	hooks.TokenTTL = o.source.webhookTokenTTL
	hooks.Charts = r.Charts()
	if l, ok := sets.PullRequests.(*fleet.ForgeLister); ok {
		hooks.Sets = setHooks{l}
	}
	srv := sources.NewWebhookServer(o.source.webhookAddr, sources.NewWebhookHandler(hooks, hooks, sources.WebhookOptions{
		Log: ctrl.Log.WithName("webhook"), RateLimit: o.source.webhookRateLimit, RateBurst: o.source.webhookRateBurst,
		Registry: hooks.Registries(),
	}))
	return mgr.Add(webhookServer{srv: srv})
}

// setHooks gives the webhook receiver the SyncTargetSets that list a repository's pull
// requests.
type setHooks struct{ l *fleet.ForgeLister }

func (h setHooks) HooksForRepo(repo string) []webhook.SetHook {
	var out []webhook.SetHook
	for _, p := range h.l.HooksForRepo(repo) {
		out = append(out, webhook.SetHook{Set: p.Set, Secret: p.Secret})
	}
	return out
}

func (h setHooks) WakeSet(set client.ObjectKey) { h.l.WakeSet(set) }

// webhookServer runs the push webhook receiver with the manager, on every replica:
// webhooks are accepted by all of them, and announced to the replica that reconciles
// each SyncTarget (the leader of its shard) through its converge.dev/pushedAt annotation.
type webhookServer struct{ srv *http.Server }

func (w webhookServer) Start(ctx context.Context) error {
	errc := make(chan error, 1)
	go func() { errc <- w.srv.ListenAndServe() }()
	select {
	case err := <-errc:
		if errors.Is(err, http.ErrServerClosed) {
			return nil
		}
		return fmt.Errorf("webhook server: %w", err)
	case <-ctx.Done():
		shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		return w.srv.Shutdown(shutdownCtx)
	}
}

// NeedLeaderElection is false: every replica receives webhooks.
func (webhookServer) NeedLeaderElection() bool { return false }
