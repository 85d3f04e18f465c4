package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
	"github.com/converge-gitops/converge/internal/freeport"
	"github.com/converge-gitops/converge/internal/gittest"
	"github.com/converge-gitops/converge/internal/localcluster"
	"github.com/converge-gitops/converge/internal/localcluster/clustertest"
)

const (
	// benchNamespace holds the SyncTargets and the webhook secret.
	benchNamespace = "bench"
	// webhookSecret is the Secret (in benchNamespace) whose token signs push webhooks.
	webhookSecret = "bench-hook"
	webhookToken  = "bench-webhook-token"
	// workloadLabel marks the SyncTargets of a workload, for cleanup.
	workloadLabel = "bench.converge.dev/workload"
)

// Bench is one invocation: the converge binary, a local cluster, a loopback git server and
// the results. Daemons are started per repetition.
type Bench struct {
	cfg  Config
	tb   testing.TB
	logf func(format string, args ...any)

	root string // the converge module
	work string // temporary files of this invocation
	// shm is this invocation's directory on tmpfs (under tmpfsRoot): converge's cache
	// directory and TMPDIR, Flux's artifact storage and TMPDIR, so that both keep their
	// files in RAM.
	shm     string
	binary  string // the converge binary built from root
	kubectl string

	cluster *localcluster.Cluster
	c       client.WithWatch
	cs      kubernetes.Interface
	// floor applies big's objects with a dynamic client, like c without a rate limit.
	floor dynamic.Interface

	gitRoot string
	git     *gittest.HTTPServer

	// fleet is the second cluster of the fleet workload, started by its first run.
	fleet *fleetClusters

	res *Results

	mu      sync.Mutex
	daemons []*daemon
	// cpuProfiles are the CPU profile windows taken per workload (BENCH_PROFILE), in
	// profileOrder.
	cpuProfiles  map[string][]string
	profileOrder []string
}

// Setup builds the converge binary and starts the cluster and the git server. Everything
// it starts is stopped by tb's cleanups.
func Setup(ctx context.Context, tb testing.TB, cfg Config, logf func(string, ...any)) (*Bench, error) {
	// envtest logs through controller-runtime's logger; the benchmark reports on its own.
	ctrl.SetLogger(logr.Discard())
	b := &Bench{cfg: cfg, tb: tb, logf: logf}
	if b.logf == nil {
		b.logf = func(string, ...any) {}
	}
	var err error
	if b.root, err = moduleRoot(); err != nil {
		return nil, err
	}
	if b.work, err = os.MkdirTemp("", "converge-bench-"); err != nil {
		return nil, err
	}
	tb.Cleanup(func() { _ = removeTree(b.work) })
	if b.shm, err = os.MkdirTemp(tmpfsRoot, "converge-bench-"); err != nil {
		return nil, err
	}
	tb.Cleanup(func() { _ = removeTree(b.shm) })
	b.res = &Results{Started: time.Now(), Host: hostInfo(b.root), Config: cfg, Notes: notes}

	if cfg.needsCluster() {
		b.binary = filepath.Join(b.work, "converge")
		started := time.Now()
		cmd := exec.CommandContext(ctx, "go", "build", "-o", b.binary, "./cmd/converge")
		cmd.Dir = b.root
		if out, err := cmd.CombinedOutput(); err != nil {
			return nil, fmt.Errorf("building converge: %v\n%s", err, out)
		}
		b.logf("built converge in %s", time.Since(started).Round(100*time.Millisecond))

		binDir, err := localcluster.BinDir()
		if err != nil {
			return nil, err
		}
		b.kubectl = filepath.Join(binDir, "kubectl")
		started = time.Now()
		b.cluster, err = localcluster.Start(ctx, localcluster.Options{
			BinDir: binDir, Workloads: true, Nodes: cfg.Nodes, CRDDirectoryPaths: []string{clustertest.CRDDir()},
		})
		if err != nil {
			return nil, err
		}
		tb.Cleanup(func() {
			b.stopDaemons()
			if err := b.cluster.Stop(); err != nil {
				b.logf("stopping the local cluster: %v", err)
			}
		})
		b.logf("started the local cluster (%d kwok nodes) in %s", cfg.Nodes, time.Since(started).Round(100*time.Millisecond))

		scheme := runtime.NewScheme()
		if err := clientgoscheme.AddToScheme(scheme); err != nil {
			return nil, err
		}
		if err := convergev1.AddToScheme(scheme); err != nil {
			return nil, err
		}
		// No client-side rate limit: creating 1 000 SyncTargets must not wait on the
		// benchmark's own throttle, and the floor is the floor.
		unlimited := rest.CopyConfig(b.cluster.Config)
		unlimited.QPS, unlimited.Burst = -1, 0
		if b.c, err = client.NewWithWatch(unlimited, client.Options{Scheme: scheme}); err != nil {
			return nil, err
		}
		if b.cs, err = kubernetes.NewForConfig(unlimited); err != nil {
			return nil, err
		}
		if b.floor, err = dynamic.NewForConfig(unlimited); err != nil {
			return nil, err
		}
		if err := b.c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: benchNamespace}}); err != nil {
			return nil, err
		}
		if err := b.c.Create(ctx, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: webhookSecret, Namespace: benchNamespace},
			Data:       map[string][]byte{"token": []byte(webhookToken)},
		}); err != nil {
			return nil, err
		}
		if cfg.flux() {
			if err := b.setupFlux(ctx); err != nil {
				return nil, err
			}
		}
	}
	b.gitRoot = filepath.Join(b.work, "git")
	if err := os.MkdirAll(b.gitRoot, 0o755); err != nil {
		return nil, err
	}
	b.git = gittest.NewHTTPServer(tb, b.gitRoot, gittest.HTTPOptions{})
	return b, nil
}

