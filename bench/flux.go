package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/converge-gitops/converge/internal/freeport"
)

// Flux's kinds, as the baseline uses them.
var (
	gitRepositoryGVR = schema.GroupVersionResource{Group: "source.toolkit.fluxcd.io", Version: "v1", Resource: "gitrepositories"}
	kustomizationGVR = schema.GroupVersionResource{Group: "kustomize.toolkit.fluxcd.io", Version: "v1", Resource: "kustomizations"}
)

// flux is Flux's source-controller and one of its appliers (kustomize-controller or
// helm-controller), run as local processes against the benchmark's cluster: Flux's own
// binaries, built from its Go modules by `make flux`.
type flux struct {
	source, applier *daemon
	// storage is source-controller's artifact storage, tmp both controllers' TMPDIR.
	storage, tmp string
}

// fluxConcurrency is --concurrent of every Flux controller: converge serve's default
// --concurrency, so that both reconcile as many objects at once.
const fluxConcurrency = 20

// tmpfsRoot is where the benchmark keeps the files of the daemons on tmpfs: Flux's artifact
// storage and TMPDIR — Flux at its best: its tuning guide notes that concurrency pays only
// with /tmp in RAM — and converge's cache directory and TMPDIR, so that both get the same.
const tmpfsRoot = "/dev/shm"

// fluxBinary is the path of one of Flux's controllers.
func (b *Bench) fluxBinary(name string) string {
	dir := b.cfg.FluxDir
	if !filepath.IsAbs(dir) {
		dir = filepath.Join(b.root, dir)
	}
	return filepath.Join(dir, name)
}

// setupFlux checks that Flux was built and installs its CRDs, once per invocation.
func (b *Bench) setupFlux(ctx context.Context) error {
	for _, name := range []string{"source-controller", "kustomize-controller", "crds"} {
		if _, err := os.Stat(b.fluxBinary(name)); err != nil {
			return fmt.Errorf("the Flux baseline needs %s: run `make flux` (or unset BENCH_BASELINES)", b.fluxBinary(name))
		}
	}
	crds := b.fluxBinary("crds")
	for _, args := range [][]string{
		{"apply", "--server-side", "-f", crds},
		{"wait", "--for=condition=Established", "--timeout=120s", "-f", crds},
	} {
		cmd := exec.CommandContext(ctx, b.kubectl, append(args, "--kubeconfig", b.cluster.Kubeconfig)...)
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("kubectl %s: %v\n%s", args[0], err, out)
		}
	}
	return nil
}

// startFlux starts source-controller and kustomize-controller.
func (b *Bench) startFlux(ctx context.Context, name string) (*flux, error) {
	return b.startFluxWith(ctx, name, "kustomize-controller")
}

// startFluxWith starts source-controller and applier with Flux's default flags, but for
// loopback ports, no leader election, --concurrent=fluxConcurrency and the artifact
// storage and TMPDIR on tmpfs, and waits until both report ready.
func (b *Bench) startFluxWith(ctx context.Context, name, applier string) (*flux, error) {
	var ports [5]int
	for i := range ports {
		p, err := freeport.Port()
		if err != nil {
			return nil, err
		}
		ports[i] = p
	}
	storage, err := os.MkdirTemp(b.shm, "flux-storage-")
	if err != nil {
		return nil, err
	}
	tmp, err := os.MkdirTemp(b.shm, "flux-tmp-")
	if err != nil {
		_ = os.RemoveAll(storage)
		return nil, err
	}
	short := strings.TrimSuffix(applier, "-controller")
	f := &flux{storage: storage, tmp: tmp,
		source: &daemon{name: "flux-source-" + name, log: filepath.Join(b.work, "flux-source-"+name+".log"),
			metricsURL: fmt.Sprintf("http://127.0.0.1:%d/metrics", ports[0]), probeURL: fmt.Sprintf("http://127.0.0.1:%d/readyz", ports[1])},
		applier: &daemon{name: "flux-" + short + "-" + name, log: filepath.Join(b.work, "flux-"+short+"-"+name+".log"),
			metricsURL: fmt.Sprintf("http://127.0.0.1:%d/metrics", ports[2]), probeURL: fmt.Sprintf("http://127.0.0.1:%d/readyz", ports[3])},
	}
	env := []string{"KUBECONFIG=" + b.cluster.Kubeconfig, "TMPDIR=" + tmp}
	common := []string{"--enable-leader-election=false", "--watch-all-namespaces=true", "--log-level=error",
		fmt.Sprintf("--concurrent=%d", fluxConcurrency)}
	sourceArgs := append([]string{
		"--metrics-addr=" + fmt.Sprintf("127.0.0.1:%d", ports[0]),
		"--health-addr=" + fmt.Sprintf("127.0.0.1:%d", ports[1]),
		"--storage-path=" + storage,
		"--storage-addr=" + fmt.Sprintf("127.0.0.1:%d", ports[4]),
		"--storage-adv-addr=" + fmt.Sprintf("127.0.0.1:%d", ports[4]),
	}, common...)
	applierArgs := append([]string{
		"--metrics-addr=" + fmt.Sprintf("127.0.0.1:%d", ports[2]),
		"--health-addr=" + fmt.Sprintf("127.0.0.1:%d", ports[3]),
	}, common...)
	return f, b.spawnFlux(ctx, f, applier, sourceArgs, applierArgs, env)
}

