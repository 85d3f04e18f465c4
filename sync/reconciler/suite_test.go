package reconciler_test

import (
	"context"
	"flag"
	"fmt"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
	"github.com/converge-gitops/converge/internal/gittest"
	"github.com/converge-gitops/converge/internal/localcluster"
	"github.com/converge-gitops/converge/internal/localcluster/clustertest"
	"github.com/converge-gitops/converge/sources"
	"github.com/converge-gitops/converge/sync/reconciler"
	"github.com/converge-gitops/converge/sync/webhook"
)

// The package shares one local cluster (controller-manager, scheduler, 2 kwok nodes) and
// one running reconciler; each test uses namespaces and a git repository of its own.
var (
	k8s        client.Client
	admin      *rest.Config
	kubeconfig string       // the admin kubeconfig file, for the Helm SDK
	requests   atomic.Int64 // every API request the reconciler sent
	hooks      *webhook.Dispatcher
	checkouts  *sources.Cache
)

func TestMain(m *testing.M) {
	flag.Parse()
	if testing.Short() { // make test-unit: the pure tests alone
		os.Exit(m.Run())
	}
	// The tests that mostly wait (on rollouts, deadlines, polls, a second cluster) run four at
	// a time. Those that count the reconciler's requests or metrics do not call t.Parallel:
	// Go runs them first, one at a time, before any parallel test starts.
	clustertest.ParallelUnlessSet(4)
	os.Exit(func() int {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		c, err := localcluster.Start(ctx, localcluster.Options{
			Workloads: true, Nodes: 2, CRDDirectoryPaths: []string{clustertest.CRDDir()},
		})
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer func() { _ = c.Stop() }()
		admin, kubeconfig = c.Config, c.Kubeconfig
		if err := startReconciler(ctx, c.Config); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		return m.Run()
	}())
}

func startReconciler(ctx context.Context, base *rest.Config) error {
	scheme := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(scheme)
	_ = convergev1.AddToScheme(scheme)

	cfg := rest.CopyConfig(base)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripperFunc(func(req *http.Request) (*http.Response, error) {
			requests.Add(1)
			recorder.record(req)
			return rt.RoundTrip(req)
		})
	})
	ctrl.SetLogger(logr.Discard())
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{Scheme: scheme, Metrics: metricsserver.Options{BindAddress: "0"}})
	if err != nil {
		return err
	}
	var errClient error
	k8s, errClient = client.New(base, client.Options{Scheme: scheme})
	if errClient != nil {
		return errClient
	}
	dir, err := os.MkdirTemp("", "converge-sync-test-")
	if err != nil {
		return err
	}
	go func() { <-ctx.Done(); _ = os.RemoveAll(dir) }()
	// No grace period, so that TestCacheGCKeepsWhatSyncTargetsNeed sees a collection at once.
	r, err := reconciler.NewReconciler(ctx, mgr, reconciler.ReconcilerOptions{
		Cache: sources.CacheOptions{Dir: dir, GCGracePeriod: time.Nanosecond}, ApplyConcurrency: 8, FullSyncInterval: time.Hour,
		AllowLoopbackClusters: true, // the remote clusters of TestRemoteCluster are local ones
	})
	if err != nil {
		return err
	}
	checkouts = r.Fetcher.(reconciler.SourceFetchers).Git.(*reconciler.GitFetcher).Cache
	hooks, err = webhook.New(ctx, mgr, r.Scheduler(), false)
	if err != nil {
		return err
	}
	// A short token cache: tests that create a webhook Secret after a refusal need not wait
	// the daemon's 30 s (the cache itself is tested with a fake clock).
	hooks.TokenTTL = time.Second
	hooks.Charts = r.Charts()
	if err := r.SetupWithManager(ctx, mgr, reconciler.Options{Concurrency: 4}); err != nil {
		return err
	}
	go func() {
		if err := mgr.Start(ctx); err != nil {
			fmt.Fprintln(os.Stderr, "manager:", err)
		}
	}()
	return nil
}

// recorder keeps the requests the reconciler sends while a test records them.
var recorder requestLog

type requestLog struct {
	mu   sync.Mutex
	on   bool
	sent []string // "METHOD path?query"
}

func (l *requestLog) record(req *http.Request) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.on {
		l.sent = append(l.sent, req.Method+" "+req.URL.RequestURI())
	}
}