// moduleRoot finds the converge module above the working directory.
func moduleRoot() (string, error) {
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for d := wd; ; d = filepath.Dir(d) {
		if b, err := os.ReadFile(filepath.Join(d, "go.mod")); err == nil &&
			bytes.Contains(b, []byte("module github.com/converge-gitops/converge\n")) {
			return d, nil
		}
		if filepath.Dir(d) == d {
			return "", errors.New("the converge module is not above the working directory")
		}
	}
}

func gitOutput(dir string, args ...string) (string, error) {
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	out, err := cmd.Output()
	return strings.TrimSpace(string(out)), err
}

// removeTree removes a directory even when parts of it are read-only (checkouts are).
func removeTree(dir string) error {
	_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			_ = os.Chmod(p, 0o755)
		}
		return nil
	})
	return os.RemoveAll(dir)
}

// daemon is a running `converge serve`.
type daemon struct {
	name       string
	cmd        *exec.Cmd
	log        string
	metricsURL string
	probeURL   string
	webhookURL string
	pprofURL   string // set with BENCH_PROFILE
	exited     chan struct{}
	waitErr    error
	// anonPeak is the highest RssAnon sampled (KiB), see sampleAnon.
	anonPeak atomic.Int64
}

// startDaemon runs `converge serve` with its defaults, but for loopback ports and a cache
// directory and TMPDIR of its own on tmpfs (as Flux's storage and TMPDIR are), and waits
// until it serves its probes and metrics.
func (b *Bench) startDaemon(ctx context.Context, name string, extraArgs ...string) (*daemon, error) {
	var ports [4]int
	for i := range ports {
		p, err := freeport.Port()
		if err != nil {
			return nil, err
		}
		ports[i] = p
	}
	d := &daemon{
		name:       name,
		log:        filepath.Join(b.work, "daemon-"+name+".log"),
		metricsURL: fmt.Sprintf("http://127.0.0.1:%d/metrics", ports[0]),
		probeURL:   fmt.Sprintf("http://127.0.0.1:%d/readyz", ports[1]),
		webhookURL: fmt.Sprintf("http://127.0.0.1:%d/hooks/git", ports[2]),
	}
	args := []string{"serve",
		"--kubeconfig", b.cluster.Kubeconfig,
		"--metrics-bind-address", fmt.Sprintf("127.0.0.1:%d", ports[0]),
		"--health-probe-bind-address", fmt.Sprintf("127.0.0.1:%d", ports[1]),
		"--webhook-bind-address", fmt.Sprintf("127.0.0.1:%d", ports[2]),
		"--cache-dir", filepath.Join(b.shm, "cache-"+name),
	}
	tmp := filepath.Join(b.shm, "tmp-"+name)
	if err := os.MkdirAll(tmp, 0o755); err != nil {
		return nil, err
	}
	if b.cfg.Profile {
		d.pprofURL = fmt.Sprintf("http://127.0.0.1:%d/debug/pprof", ports[3])
		args = append(args, "--pprof-bind-address", fmt.Sprintf("127.0.0.1:%d", ports[3]))
	}
	args = append(args, extraArgs...)
	if err := b.spawn(d, b.binary, append(args, b.cfg.DaemonArgs...), []string{"TMPDIR=" + tmp}); err != nil {
		return nil, err
	}
	go d.sampleAnon()

	deadline := time.Now().Add(90 * time.Second)
	for {
		select {
		case <-d.exited:
			return nil, fmt.Errorf("converge serve exited: %v%s", d.waitErr, d.tail())
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
		if httpOK(ctx, d.probeURL) {
			if s, err := scrape(ctx, d.metricsURL, "controller_runtime_"); err == nil &&
				slices.ContainsFunc(s, func(s sample) bool { return s.labels["controller"] == "synctarget" }) {
				return d, nil
			}
		}
		if time.Now().After(deadline) {
			b.stopDaemon(d)
			return nil, fmt.Errorf("converge serve did not become ready in 90s%s", d.tail())
		}
	}
}

// spawn starts bin as a process of the benchmark, its output in d.log, killed when the
// benchmark dies, and registers it for stopDaemons.
func (b *Bench) spawn(d *daemon, bin string, args, env []string) error {
	logFile, err := os.Create(d.log)
	if err != nil {
		return err
	}
	d.exited = make(chan struct{})
	d.cmd = exec.Command(bin, args...)
	if env != nil {
		d.cmd.Env = append(os.Environ(), env...)
	}
	d.cmd.Stdout, d.cmd.Stderr = logFile, logFile
	d.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := d.cmd.Start(); err != nil {
		_ = logFile.Close()
		return err
	}
	go func() {
		d.waitErr = d.cmd.Wait()
		_ = logFile.Close()
		close(d.exited)
	}()
	b.mu.Lock()
	b.daemons = append(b.daemons, d)
	b.mu.Unlock()
	return nil
}

func httpOK(ctx context.Context, url string) bool {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return false
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return false
	}
	_ = resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

func (d *daemon) pid() int { return d.cmd.Process.Pid }

// sampleAnon reads the daemon's RssAnon every 50 ms until it exits, keeping the highest.
// VmHWM counts the binary's pages too: file-backed, shared and reclaimable, and here
// mapped in 2 MiB pages, about 76 MiB of an idle daemon's 89. The anonymous part is the
// memory the daemon itself allocates; the kernel keeps no high-water mark of it.
func (d *daemon) sampleAnon() {
	path := fmt.Sprintf("/proc/%d/status", d.pid())
	for {
		if kb, err := statusField(path, "RssAnon:"); err == nil && int64(kb) > d.anonPeak.Load() {
			d.anonPeak.Store(int64(kb))
		}
		select {
		case <-d.exited:
			return
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// peakAnonMiB is the highest RssAnon sampled so far, in MiB.
func (d *daemon) peakAnonMiB() float64 { return float64(d.anonPeak.Load()) / 1024 }

// running returns an error when the daemon stopped on its own.
func (d *daemon) running() error {
	select {
	case <-d.exited:
		return fmt.Errorf("%s exited: %v%s", d.name, d.waitErr, d.tail())
	default:
		return nil
	}
}

// tail returns the last lines of the daemon's log, for error messages.
func (d *daemon) tail() string {
	f, err := os.Open(d.log)
	if err != nil {
		return ""
	}
	defer func() { _ = f.Close() }()
	var lines []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		lines = append(lines, sc.Text())
		if len(lines) > 30 {
			lines = lines[1:]
		}
	}
	return "\n--- " + d.name + " log (" + d.log + "), last lines:\n" + strings.Join(lines, "\n")
}

// counters are what the daemon counts of itself.
type counters struct {
	// reconciles is the number of finished SyncTarget reconciles, reconcileSeconds the sum
	// of their durations.
	reconciles, reconcileSeconds float64
	// setReconciles and setSeconds are the SyncTargetSet controller's.
	setReconciles, setSeconds float64
	// requests counts the API requests the daemon's clients sent, by method
	// (client-go's rest_client_requests_total).
	requests requestCounts
}

// counters scrapes the daemon's metrics endpoint.
func (d *daemon) counters(ctx context.Context) (counters, error) {
	s, err := scrape(ctx, d.metricsURL, "controller_runtime_reconcile_", "rest_client_requests_total")
	if err != nil {
		return counters{}, err
	}
	sel := map[string]string{"controller": "synctarget"}
	c := counters{
		reconciles:       sum(s, "controller_runtime_reconcile_total", sel),
		reconcileSeconds: sum(s, "controller_runtime_reconcile_time_seconds_sum", sel),
		requests:         requestCounts{},
	}
	set := map[string]string{"controller": "synctargetset"}
	c.setReconciles = sum(s, "controller_runtime_reconcile_total", set)
	c.setSeconds = sum(s, "controller_runtime_reconcile_time_seconds_sum", set)
	for _, x := range s {
		if x.name == "rest_client_requests_total" {
			c.requests[x.labels["method"]] += x.value
		}
	}
	return c, nil
}

// phaseNames are the phases of a deploy, in order (converge_sync_phase_duration_seconds).
var phaseNames = []string{"checkout", "render", "ownership", "apply", "prune", "health"}

// phaseTimes is how long the daemon's deploys spent in each phase so far.
type phaseTimes map[string]time.Duration

// phases reads how long the daemon's deploys spent in each phase so far
// (converge_sync_phase_duration_seconds).
func (d *daemon) phases(ctx context.Context) (phaseTimes, error) {
	s, err := scrape(ctx, d.metricsURL, "converge_sync_phase_duration_seconds_sum")
	if err != nil {
		return nil, err
	}
	p := phaseTimes{}
	for _, phase := range phaseNames {
		v := sum(s, "converge_sync_phase_duration_seconds_sum", map[string]string{"phase": phase})
		p[phase] = time.Duration(v * float64(time.Second))
	}
	return p, nil
}

// since is what was spent in each phase after before.
func (p phaseTimes) since(before phaseTimes) phaseTimes {
	d := phaseTimes{}
	for k, v := range p {
		d[k] = v - before[k]
	}
	return d
}

// String is e.g. "render 120ms, apply 2.1s, health 1.4s": the phases that took time.
func (p phaseTimes) String() string {
	var parts []string
	for _, phase := range phaseNames {
		if v := p[phase]; v > 0 {
			parts = append(parts, fmt.Sprintf("%s %s", phase, v.Round(time.Millisecond)))
		}
	}
	return strings.Join(parts, ", ")
}

// waitQuiet waits until the daemon finished no reconcile for quiet.
func (d *daemon) waitQuiet(ctx context.Context, quiet, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	c, err := d.counters(ctx)
	if err != nil {
		return err
	}
	last := c.reconciles
	since := time.Now()
	for time.Since(since) < quiet {
		if err := d.running(); err != nil {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the daemon kept reconciling for %s", timeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
		c, err := d.counters(ctx)
		if err != nil {
			return err
		}
		if c.reconciles != last {
			last, since = c.reconciles, time.Now()
		}
	}
	return nil
}

func (b *Bench) stopDaemon(d *daemon) {
	if d == nil {
		return
	}
	select {
	case <-d.exited:
		return
	default:
	}
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.exited:
	case <-time.After(15 * time.Second):
		_ = d.cmd.Process.Kill()
		<-d.exited
	}
	_ = removeTree(filepath.Join(b.shm, "cache-"+d.name))
	_ = removeTree(filepath.Join(b.shm, "tmp-"+d.name))
}

func (b *Bench) stopDaemons() {
	b.mu.Lock()
	ds := b.daemons
	b.daemons = nil
	b.mu.Unlock()
	for _, d := range ds {
		b.stopDaemon(d)
	}
}

// parallel runs f(0..n-1) on workers goroutines and returns the first error.
func parallel(n, workers int, f func(i int) error) error {
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		firstErr error
		next     = make(chan int)
	)
	for range min(workers, max(n, 1)) {
		wg.Go(func() {
			for i := range next {
				if err := f(i); err != nil {
					mu.Lock()
					if firstErr == nil {
						firstErr = err
					}
					mu.Unlock()
				}
			}
		})
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	return firstErr
}

// createNamespaces creates namespaces (outside any timing).
func (b *Bench) createNamespaces(ctx context.Context, names ...string) error {
	return parallel(len(names), 8, func(i int) error {
		err := b.c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: names[i]}})
		if apierrors.IsAlreadyExists(err) {
			return nil
		}
		return err
	})
}