// spawnFlux starts both controllers of f and waits for their readiness; on error, it
// stops what it started.
func (b *Bench) spawnFlux(ctx context.Context, f *flux, applier string, sourceArgs, applierArgs, env []string) error {
	if err := b.spawn(f.source, b.fluxBinary("source-controller"), sourceArgs, env); err != nil {
		_ = removeTree(f.storage)
		_ = removeTree(f.tmp)
		return err
	}
	if err := b.spawn(f.applier, b.fluxBinary(applier), applierArgs, env); err != nil {
		b.stopFlux(f)
		return err
	}
	for _, d := range []*daemon{f.source, f.applier} {
		if err := waitProbe(ctx, d, 90*time.Second); err != nil {
			b.stopFlux(f)
			return err
		}
	}
	return nil
}

// waitProbe waits until a process answers its readiness probe.
func waitProbe(ctx context.Context, d *daemon, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for !httpOK(ctx, d.probeURL) {
		if err := d.running(); err != nil {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s did not become ready in %s%s", d.name, timeout, d.tail())
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	return nil
}

func (b *Bench) stopFlux(f *flux) {
	b.stopDaemon(f.applier)
	b.stopDaemon(f.source)
	_ = removeTree(f.storage)
	_ = removeTree(f.tmp)
}

// running returns an error when either controller stopped on its own.
func (f *flux) running() error {
	return errors.Join(f.source.running(), f.applier.running())
}

// peakRSS is the sum of both controllers' VmHWM: Flux needs both to do what converge does.
func (f *flux) peakRSS() (float64, error) {
	s, err := peakRSS(f.source.pid())
	if err != nil {
		return 0, err
	}
	k, err := peakRSS(f.applier.pid())
	return s + k, err
}

// requests counts the API requests both controllers sent, by method.
func (f *flux) requests(ctx context.Context) (requestCounts, error) {
	out := requestCounts{}
	for _, d := range []*daemon{f.source, f.applier} {
		c, err := d.counters(ctx)
		if err != nil {
			return nil, err
		}
		for method, n := range c.requests {
			out[method] += n
		}
	}
	return out, nil
}

// createGitRepository creates a GitRepository of benchNamespace following main of url.
func (b *Bench) createGitRepository(ctx context.Context, name, url string, interval time.Duration) error {
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "source.toolkit.fluxcd.io/v1", "kind": "GitRepository",
		"metadata": map[string]any{"name": name, "namespace": benchNamespace},
		"spec": map[string]any{
			"url": url, "interval": interval.String(), "timeout": "60s",
			"ref": map[string]any{"branch": "main"},
		},
	}}
	_, err := b.floor.Resource(gitRepositoryGVR).Namespace(benchNamespace).Create(ctx, u, metav1.CreateOptions{})
	return err
}

// kustomization is the Flux equivalent of a SyncTarget of the benchmark: prune, and wait
// for every applied object to be healthy (wait: true), as converge does by default.
func kustomization(name, repo, path string, interval time.Duration) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "kustomize.toolkit.fluxcd.io/v1", "kind": "Kustomization",
		"metadata": map[string]any{"name": name, "namespace": benchNamespace},
		"spec": map[string]any{
			"interval": interval.String(), "path": "./" + path, "prune": true, "wait": true, "timeout": "5m",
			"sourceRef": map[string]any{"kind": "GitRepository", "name": repo},
		},
	}}
}

// fluxReady is true when a Kustomization is Ready at revision for its generation.
func fluxReady(u *unstructured.Unstructured, revision string) bool {
	applied, _, _ := unstructured.NestedString(u.Object, "status", "lastAppliedRevision")
	observed, _, _ := unstructured.NestedInt64(u.Object, "status", "observedGeneration")
	return applied == revision && observed == u.GetGeneration() && fluxCondition(u, "Ready") == "True"
}

// fluxCondition returns the status of a condition of a Flux object, or "".
func fluxCondition(u *unstructured.Unstructured, typ string) string {
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	for _, c := range conds {
		m, ok := c.(map[string]any)
		if ok && m["type"] == typ {
			s, _ := m["status"].(string)
			return s
		}
	}
	return ""
}

// fluxLW lists and watches the Flux objects of one resource in benchNamespace.
func (b *Bench) fluxLW(gvr schema.GroupVersionResource) cache.ListerWatcher {
	ri := b.floor.Resource(gvr).Namespace(benchNamespace)
	return &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			return ri.List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			return ri.Watch(ctx, o)
		},
	}
}

