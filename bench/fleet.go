package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
	"github.com/converge-gitops/converge/internal/gittest"
	"github.com/converge-gitops/converge/internal/localcluster"
)

// fleetSet is the SyncTargetSet of the fleet workload.
const fleetSet = "fleet"

// The poll interval of fleet's targets before and after the template change: a spec
// change of every target, nothing to apply.
var (
	fleetInterval1 = time.Hour
	fleetInterval2 = 2 * time.Hour
)

// fleetRun is one repetition of fleet, generated or hand-written.
type fleetRun struct {
	ready, update time.Duration
	// written is when the last SyncTarget was seen changed, from the change; readyAPI and
	// updateAPI what the benchmark's API server served from create and from the change to
	// all Ready (the busiest).
	written             time.Duration
	readyAPI, updateAPI requestCounts
	// readyCPU and updateCPU are the CPU time the machine's processes used from create to
	// all Ready and from the change to all Ready.
	readyCPU, updateCPU cpuUse
	// reconciles and updateReconciles are the daemon's SyncTarget reconciles, cold and
	// from the change.
	reconciles, updateReconciles float64
	// reconcileSeconds is the time the SyncTarget reconciles of the change took, summed;
	// setReconciles and setSeconds the set controller's reconciles of the change.
	reconcileSeconds, setReconciles, setSeconds float64
	// sent is what the daemon's clients sent from create to all Ready, updateSent from
	// the change to all Ready again.
	sent, updateSent requestCounts
	// idleSecretGets and rotatedSecretGets are the GET secrets the API server served per
	// target when every target was asked to reconcile with nothing changed, and again after
	// the kubeconfig Secrets were written anew (same kubeconfig, new resourceVersion).
	idleSecretGets, rotatedSecretGets float64
}

// fleetWay makes the N SyncTargets of fleet: from a SyncTargetSet or by hand.
type fleetWay struct {
	name   string
	create func(ctx context.Context) error
	change func(ctx context.Context) error
}

func fleetName(i int) string { return fmt.Sprintf("fleet-%04d", i) }

func fleetPath(i int) string { return fmt.Sprintf("many/%04d", i) }

// The kubeconfig Secrets (in benchNamespace) of fleet's two clusters: the benchmark's own
// and a second control plane. Every target names one, so that both ways reach both
// clusters the same way.
const (
	fleetLocalSecret  = "fleet-cluster-local"
	fleetRemoteSecret = "fleet-cluster-remote"
)

// fleetCluster is the kubeconfig Secret of the i-th target: even ones deploy to the
// benchmark's cluster, odd ones to the second.
func fleetCluster(i int) string {
	if i%2 == 0 {
		return fleetLocalSecret
	}
	return fleetRemoteSecret
}

// fleetSpec is the spec of a target, as the hand-written baseline writes it and the
// template generates it.
func fleetSpec(url, path, cluster string, interval time.Duration) convergev1.SyncTargetSpec {
	return convergev1.SyncTargetSpec{
		Source:     convergev1.GitSource{URL: url, Ref: convergev1.GitRef{Branch: "main"}, Interval: &metav1.Duration{Duration: interval}},
		KubeConfig: &convergev1.KubeConfigReference{SecretRef: convergev1.KubeConfigSecretReference{Name: cluster}},
		Path:       path, Prune: true,
	}
}

// fleetTemplate is the template of the set: the same spec, its path and cluster from the
// element.
func fleetTemplate(url string, interval time.Duration) (convergev1.SyncTargetTemplate, error) {
	raw, err := json.Marshal(fleetSpec(url, "{{ .path }}", "{{ .cluster }}", interval))
	if err != nil {
		return convergev1.SyncTargetTemplate{}, err
	}
	return convergev1.SyncTargetTemplate{
		Metadata: convergev1.SyncTargetTemplateMeta{Name: "{{ .name }}", Labels: map[string]string{workloadLabel: workloadFleet}},
		Spec:     apiextensionsv1.JSON{Raw: raw},
	}, nil
}