// start records from now on; the returned stop ends it and returns what was sent.
func (l *requestLog) start() (stop func() []string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.on, l.sent = true, nil
	return func() []string {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.on = false
		return l.sent
	}
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// fixture is one test's repository, served over loopback HTTP, and its namespaces.
type fixture struct {
	t    *testing.T
	repo *gittest.Repo
	url  string
	ns   string // where the SyncTarget lives
	app  string // where its objects go
}

var fixtures atomic.Int64

func newFixture(t *testing.T) *fixture {
	requireCluster(t)
	t.Helper()
	n := fixtures.Add(1)
	root := t.TempDir()
	repo := gittest.NewRepo(t, root, "app")
	srv := gittest.NewHTTPServer(t, root, gittest.HTTPOptions{})
	f := &fixture{t: t, repo: repo, url: srv.RepoURL(repo),
		ns: fmt.Sprintf("team-%d", n), app: fmt.Sprintf("app-%d", n)}
	for _, ns := range []string{f.ns, f.app} {
		if err := k8s.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			t.Fatal(err)
		}
	}
	return f
}

// commit writes files on main and returns the revision converge reports for it.
func (f *fixture) commit(files map[string]string) string {
	return "main@sha1:" + f.repo.Commit(f.t, "main", files)
}

func (f *fixture) remove(paths ...string) string {
	changes := make([]gittest.Change, 0, len(paths))
	for _, p := range paths {
		changes = append(changes, gittest.Change{Path: p, Delete: true})
	}
	return "main@sha1:" + f.repo.CommitChanges(f.t, "main", changes...)
}

func (f *fixture) syncTarget(name string, mutate func(*convergev1.SyncTarget)) *convergev1.SyncTarget {
	st := &convergev1.SyncTarget{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: f.ns},
		Spec: convergev1.SyncTargetSpec{
			Source: convergev1.GitSource{
				URL: f.url, Ref: convergev1.GitRef{Branch: "main"},
				Interval: &metav1.Duration{Duration: time.Second},
			},
			Path:            "deploy",
			TargetNamespace: f.app,
			Prune:           true,
			Timeout:         &metav1.Duration{Duration: 40 * time.Second},
		},
	}
	if mutate != nil {
		mutate(st)
	}
	if err := k8s.Create(context.Background(), st); err != nil {
		f.t.Fatal(err)
	}
	// Deleting it prunes what it applied, so that it stops polling and leaves the
	// cluster to the next test.
	f.t.Cleanup(func() { _ = k8s.Delete(context.Background(), st) })
	return st
}

func get(g Gomega, st *convergev1.SyncTarget) *convergev1.SyncTarget {
	out := &convergev1.SyncTarget{}
	g.Expect(k8s.Get(context.Background(), client.ObjectKeyFromObject(st), out)).To(Succeed())
	return out
}

func ready(st *convergev1.SyncTarget) *metav1.Condition {
	c := apimeta.FindStatusCondition(st.Status.Conditions, convergev1.ReadyCondition)
	if c == nil {
		return &metav1.Condition{}
	}
	return c
}

// eventually waits for the SyncTarget to reach a state, with the timeouts a sync takes here.
func eventually(t *testing.T, st *convergev1.SyncTarget, check func(g Gomega, st *convergev1.SyncTarget)) {
	t.Helper()
	NewWithT(t).Eventually(func(g Gomega) { check(g, get(g, st)) }).
		WithTimeout(90 * time.Second).WithPolling(250 * time.Millisecond).Should(Succeed())
}

func configMap(name, value string) string {
	return fmt.Sprintf("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: %s\ndata:\n  value: %q\n", name, value)
}

// deployment is a Deployment whose pods kwok runs. With a nodeSelector matching no node it
// never becomes Available and reports ProgressDeadlineExceeded after 5 s; without one its
// progress deadline is 600 s, so that pods a loaded machine starts slowly are not taken
// for a failed rollout. The deadline counts from the Deployment's last progress, which
// may be a failed revision's start: a rollout back to a healthy template after a failing
// one inherits its time.
func deployment(name string, replicas int, nodeSelector string) string {
	sel, deadline := "", 600
	if nodeSelector != "" {
		sel, deadline = "      nodeSelector:\n        "+nodeSelector+"\n", 5
	}
	return fmt.Sprintf(`apiVersion: apps/v1
kind: Deployment
metadata:
  name: %[1]s
spec:
  replicas: %[2]d
  progressDeadlineSeconds: %[4]d
  selector:
    matchLabels: {app: %[1]s}
  template:
    metadata:
      labels: {app: %[1]s}
    spec:
%[3]s      containers:
      - name: app
        image: example.com/%[1]s:1
`, name, replicas, sel, deadline)
}

// requireCluster skips a test that needs the local cluster when it was not started (-short).
func requireCluster(t *testing.T) {
	t.Helper()
	if k8s == nil {
		t.Skip("needs the local cluster: make test")
	}
}