// watchKustomizations waits until cond held for every named Kustomization.
func (b *Bench) watchKustomizations(ctx context.Context, names []string, timeout time.Duration,
	cond func(*unstructured.Unstructured) bool) (*watcher, map[string]*unstructured.Unstructured, error) {
	return b.watchFlux(ctx, kustomizationGVR, names, timeout, cond)
}

// watchFlux waits until cond held for every named Flux object of one resource.
func (b *Bench) watchFlux(ctx context.Context, gvr schema.GroupVersionResource, names []string, timeout time.Duration,
	cond func(*unstructured.Unstructured) bool) (*watcher, map[string]*unstructured.Unstructured, error) {
	want := map[string]bool{}
	for _, n := range names {
		want[n] = true
	}
	done, last := map[string]bool{}, map[string]*unstructured.Unstructured{}
	w, err := startWatch(ctx, b.fluxLW(gvr), &unstructured.Unstructured{}, timeout, func(obj runtime.Object, _ time.Time) bool {
		u, ok := obj.(*unstructured.Unstructured)
		if !ok || !want[u.GetName()] {
			return false
		}
		last[u.GetName()] = u
		if cond(u) {
			done[u.GetName()] = true
		}
		return len(done) == len(want)
	})
	return w, last, err
}

// fluxWaitError says which Flux object was not ready when a wait failed.
func fluxWaitError(err error, last map[string]*unstructured.Unstructured, f *flux) error {
	for name, u := range last {
		if fluxCondition(u, "Ready") != "True" {
			conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
			return fmt.Errorf("%w; e.g. %s %s: %v%s%s", err, u.GetKind(), name, conds, f.source.tail(), f.applier.tail())
		}
	}
	return fmt.Errorf("%w%s%s", err, f.source.tail(), f.applier.tail())
}

// deleteFluxObjects deletes the Kustomizations and GitRepositories of benchNamespace without
// their finalizers (the controllers are stopped first: the objects go with their namespaces).
func (b *Bench) deleteFluxObjects(ctx context.Context) error {
	return b.deleteFluxKinds(ctx, kustomizationGVR, gitRepositoryGVR)
}

// deleteFluxKinds deletes the objects of benchNamespace of each resource, in order,
// without their finalizers.
func (b *Bench) deleteFluxKinds(ctx context.Context, gvrs ...schema.GroupVersionResource) error {
	for _, gvr := range gvrs {
		ri := b.floor.Resource(gvr).Namespace(benchNamespace)
		list, err := ri.List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		if err := parallel(len(list.Items), 8, func(i int) error {
			name := list.Items[i].GetName()
			if _, err := ri.Patch(ctx, name, "application/merge-patch+json", []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{}); err != nil {
				return client.IgnoreNotFound(err)
			}
			return client.IgnoreNotFound(ri.Delete(ctx, name, metav1.DeleteOptions{}))
		}); err != nil {
			return err
		}
	}
	return nil
}

// fluxMany is many's repetition for Flux: one GitRepository for the repository (Flux shares
// a source between Kustomizations, as converge shares a checkout between SyncTargets) and
// one Kustomization per path, all created at once; timed until every one is Ready at
// revision.
func (b *Bench) fluxMany(ctx context.Context, rep, n int, url, revision string) (manyRun, error) {
	f, err := b.startFlux(ctx, fmt.Sprintf("many-%d-%d", n, rep))
	if err != nil {
		return manyRun{}, err
	}
	defer b.stopFlux(f)
	names := make([]string, n)
	for i := range n {
		names[i] = fmt.Sprintf("many-%04d", i)
	}
	r0, err := f.requests(ctx)
	if err != nil {
		return manyRun{}, err
	}
	w, last, err := b.watchKustomizations(ctx, names, 10*time.Minute+time.Duration(n)*time.Second,
		func(u *unstructured.Unstructured) bool { return fluxReady(u, revision) })
	if err != nil {
		return manyRun{}, err
	}
	repo := fmt.Sprintf("many-%d", n)
	start := time.Now()
	if err := b.createGitRepository(ctx, repo, url, time.Minute); err != nil {
		w.stop()
		return manyRun{}, err
	}
	if err := parallel(n, 8, func(i int) error {
		_, err := b.floor.Resource(kustomizationGVR).Namespace(benchNamespace).
			Create(ctx, kustomization(names[i], repo, fmt.Sprintf("many/%04d", i), 10*time.Minute), metav1.CreateOptions{})
		return err
	}); err != nil {
		w.stop()
		return manyRun{}, fmt.Errorf("creating Kustomizations: %w", err)
	}
	at, err := w.wait()
	if err != nil {
		return manyRun{}, fluxWaitError(err, last, f)
	}
	r := manyRun{ready: at.Sub(start)}
	r1, err := f.requests(ctx)
	if err != nil {
		return r, err
	}
	r.daemonSent = r1.minus(r0)
	if r.rss, err = f.peakRSS(); err != nil {
		return r, err
	}
	return r, f.running()
}