// generatedWay makes the targets with one SyncTargetSet and a list generator of N elements.
func (b *Bench) generatedWay(url string, n int) fleetWay {
	elements := make([]map[string]string, n)
	for i := range n {
		elements[i] = map[string]string{"name": fleetName(i), "path": fleetPath(i), "cluster": fleetCluster(i)}
	}
	key := client.ObjectKey{Namespace: benchNamespace, Name: fleetSet}
	return fleetWay{name: "SyncTargetSet", create: func(ctx context.Context) error {
		tmpl, err := fleetTemplate(url, fleetInterval1)
		if err != nil {
			return err
		}
		return b.c.Create(ctx, &convergev1.SyncTargetSet{
			ObjectMeta: metav1.ObjectMeta{Name: key.Name, Namespace: key.Namespace},
			Spec: convergev1.SyncTargetSetSpec{
				Generators: []convergev1.Generator{{List: &convergev1.ListGenerator{Elements: elements}}},
				Template:   tmpl,
			},
		})
	}, change: func(ctx context.Context) error {
		tmpl, err := fleetTemplate(url, fleetInterval2)
		if err != nil {
			return err
		}
		set := &convergev1.SyncTargetSet{}
		if err := b.c.Get(ctx, key, set); err != nil {
			return err
		}
		patch := client.MergeFrom(set.DeepCopy())
		set.Spec.Template = tmpl
		return b.c.Patch(ctx, set, patch)
	}}
}

// handWrittenWay makes the same targets one by one, and changes each.
func (b *Bench) handWrittenWay(url string, n int) fleetWay {
	return fleetWay{name: "hand-written", create: func(ctx context.Context) error {
		return parallel(n, 8, func(i int) error {
			return b.c.Create(ctx, &convergev1.SyncTarget{
				ObjectMeta: metav1.ObjectMeta{Name: fleetName(i), Namespace: benchNamespace, Labels: map[string]string{workloadLabel: workloadFleet}},
				Spec:       fleetSpec(url, fleetPath(i), fleetCluster(i), fleetInterval1),
			})
		})
	}, change: func(ctx context.Context) error {
		patch := fmt.Appendf(nil, `{"spec":{"source":{"interval":%q}}}`, fleetInterval2.String())
		return parallel(n, 8, func(i int) error {
			st := &convergev1.SyncTarget{ObjectMeta: metav1.ObjectMeta{Name: fleetName(i), Namespace: benchNamespace}}
			return b.c.Patch(ctx, st, client.RawPatch(types.MergePatchType, patch))
		})
	}}
}

// runFleet measures N SyncTargets generated by one SyncTargetSet against N hand-written
// ones of the same shape, split over two clusters, alternating in every repetition.
func (b *Bench) runFleet(ctx context.Context, n int) error {
	if _, err := b.fleetClusters(ctx); err != nil {
		return err
	}
	repo := gittest.NewRepo(b.tb, b.gitRoot, fmt.Sprintf("fleet-%d", n))
	revision := "main@sha1:" + repo.Commit(b.tb, "main", manyFiles(n))
	url := b.git.RepoURL(repo)
	ways := []fleetWay{b.handWrittenWay(url, n), b.generatedWay(url, n)}
	runs := map[string][]fleetRun{}
	for rep := range b.cfg.Reps {
		// The two ways take turns going first: a cluster that slows down over the
		// repetitions does not always fall on the same one.
		order := ways
		if rep%2 == 1 {
			order = []fleetWay{ways[1], ways[0]}
		}
		for _, w := range order {
			r, err := b.fleetOnce(ctx, rep, n, w, revision)
			if err != nil {
				return fmt.Errorf("fleet N=%d (%s) rep %d: %w", n, w.name, rep+1, err)
			}
			b.logf("fleet N=%d (%s) rep %d/%d: all Ready in %s, %.1f reconciles and %.1f API requests sent per target, API server: %s, CPU: %s; change → all written in %s, all Ready in %s, %.1f reconciles (%.0f ms each) and %.1f requests per target, %.0f set reconciles (%.0f ms each); API server (change): %s; CPU (change): %s",
				n, w.name, rep+1, b.cfg.Reps, r.ready.Round(time.Millisecond), r.reconciles/float64(n), r.sent.total()/float64(n), r.readyAPI.top(12), r.readyCPU,
				r.written.Round(time.Millisecond), r.update.Round(time.Millisecond), r.updateReconciles/float64(n), 1000*r.reconcileSeconds/max(r.updateReconciles, 1),
				r.updateSent.total()/float64(n), r.setReconciles, 1000*r.setSeconds/max(r.setReconciles, 1), r.updateAPI.top(12), r.updateCPU)
			b.logf("fleet N=%d (%s) rep %d/%d: GET secrets per target: %.2f in the change, %.2f asked to reconcile with nothing new, %.2f after the kubeconfig Secrets were written anew",
				n, w.name, rep+1, b.cfg.Reps, r.updateAPI["GET secrets"]/float64(n), r.idleSecretGets, r.rotatedSecretGets)
			runs[w.name] = append(runs[w.name], r)
			if err := b.cleanFleet(ctx, n); err != nil {
				return err
			}
		}
	}
	b.recordFleet(n, runs["SyncTargetSet"], runs["hand-written"])
	return nil
}