// deleteNamespaces deletes namespaces and waits until they are gone, so that the
// controller-manager's clean-up does not run during the next measurement.
func (b *Bench) deleteNamespaces(ctx context.Context, names ...string) error {
	return deleteNamespacesIn(ctx, b.c, names...)
}

// deleteNamespacesIn is deleteNamespaces in the cluster of c.
func deleteNamespacesIn(ctx context.Context, c client.Client, names ...string) error {
	if err := parallel(len(names), 8, func(i int) error {
		err := c.Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: names[i]}})
		return client.IgnoreNotFound(err)
	}); err != nil {
		return err
	}
	want := map[string]bool{}
	for _, n := range names {
		want[n] = true
	}
	deadline := time.Now().Add(10*time.Minute + time.Duration(len(names))*time.Second)
	for {
		list := &corev1.NamespaceList{}
		if err := c.List(ctx, list); err != nil {
			return err
		}
		left := 0
		for _, ns := range list.Items {
			if want[ns.Name] {
				left++
			}
		}
		if left == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d namespaces still there after deleting them", left)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// deleteTargets deletes the SyncTargets of a workload without their finalizer (the daemon
// is stopped first: the objects go with their namespaces).
func (b *Bench) deleteTargets(ctx context.Context, workload string) error {
	list := &convergev1.SyncTargetList{}
	if err := b.c.List(ctx, list, client.InNamespace(benchNamespace), client.MatchingLabels{workloadLabel: workload}); err != nil {
		return err
	}
	return parallel(len(list.Items), 8, func(i int) error {
		st := &list.Items[i]
		err := b.c.Patch(ctx, st, client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`)))
		if err := client.IgnoreNotFound(err); err != nil {
			return err
		}
		return client.IgnoreNotFound(b.c.Delete(ctx, st))
	})
}

// Run runs the workloads of the configuration in order. On error, the figures measured
// so far stay in Results.
func (b *Bench) Run(ctx context.Context) error {
	if b.cfg.runs(workloadMany) {
		for _, n := range b.cfg.ManyN {
			if err := b.runMany(ctx, n); err != nil {
				return err
			}
		}
	}
	if err := b.runPerN(ctx, workloadOCI, b.runOCI); err != nil {
		return err
	}
	if b.cfg.runs(workloadShards) {
		if err := b.runShards(ctx); err != nil {
			return err
		}
	}
	if b.cfg.runsBigGroup() {
		if err := b.runBigGroup(ctx); err != nil {
			return err
		}
	}
	if b.cfg.runs(workloadFetch) {
		if err := b.runFetch(ctx); err != nil {
			return err
		}
	}
	if err := b.runPerN(ctx, workloadHelm, b.runHelm); err != nil {
		return err
	}
	if err := b.runPerN(ctx, workloadFleet, b.runFleet); err != nil {
		return err
	}
	if b.cfg.runs(workloadPreviews) {
		if err := b.runPreviews(ctx, b.cfg.PreviewN); err != nil {
			return err
		}
	}
	return b.writeProfiles(ctx)
}

// runPerN runs a workload at every N of BENCH_N, when it is configured.
func (b *Bench) runPerN(ctx context.Context, workload string, run func(context.Context, int) error) error {
	if !b.cfg.runs(workload) {
		return nil
	}
	for _, n := range b.cfg.ManyN {
		if err := run(ctx, n); err != nil {
			return err
		}
	}
	return nil
}

// Results returns the figures measured so far.
func (b *Bench) Results() *Results {
	b.res.Finished = time.Now()
	return b.res
}

// notes say how the figures are taken; they go into the JSON.
var notes = []string{
	"Every figure is the median of the repetitions; ratios compare runs of this invocation on this cluster.",
	"Each repetition of many and of the big group runs a fresh `converge serve` (default flags; loopback ports, an empty cache directory and a TMPDIR of its own, both on tmpfs (/dev/shm), as Flux's are).",
	"many: create → all Ready runs from the first SyncTarget create to the last Ready condition seen through a watch; RSS is the daemon's VmHWM.",
	"Peak anonymous RSS is the highest RssAnon sampled every 50 ms: VmHWM also counts the binary's file-backed pages (shared, reclaimable; here mapped in 2 MiB pages, about 76 MiB of an idle daemon's 89 MiB).",
	"big: cold sync runs from the SyncTarget create to Ready at the revision (applied and health-checked); kubectl and the floor only apply. Each run uses a fresh namespace, deleted (and waited for) before the next.",
	"idle: the daemon is made to reconcile big with nothing to do by changing an unrelated annotation (converge.dev/requestedAt would force a full apply); wall time is the daemon's controller_runtime_reconcile_time_seconds; API requests are apiserver_request_total's delta minus the benchmark's own PATCH, the cluster's housekeeping (nodes, leases, endpoints, endpointslices, non-resource URLs) and a background window scaled to the same length; apart, client-go's count of every request the daemon sent (rest_client_requests_total), which no background reaches.",
	"change: push is the commit landing in the served repository; applied is the changed ConfigMap seen with its new value, healthy the SyncTarget Ready at the new revision. The webhook half runs with a 1h poll interval; the polling half pushes at a random moment of the poll cycle.",
	"drift: an Update of a managed ConfigMap by another field manager; restored is the value seen back through a watch.",
	"helm: N podinfo chart SyncTargets, each its own release and namespace; create → all Ready against N targets of the same objects as plain YAML in Git (what `helm install --dry-run=client` renders for each release), their repetitions interleaved, each with its own daemon; idle: one reconcile of every target with nothing to do (an unrelated annotation), client-go's count of what the daemon sent, per target; version bump: a new chart version (Git: a commit and a webhook; repo: spec.chart.version) → all Ready.",
	"fleet: N SyncTargets generated by one SyncTargetSet (a list generator) against N hand-written ones of the same spec, split over two clusters (even targets the benchmark's own, odd ones a second control plane; every target names its cluster by a kubeconfig Secret, the benchmark's own included), the daemon run with --allow-loopback-clusters; the change is the poll interval of every target (the set's template, or each target), timed to all Ready with it.",
	"previews: podinfo (what `helm install --dry-run=client` renders) in the Git repository of a forge on loopback (GitHub's REST API, internal/forgetest), one SyncTargetSet with a pullRequests generator (interval 1h: only webhooks list), each pull request its own commit, ref refs/pull/N/head and namespace. Opened → Ready runs from the pull-request webhook of one new pull request to its preview Ready at its head, against a push → Ready of a plain SyncTarget of the same app (a generic push webhook) in the same daemon; then N pull requests opened at once, one webhook, → all Ready; idle counts what the daemon sent over a window with the N previews Ready, against the same window with N hand-written SyncTargets of the same specs; close is N pull requests closed, one webhook → every preview SyncTarget gone.",
	"Flux runs at its best: every controller with --concurrent equal to converge serve's --concurrency (20) and source-controller's artifact storage and both controllers' TMPDIR on tmpfs (/dev/shm): Flux's tuning guide notes that concurrency pays only with /tmp in RAM. The helm baseline is source-controller and helm-controller with a loopback HelmRepository and one HelmRelease per target.",
	"fetch: sources.Resolve + Cache.Checkout into an empty cache against `git clone --depth 1`, same server, alternating order.",
}