func (b *Bench) recordFleet(n int, set, hand []fleetRun) {
	fig := func(runs []fleetRun, f func(fleetRun) float64) []float64 {
		out := make([]float64, len(runs))
		for i, r := range runs {
			out[i] = f(r)
		}
		return out
	}
	ready := func(r fleetRun) float64 { return r.ready.Seconds() }
	update := func(r fleetRun) float64 { return r.update.Seconds() }
	sent := func(r fleetRun) float64 { return r.sent.total() / float64(n) }
	updateSent := func(r fleetRun) float64 { return r.updateSent.total() / float64(n) }
	w, base := fmt.Sprintf("fleet N=%d", n), fmt.Sprintf("%d hand-written", n)
	overhead := &Target{Text: "≤ 1.1× hand-written", Max: 1.1, OnRatio: true}
	b.res.add(w, "create set → all Ready", Seconds, fig(set, ready), base, fig(hand, ready), overhead)
	b.res.add(w, "template change → all Ready", Seconds, fig(set, update), base, fig(hand, update), overhead)
	b.res.add(w, "API requests sent per target (cold)", Requests, fig(set, sent), base, fig(hand, sent), nil)
	b.res.add(w, "API requests sent per target (change)", Requests, fig(set, updateSent), base, fig(hand, updateSent), nil)
	// A remote cluster's kubeconfig Secret is read again only when it changed.
	change := func(r fleetRun) float64 { return r.updateAPI["GET secrets"] / float64(n) }
	idle := func(r fleetRun) float64 { return r.idleSecretGets }
	rotated := func(r fleetRun) float64 { return r.rotatedSecretGets }
	b.res.add(w, "GET secrets per target (change)", Requests, fig(set, change), base, fig(hand, change), &Target{Text: "0", Max: 0})
	b.res.add(w, "GET secrets per target (reconcile, nothing new)", Requests, fig(set, idle), base, fig(hand, idle), &Target{Text: "0", Max: 0})
	b.res.add(w, "GET secrets per target (kubeconfig Secret written)", Requests, fig(set, rotated), base, fig(hand, rotated),
		&Target{Text: "≤ 1", Max: 1})
	// What the machine's processes (API servers, etcd, the daemon, git) spent: less noisy
	// than the time on a machine whose speed varies from one repetition to the next.
	b.res.add(w, "CPU used, create → all Ready", Seconds, fig(set, func(r fleetRun) float64 { return r.readyCPU.total() }),
		base, fig(hand, func(r fleetRun) float64 { return r.readyCPU.total() }), nil)
	b.res.add(w, "CPU used, change → all Ready", Seconds, fig(set, func(r fleetRun) float64 { return r.updateCPU.total() }),
		base, fig(hand, func(r fleetRun) float64 { return r.updateCPU.total() }), nil)
}

// idleCores is the CPU the machine may be using when a timed phase of fleet starts.
const idleCores = 0.3

// waitIdle waits, IdleWait at most, for the machine to use less than idleCores, and says
// when it did not.
func (b *Bench) waitIdle(ctx context.Context) error {
	if b.cfg.IdleWait <= 0 {
		return nil
	}
	use, err := waitIdle(ctx, idleCores, b.cfg.IdleWait)
	if err == nil && use >= idleCores {
		b.logf("the machine still used %.2f cores after %s; timing anyway", use, b.cfg.IdleWait)
	}
	return err
}

// fleetOnce is one repetition of one way: create → all Ready, change → all Ready.
func (b *Bench) fleetOnce(ctx context.Context, rep, n int, w fleetWay, revision string) (fleetRun, error) {
	var r fleetRun
	d, err := b.startDaemon(ctx, fmt.Sprintf("fleet-%d-%d-%s", n, rep, w.name), "--allow-loopback-clusters")
	if err != nil {
		return r, err
	}
	defer b.stopDaemon(d)
	prof := b.startProfile(d, fmt.Sprintf("fleet N=%d (%s)", n, w.name))
	names := make([]string, n)
	for i := range n {
		names[i] = fleetName(i)
	}
	timeout := 10*time.Minute + time.Duration(n)*time.Second
	at := func(interval time.Duration) func(*convergev1.SyncTarget) bool {
		return func(st *convergev1.SyncTarget) bool {
			return st.Spec.Source.Interval != nil && st.Spec.Source.Interval.Duration == interval && readyAt(st, revision)
		}
	}
	if err := b.waitIdle(ctx); err != nil {
		return r, err
	}
	c0, err := d.counters(ctx)
	if err != nil {
		return r, err
	}
	r.readyAPI, r.readyCPU, err = b.measure(ctx, fmt.Sprintf("fleet N=%d (%s) create rep %d", n, w.name, rep+1), max(6*time.Second, time.Duration(n)*50*time.Millisecond), func() (err error) {
		r.ready, err = b.timeTargets(ctx, d, names, timeout, at(fleetInterval1), func() error { return w.create(ctx) })
		return err
	})
	if err != nil {
		return r, err
	}
	if err := d.waitQuiet(ctx, time.Second, 3*time.Minute); err != nil {
		return r, err
	}
	if err := b.waitIdle(ctx); err != nil {
		return r, err
	}
	c1, err := d.counters(ctx)
	if err != nil {
		return r, err
	}
	// When each SyncTarget was seen changed, before it was Ready again (the watch's one
	// goroutine calls the condition).
	written := map[string]time.Time{}
	ready2 := at(fleetInterval2)
	changed := func(st *convergev1.SyncTarget) bool {
		if _, ok := written[st.Name]; !ok && st.Spec.Source.Interval != nil && st.Spec.Source.Interval.Duration == fleetInterval2 {
			written[st.Name] = time.Now()
		}
		return ready2(st)
	}
	var changeStart time.Time
	r.updateAPI, r.updateCPU, err = b.measure(ctx, fmt.Sprintf("fleet N=%d (%s) change rep %d", n, w.name, rep+1), max(3*time.Second, time.Duration(n)*20*time.Millisecond), func() (err error) {
		changeStart = time.Now()
		r.update, err = b.timeTargets(ctx, d, names, timeout, changed, func() error { return w.change(ctx) })
		return err
	})
	if err != nil {
		return r, err
	}
	for _, t := range written {
		r.written = max(r.written, t.Sub(changeStart))
	}
	c2, err := d.counters(ctx)
	if err != nil {
		return r, err
	}
	if r.idleSecretGets, r.rotatedSecretGets, err = b.fleetSecretReads(ctx, d, names); err != nil {
		return r, err
	}
	r.sent, r.updateSent = c1.requests.minus(c0.requests), c2.requests.minus(c1.requests)
	r.reconciles, r.updateReconciles = c1.reconciles-c0.reconciles, c2.reconciles-c1.reconciles
	r.reconcileSeconds = c2.reconcileSeconds - c1.reconcileSeconds
	r.setReconciles, r.setSeconds = c2.setReconciles-c1.setReconciles, c2.setSeconds-c1.setSeconds
	if err := b.finishProfile(prof); err != nil {
		return r, err
	}
	if err := d.running(); err != nil {
		return r, err
	}
	return r, b.checkFleet(ctx, n)
}

// cleanFleet deletes the set (without its finalizers), its targets and their namespaces.
func (b *Bench) cleanFleet(ctx context.Context, n int) error {
	set := &convergev1.SyncTargetSet{ObjectMeta: metav1.ObjectMeta{Name: fleetSet, Namespace: benchNamespace}}
	err := b.c.Patch(ctx, set, client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`)))
	if err := client.IgnoreNotFound(err); err != nil {
		return err
	}
	if err := client.IgnoreNotFound(b.c.Delete(ctx, set)); err != nil {
		return err
	}
	if err := b.deleteTargets(ctx, workloadFleet); err != nil {
		return err
	}
	local, remote := fleetNamespaces(n)
	errs := make(chan error, 1)
	go func() { errs <- deleteNamespacesIn(ctx, b.fleet.c, remote...) }()
	return errors.Join(b.deleteNamespaces(ctx, local...), <-errs)
}

// checkFleet checks that the namespace of every target holds its objects in its cluster.
func (b *Bench) checkFleet(ctx context.Context, n int) error {
	local, remote := fleetNamespaces(n)
	if err := checkManyIn(ctx, b.c, local); err != nil {
		return fmt.Errorf("the benchmark's cluster: %w", err)
	}
	if err := checkManyIn(ctx, b.fleet.c, remote); err != nil {
		return fmt.Errorf("the second cluster: %w", err)
	}
	return nil
}

// fleetNamespaces are the namespaces of the targets, by cluster.
func fleetNamespaces(n int) (local, remote []string) {
	for i := range n {
		if fleetCluster(i) == fleetLocalSecret {
			local = append(local, manyNamespace(i))
		} else {
			remote = append(remote, manyNamespace(i))
		}
	}
	return local, remote
}

// fleetClusters is the second cluster of fleet.
type fleetClusters struct {
	cluster *localcluster.Cluster
	// c reads and cleans the second cluster.
	c client.Client
}

// fleetClusters starts, on its first call, a second control plane (with the
// controller-manager, for Deployments' status and namespace deletion; no nodes), and writes
// the kubeconfig Secrets of both clusters.
func (b *Bench) fleetClusters(ctx context.Context) (*fleetClusters, error) {
	if b.fleet != nil {
		return b.fleet, nil
	}
	started := time.Now()
	binDir, err := localcluster.BinDir()
	if err != nil {
		return nil, err
	}
	remote, err := localcluster.Start(ctx, localcluster.Options{BinDir: binDir, Workloads: true})
	if err != nil {
		return nil, fmt.Errorf("starting fleet's second cluster: %w", err)
	}
	b.tb.Cleanup(func() {
		// Its daemons go first: they talk to it.
		b.stopDaemons()
		if err := remote.Stop(); err != nil {
			b.logf("stopping fleet's second cluster: %v", err)
		}
	})
	unlimited := rest.CopyConfig(remote.Config)
	unlimited.QPS, unlimited.Burst = -1, 0
	rc, err := client.New(unlimited, client.Options{Scheme: b.c.Scheme()})
	if err != nil {
		return nil, err
	}
	for name, cl := range map[string]*localcluster.Cluster{fleetLocalSecret: b.cluster, fleetRemoteSecret: remote} {
		kubeconfig, err := cl.KubeconfigBytes()
		if err != nil {
			return nil, err
		}
		if err := b.c.Create(ctx, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: benchNamespace},
			Data:       map[string][]byte{"value": kubeconfig},
		}); err != nil {
			return nil, err
		}
	}
	b.fleet = &fleetClusters{cluster: remote, c: rc}
	b.logf("started fleet's second cluster in %s", time.Since(started).Round(100*time.Millisecond))
	return b.fleet, nil
}

// measure runs phase, which times itself, and returns what it cost: the requests the
// benchmark's API server served (the busiest) and the CPU the machine's processes used; with
// BENCH_PROFILE, the API server is CPU-profiled for window from its start, as name. The
// counts are read as the phase ends, before the profile is waited for.
func (b *Bench) measure(ctx context.Context, name string, window time.Duration, phase func() error) (requestCounts, cpuUse, error) {
	api0, err := apiserverRequests(ctx, b.cs)
	if err != nil {
		return nil, nil, err
	}
	cpu0, err := readCPUTimes()
	if err != nil {
		return nil, nil, err
	}
	prof := b.profileAPIServer(ctx, name, window)
	if err := phase(); err != nil {
		return nil, nil, err
	}
	cpu1, err := readCPUTimes()
	if err != nil {
		return nil, nil, err
	}
	api1, err := apiserverRequests(ctx, b.cs)
	if err != nil {
		return nil, nil, err
	}
	return api1.minus(api0), cpu1.since(cpu0), prof()
}

// fleetSecretReads asks every target to reconcile with nothing new, then writes both
// kubeconfig Secrets anew (the same kubeconfig: a new resourceVersion) and asks again, and
// returns the GET secrets the API server served per target in each.
func (b *Bench) fleetSecretReads(ctx context.Context, d *daemon, names []string) (idle, rotated float64, err error) {
	// ask counts from before first (the Secrets written, which wakes the targets at once)
	// to the end of the reconciles asked.
	ask := func(tag string, first func() error) (float64, error) {
		api0, err := apiserverRequests(ctx, b.cs)
		if err != nil {
			return 0, err
		}
		if err := first(); err != nil {
			return 0, err
		}
		value := tag + "-" + time.Now().UTC().Format(time.RFC3339Nano)
		handled := func(st *convergev1.SyncTarget) bool { return st.Status.LastHandledReconcileAt == value }
		patch := fmt.Appendf(nil, `{"metadata":{"annotations":{%q:%q}}}`, convergev1.RequestedAtAnnotation, value)
		if _, err := b.timeTargets(ctx, d, names, 5*time.Minute, handled, func() error {
			return parallel(len(names), 8, func(i int) error {
				st := &convergev1.SyncTarget{ObjectMeta: metav1.ObjectMeta{Name: names[i], Namespace: benchNamespace}}
				return b.c.Patch(ctx, st, client.RawPatch(types.MergePatchType, patch))
			})
		}); err != nil {
			return 0, fmt.Errorf("reconciles asked (%s): %w", tag, err)
		}
		if err := d.waitQuiet(ctx, time.Second, 3*time.Minute); err != nil {
			return 0, err
		}
		api1, err := apiserverRequests(ctx, b.cs)
		if err != nil {
			return 0, err
		}
		return api1.minus(api0)["GET secrets"] / float64(len(names)), nil
	}
	if idle, err = ask("idle", func() error { return nil }); err != nil {
		return 0, 0, err
	}
	rotated, err = ask("rotated", func() error {
		written := fmt.Appendf(nil, `{"metadata":{"annotations":{"bench.converge.dev/written":%q}}}`, time.Now().UTC().Format(time.RFC3339Nano))
		for _, name := range []string{fleetLocalSecret, fleetRemoteSecret} {
			s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: benchNamespace}}
			if err := b.c.Patch(ctx, s, client.RawPatch(types.MergePatchType, written)); err != nil {
				return err
			}
		}
		return nil
	})
	return idle, rotated, err
}

// profileAPIServer takes, with BENCH_PROFILE, a CPU profile of the benchmark's API server
// for the window from now, into bin/bench/; the function returned waits for it.
func (b *Bench) profileAPIServer(ctx context.Context, name string, window time.Duration) func() error {
	if !b.cfg.Profile {
		return func() error { return nil }
	}
	done := make(chan error, 1)
	go func() {
		raw, err := b.cs.CoreV1().RESTClient().Get().AbsPath("/debug/pprof/profile").
			Param("seconds", fmt.Sprint(int(window.Seconds()))).DoRaw(ctx)
		if err != nil {
			done <- err
			return
		}
		path, err := b.profilePath(sanitize(name) + ".apiserver.cpu.pprof")
		if err == nil {
			err = os.WriteFile(path, raw, 0o644)
		}
		done <- err
	}()
	return func() error { return <-done }
}
