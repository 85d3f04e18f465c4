package main

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
	"github.com/converge-gitops/converge/internal/gittest"
)

const (
	bigTarget = "big"
	// pokeAnnotation is an unrelated annotation whose change makes the daemon reconcile
	// without anything to do, as sync's TestIdleReconcileIsCheap asks for one.
	pokeAnnotation = "bench.converge.dev/poke"
)

// bigSamples are the figures of the big group, one per repetition.
type bigSamples struct {
	cold, kubectl, floor     []time.Duration
	idleWall, idleRequests   []float64
	idleSent                 []float64
	idle                     []idleSample
	hookApplied, hookHealthy []time.Duration
	pollApplied, pollHealthy []time.Duration
	drift                    []time.Duration
	rss, anon                []float64
}

// bigGroup is the state shared by the repetitions.
type bigGroup struct {
	repo     *gittest.Repo
	url      string
	yamlPath string
	objects  []*unstructured.Unstructured
	s        bigSamples
	fs       fluxSamples
}

// runBigGroup runs big (cold sync next to kubectl and the floor) and, on big's SyncTarget
// once it is Ready, idle, change and drift. Each repetition has a daemon of its own, started
// with an empty cache.
func (b *Bench) runBigGroup(ctx context.Context) error {
	files := bigFiles(b.cfg.BigConfigMaps, b.cfg.BigDeployments)
	g := &bigGroup{repo: gittest.NewRepo(b.tb, b.gitRoot, "big")}
	g.repo.Commit(b.tb, "main", files)
	g.url = b.git.RepoURL(g.repo)
	rendered := renderedBig(files)
	g.yamlPath = filepath.Join(b.work, "big.yaml")
	if err := os.WriteFile(g.yamlPath, []byte(rendered), 0o644); err != nil {
		return err
	}
	var err error
	if g.objects, err = decodeObjects(rendered); err != nil {
		return err
	}

	for rep := range b.cfg.Reps {
		phases := []string{"converge"}
		if b.cfg.runs(workloadBig) {
			// Rotate the order, so that none of the three always runs first.
			phases = []string{"converge", "kubectl", "floor"}
			k := rep % len(phases)
			phases = append(phases[k:], phases[:k]...)
		}
		if b.cfg.flux() {
			phases = append(phases, "flux")
		}
		for _, p := range phases {
			var err error
			switch p {
			case "converge":
				err = b.bigConverge(ctx, g, rep)
			case "kubectl":
				err = b.bigKubectl(ctx, g, rep)
			case "floor":
				err = b.bigFloor(ctx, g, rep)
			case "flux":
				err = b.bigFlux(ctx, g, rep)
			}
			if err != nil {
				return fmt.Errorf("big rep %d (%s): %w", rep+1, p, err)
			}
		}
	}
	b.recordBig(&g.s)
	b.recordBigFlux(&g.fs)
	return nil
}

func (b *Bench) recordBig(s *bigSamples) {
	objs := b.cfg.BigConfigMaps + b.cfg.BigDeployments
	// The default big and big ×10 (10 000 ConfigMaps, 1 000 Deployments) have targets.
	defaultSize := b.cfg.BigConfigMaps == 1000 && b.cfg.BigDeployments == 100
	tenfold := b.cfg.BigConfigMaps == 10_000 && b.cfg.BigDeployments == 1000
	if b.cfg.runs(workloadBig) {
		cold := fmt.Sprintf("cold sync → Ready (%d objects)", objs)
		var floorTarget, readyTarget *Target
		switch {
		case defaultSize:
			floorTarget, readyTarget = &Target{Text: "≤ 1.1× floor", Max: 1.1, OnRatio: true}, &Target{Text: "≤ 4 s", Max: 4}
		case tenfold:
			floorTarget = &Target{Text: "≤ 1.2× floor", Max: 1.2, OnRatio: true}
		}
		b.res.add(workloadBig, cold, Seconds, seconds(s.cold), "", nil, readyTarget)
		b.res.add(workloadBig, cold, Seconds, seconds(s.cold),
			"kubectl apply --server-side", seconds(s.kubectl), &Target{Text: "≤ 1.0× kubectl", Max: 1.0, OnRatio: true})
		b.res.add(workloadBig, cold, Seconds, seconds(s.cold),
			fmt.Sprintf("SSA floor (%d goroutines)", b.cfg.FloorConcurrency), seconds(s.floor), floorTarget)
	}
	if b.cfg.runs(workloadIdle) {
		wallTarget, reqTarget := &Target{Text: "≤ 100 ms", Max: 0.1}, &Target{Text: "≤ 10", Max: 10}
		if tenfold {
			wallTarget, reqTarget = &Target{Text: "≤ 200 ms", Max: 0.2}, &Target{Text: "≤ 5", Max: 5}
		}
		b.res.add(workloadIdle, "no-op reconcile of big: wall time", Seconds, s.idleWall, "", nil, wallTarget)
		r := b.res.add(workloadIdle, "no-op reconcile of big: API requests (apiserver Δ)", Requests, s.idleRequests, "", nil, reqTarget)
		r.Detail = s.idle
		b.res.add(workloadIdle, "no-op reconcile of big: requests the daemon sent", Requests, s.idleSent, "", nil, reqTarget)
	}
	if b.cfg.runs(workloadChange) {
		poll := fmt.Sprintf("poll %ds", b.cfg.PollIntervalSeconds)
		b.res.add(workloadChange, "push → applied (webhook)", Seconds, seconds(s.hookApplied), "", nil, &Target{Text: "≤ 1 s", Max: 1})
		b.res.add(workloadChange, "push → healthy (webhook)", Seconds, seconds(s.hookHealthy), "", nil, &Target{Text: "≤ 500 ms", Max: 0.5})
		b.res.add(workloadChange, "push → applied ("+poll+")", Seconds, seconds(s.pollApplied), "", nil, nil)
		b.res.add(workloadChange, "push → healthy ("+poll+")", Seconds, seconds(s.pollHealthy), "", nil, nil)
	}
	if b.cfg.runs(workloadDrift) {
		b.res.add(workloadDrift, "edit → restored", Seconds, seconds(s.drift), "", nil, &Target{Text: "≤ 2 s", Max: 2})
	}
	b.res.add(bigTarget, "daemon peak RSS (VmHWM), big group", MiB, s.rss, "", nil, nil)
	b.res.add(bigTarget, "daemon peak anonymous RSS (sampled), big group", MiB, s.anon, "", nil, nil)
}

// recordBigFlux puts Flux's figures of the big group beside converge's.
func (b *Bench) recordBigFlux(s *fluxSamples) {
	if !b.cfg.flux() {
		return
	}
	objs := b.cfg.BigConfigMaps + b.cfg.BigDeployments
	b.res.addFlux(workloadBig, fmt.Sprintf("cold sync → Ready (%d objects)", objs), seconds(s.cold))
	b.res.addFlux(workloadIdle, "no-op reconcile of big: wall time", s.idleWall)
	b.res.addFlux(workloadIdle, "no-op reconcile of big: requests the daemon sent", s.idleSent)
	poll := fmt.Sprintf("poll %ds", b.cfg.PollIntervalSeconds)
	b.res.addFlux(workloadChange, "push → applied ("+poll+")", seconds(s.pollApplied))
	b.res.addFlux(workloadChange, "push → healthy ("+poll+")", seconds(s.pollHealthy))
	b.res.addFlux(workloadDrift, "edit → restored", seconds(s.drift))
	b.res.addFlux(bigTarget, "daemon peak RSS (VmHWM), big group", s.rss)
}

// bigConverge creates big's SyncTarget in a fresh namespace and times it to Ready, then runs
// idle, change and drift on it.
func (b *Bench) bigConverge(ctx context.Context, g *bigGroup, rep int) error {
	ns := fmt.Sprintf("bench-big-%d", rep)
	if err := b.createNamespaces(ctx, ns); err != nil {
		return err
	}
	d, err := b.startDaemon(ctx, fmt.Sprintf("big-%d", rep))
	if err != nil {
		return err
	}
	defer b.stopDaemon(d)

	revision := "main@sha1:" + g.repo.Head(b.tb, "main")
	prof := b.startProfile(d, workloadBig)
	tw, err := b.watchTargetsReady(ctx, []string{bigTarget}, revision, 15*time.Minute)
	if err != nil {
		return err
	}
	start := time.Now()
	st := &convergev1.SyncTarget{
		ObjectMeta: metav1.ObjectMeta{Name: bigTarget, Namespace: benchNamespace, Labels: map[string]string{workloadLabel: bigTarget}},
		Spec: convergev1.SyncTargetSpec{
			Source: convergev1.GitSource{
				URL: g.url, Ref: convergev1.GitRef{Branch: "main"},
				// Webhooks announce changes here; the poll is the fallback.
				Interval:         &metav1.Duration{Duration: time.Hour},
				WebhookSecretRef: &convergev1.LocalObjectReference{Name: webhookSecret},
			},
			Path:            "big",
			TargetNamespace: ns,
			Prune:           true,
		},
	}
	if err := b.c.Create(ctx, st); err != nil {
		tw.stop()
		return err
	}
	done, err := tw.wait()
	if err != nil {
		return fmt.Errorf("%w%s", err, d.tail())
	}
	cold := done.Sub(start)
	if err := b.finishProfile(prof); err != nil {
		return err
	}
	if err := b.checkBig(ctx, ns); err != nil {
		return err
	}
	g.s.cold = append(g.s.cold, cold)
	phases, err := d.phases(ctx)
	if err != nil {
		return err
	}
	b.logf("big rep %d/%d: converge cold sync → Ready in %s (%s)", rep+1, b.cfg.Reps, cold.Round(time.Millisecond), phases)

	return b.bigConvergeAfter(ctx, d, g, ns, rep)
}

// bigConvergeAfter runs idle, change and drift on converge's big SyncTarget, each profiled
// with BENCH_PROFILE, then stops the daemon and cleans up.
func (b *Bench) bigConvergeAfter(ctx context.Context, d *daemon, g *bigGroup, ns string, rep int) error {
	if b.cfg.runs(workloadIdle) {
		prof := b.startProfile(d, workloadIdle)
		s, err := b.measureIdle(ctx, d, rep)
		if err != nil {
			return fmt.Errorf("idle: %w", err)
		}
		if err := b.finishProfile(prof); err != nil {
			return err
		}
		g.s.idle = append(g.s.idle, s)
		g.s.idleWall = append(g.s.idleWall, s.ReconcileSeconds)
		g.s.idleRequests = append(g.s.idleRequests, s.Requests)
		g.s.idleSent = append(g.s.idleSent, s.DaemonRequests)
		b.logf("idle rep %d/%d: no-op reconcile %.0f ms (daemon), %.0f API requests (apiserver Δ: %s; background %s), %.0f sent by the daemon (%s); poke → done %.0f ms",
			rep+1, b.cfg.Reps, s.ReconcileSeconds*1000, s.Requests, s.Window, s.Background, s.DaemonRequests, s.DaemonSent, s.PokeToDoneSeconds*1000)
	}
	if b.cfg.runs(workloadChange) {
		prof := b.startProfile(d, workloadChange)
		before, err := d.phases(ctx)
		if err != nil {
			return err
		}
		requestsBefore, err := apiserverRequests(ctx, b.cs)
		if err != nil {
			return err
		}
		applied, healthy, err := b.measureChange(ctx, d, g, ns, fmt.Sprintf("rep%d-webhook", rep), true)
		if err != nil {
			return fmt.Errorf("change (webhook): %w", err)
		}
		after, err := d.phases(ctx)
		if err != nil {
			return err
		}
		requestsAfter, err := apiserverRequests(ctx, b.cs)
		if err != nil {
			return err
		}
		g.s.hookApplied, g.s.hookHealthy = append(g.s.hookApplied, applied), append(g.s.hookHealthy, healthy)
		// The requests include the benchmark's own (the commit's watches, the metrics reads)
		// and the cluster's background.
		b.logf("change rep %d/%d (webhook): push → applied %s, → healthy %s (%s; API server requests: %s)", rep+1, b.cfg.Reps,
			applied.Round(time.Millisecond), healthy.Round(time.Millisecond), after.since(before), requestsAfter.minus(requestsBefore))

		if err := b.setInterval(ctx, d, time.Duration(b.cfg.PollIntervalSeconds)*time.Second); err != nil {
			return fmt.Errorf("change (poll): %w", err)
		}
		applied, healthy, err = b.measureChange(ctx, d, g, ns, fmt.Sprintf("rep%d-poll", rep), false)
		if err != nil {
			return fmt.Errorf("change (poll): %w", err)
		}
		g.s.pollApplied, g.s.pollHealthy = append(g.s.pollApplied, applied), append(g.s.pollHealthy, healthy)
		if err := b.finishProfile(prof); err != nil {
			return err
		}
		b.logf("change rep %d/%d (poll %ds): push → applied %s, → healthy %s", rep+1, b.cfg.Reps, b.cfg.PollIntervalSeconds,
			applied.Round(time.Millisecond), healthy.Round(time.Millisecond))
	}
	if b.cfg.runs(workloadDrift) {
		prof := b.startProfile(d, workloadDrift)
		took, err := b.measureDrift(ctx, d, ns)
		if err != nil {
			return fmt.Errorf("drift: %w", err)
		}
		if err := b.finishProfile(prof); err != nil {
			return err
		}
		g.s.drift = append(g.s.drift, took)
		b.logf("drift rep %d/%d: edit → restored %s", rep+1, b.cfg.Reps, took.Round(time.Millisecond))
	}
	if err := d.running(); err != nil {
		return err
	}
	rss, err := peakRSS(d.pid())
	if err != nil {
		return err
	}
	g.s.rss = append(g.s.rss, rss)
	g.s.anon = append(g.s.anon, d.peakAnonMiB())

	b.stopDaemon(d)
	if err := b.deleteTargets(ctx, bigTarget); err != nil {
		return err
	}
	return b.deleteNamespaces(ctx, ns)
}

// checkBig checks that a namespace holds all of big.
func (b *Bench) checkBig(ctx context.Context, ns string) error {
	cms := &corev1.ConfigMapList{}
	if err := b.c.List(ctx, cms, client.InNamespace(ns), client.MatchingLabels{"app.kubernetes.io/part-of": "converge-bench"}); err != nil {
		return err
	}
	deps := &appsv1.DeploymentList{}
	if err := b.c.List(ctx, deps, client.InNamespace(ns)); err != nil {
		return err
	}
	if len(cms.Items) != b.cfg.BigConfigMaps || len(deps.Items) != b.cfg.BigDeployments {
		return fmt.Errorf("namespace %s holds %d ConfigMaps and %d Deployments, want %d and %d",
			ns, len(cms.Items), len(deps.Items), b.cfg.BigConfigMaps, b.cfg.BigDeployments)
	}
	return nil
}

// bigKubectl times `kubectl apply --server-side` of big's rendered YAML into a fresh namespace.
func (b *Bench) bigKubectl(ctx context.Context, g *bigGroup, rep int) error {
	ns := fmt.Sprintf("bench-big-kubectl-%d", rep)
	if err := b.createNamespaces(ctx, ns); err != nil {
		return err
	}
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, b.kubectl, "--kubeconfig", b.cluster.Kubeconfig,
		"apply", "--server-side", "--namespace", ns, "--filename", g.yamlPath)
	cmd.Stdout, cmd.Stderr = &out, &out
	start := time.Now()
	err := cmd.Run()
	took := time.Since(start)
	if err != nil {
		return fmt.Errorf("kubectl apply --server-side: %v: %s", err, tailString(out.String(), 2000))
	}
	if err := b.checkBig(ctx, ns); err != nil {
		return err
	}
	g.s.kubectl = append(g.s.kubectl, took)
	b.logf("big rep %d/%d: kubectl apply --server-side in %s", rep+1, b.cfg.Reps, took.Round(time.Millisecond))
	return b.deleteNamespaces(ctx, ns)
}

// bigFloor times the floor: concurrent server-side-apply PATCHes, one per object, with no
// client-side rate limit, into a fresh namespace.
func (b *Bench) bigFloor(ctx context.Context, g *bigGroup, rep int) error {
	ns := fmt.Sprintf("bench-big-floor-%d", rep)
	if err := b.createNamespaces(ctx, ns); err != nil {
		return err
	}
	objs := make([]*unstructured.Unstructured, len(g.objects))
	for i, o := range g.objects {
		objs[i] = o.DeepCopy()
		objs[i].SetNamespace(ns)
	}
	start := time.Now()
	err := parallel(len(objs), b.cfg.FloorConcurrency, func(i int) error {
		o := objs[i]
		gvr, err := resourceOf(o.GroupVersionKind())
		if err != nil {
			return err
		}
		_, err = b.floor.Resource(gvr).Namespace(ns).Apply(ctx, o.GetName(), o,
			metav1.ApplyOptions{FieldManager: "bench-floor", Force: true})
		return err
	})
	took := time.Since(start)
	if err != nil {
		return fmt.Errorf("floor: %w", err)
	}
	if err := b.checkBig(ctx, ns); err != nil {
		return err
	}
	g.s.floor = append(g.s.floor, took)
	b.logf("big rep %d/%d: SSA floor (%d goroutines) in %s", rep+1, b.cfg.Reps, b.cfg.FloorConcurrency, took.Round(time.Millisecond))
	return b.deleteNamespaces(ctx, ns)
}

// resourceOf maps the kinds of big to their resources.
func resourceOf(gvk schema.GroupVersionKind) (schema.GroupVersionResource, error) {
	switch gvk.GroupKind() {
	case schema.GroupKind{Kind: "ConfigMap"}:
		return corev1.SchemeGroupVersion.WithResource("configmaps"), nil
	case schema.GroupKind{Group: "apps", Kind: "Deployment"}:
		return appsv1.SchemeGroupVersion.WithResource("deployments"), nil
	}
	return schema.GroupVersionResource{}, fmt.Errorf("floor: no resource known for %s", gvk)
}

func decodeObjects(yamlText string) ([]*unstructured.Unstructured, error) {
	dec := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(yamlText), 4096)
	var out []*unstructured.Unstructured
	for {
		u := &unstructured.Unstructured{}
		if err := dec.Decode(&u.Object); err != nil {
			if errors.Is(err, io.EOF) {
				return out, nil
			}
			return nil, err
		}
		if len(u.Object) > 0 {
			out = append(out, u)
		}
	}
}

func tailString(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "…" + s[len(s)-n:]
}

// idleSample is one no-op reconcile: its duration as the daemon measured it, and the API
// requests sent while it ran, as the API server counted them.
type idleSample struct {
	// Reconciles finished in the window (1 unless something else woke the daemon).
	Reconciles float64 `json:"reconciles"`
	// ReconcileSeconds is the daemon's own measure (controller_runtime_reconcile_time_seconds).
	ReconcileSeconds float64 `json:"reconcileSeconds"`
	// PokeToDoneSeconds runs from the annotation patch to the daemon counting the reconcile.
	PokeToDoneSeconds float64 `json:"pokeToDoneSeconds"`
	// Requests is Window minus the benchmark's own requests, minus the cluster's
	// housekeeping (see housekeeping) and minus Background scaled to the window's length,
	// per verb and resource.
	Requests float64 `json:"requests"`
	// Window is apiserver_request_total's delta over the reconcile.
	Window        requestCounts `json:"window"`
	WindowSeconds float64       `json:"windowSeconds"`
	// Background is the delta over a quiet window just before, with no reconcile.
	Background        requestCounts `json:"background"`
	BackgroundSeconds float64       `json:"backgroundSeconds"`
	// Own is what the benchmark itself sent in the window.
	Own requestCounts `json:"own"`
	// Excluded lists the requests of the window left out as the cluster's own housekeeping.
	Excluded []string `json:"excluded,omitempty"`
	// DaemonRequests is what the daemon's clients counted sending over the same window
	// (client-go's rest_client_requests_total), by method in DaemonSent: no background in it.
	DaemonRequests float64       `json:"daemonRequests"`
	DaemonSent     requestCounts `json:"daemonSent"`
}

// measureIdle makes the daemon reconcile big with nothing to do — an unrelated annotation
// changes, as in sync's TestIdleReconcileIsCheap; the requestedAt annotation would ask for
// a full apply instead — and counts what that costs.
func (b *Bench) measureIdle(ctx context.Context, d *daemon, rep int) (idleSample, error) {
	var s idleSample
	if err := d.waitQuiet(ctx, 2*time.Second, 3*time.Minute); err != nil {
		return s, err
	}
	bg0, err := apiserverRequests(ctx, b.cs)
	if err != nil {
		return s, err
	}
	t0 := time.Now()
	select {
	case <-ctx.Done():
		return s, ctx.Err()
	case <-time.After(time.Second):
	}
	bg1, err := apiserverRequests(ctx, b.cs)
	if err != nil {
		return s, err
	}
	t1 := time.Now()
	c0, err := d.counters(ctx)
	if err != nil {
		return s, err
	}
	poke := fmt.Sprintf(`{"metadata":{"annotations":{%q:"%d-%d"}}}`, pokeAnnotation, rep, time.Now().UnixNano())
	st := &convergev1.SyncTarget{ObjectMeta: metav1.ObjectMeta{Name: bigTarget, Namespace: benchNamespace}}
	poked := time.Now()
	if err := b.c.Patch(ctx, st, client.RawPatch(types.MergePatchType, []byte(poke))); err != nil {
		return s, err
	}
	var c1 counters
	deadline := time.Now().Add(time.Minute)
	for {
		if c1, err = d.counters(ctx); err != nil {
			return s, err
		}
		// controller-runtime counts a reconcile before its deferred time observation
		// lands: wait for both.
		if c1.reconciles > c0.reconciles && c1.reconcileSeconds > c0.reconcileSeconds {
			break
		}
		if time.Now().After(deadline) {
			return s, errors.New("the daemon did not reconcile the poked SyncTarget within a minute")
		}
		time.Sleep(10 * time.Millisecond)
	}
	s.PokeToDoneSeconds = time.Since(poked).Seconds()
	s.Reconciles = c1.reconciles - c0.reconciles
	s.ReconcileSeconds = (c1.reconcileSeconds - c0.reconcileSeconds) / s.Reconciles
	// Let whatever the reconcile started asynchronously reach the API server.
	time.Sleep(300 * time.Millisecond)
	a1, err := apiserverRequests(ctx, b.cs)
	if err != nil {
		return s, err
	}
	t2 := time.Now()
	c2, err := d.counters(ctx)
	if err != nil {
		return s, err
	}
	s.DaemonSent = c2.requests.minus(c0.requests)
	s.DaemonRequests = s.DaemonSent.total()

	s.Window, s.WindowSeconds = a1.minus(bg1), t2.Sub(t1).Seconds()
	s.Background, s.BackgroundSeconds = bg1.minus(bg0), t1.Sub(t0).Seconds()
	s.Own = requestCounts{"PATCH converge.dev/synctargets": 1}
	scale := s.WindowSeconds / s.BackgroundSeconds
	for k, v := range s.Window {
		if housekeeping(k) {
			s.Excluded = append(s.Excluded, k)
			continue
		}
		rest := v - s.Own[k]
		if bg := s.Background[k] - s.Own[k]; bg > 0 {
			rest -= math.Round(bg * scale)
		}
		if rest > 0 {
			s.Requests += rest
		}
	}
	return s, nil
}

// measureChange commits a new value of one ConfigMap and times push → applied (the object
// changed in the cluster) and push → healthy (the SyncTarget Ready at the new revision),
// announcing the push by webhook or leaving it to the poll.
func (b *Bench) measureChange(ctx context.Context, d *daemon, g *bigGroup, ns, value string, webhook bool) (applied, healthy time.Duration, err error) {
	if err := d.waitQuiet(ctx, time.Second, 3*time.Minute); err != nil {
		return 0, 0, err
	}
	cur := &convergev1.SyncTarget{}
	if err := b.c.Get(ctx, client.ObjectKey{Namespace: benchNamespace, Name: bigTarget}, cur); err != nil {
		return 0, 0, err
	}
	previous := cur.Status.LastHealthyRevision
	timeout := 3*time.Minute + 3*time.Duration(b.cfg.PollIntervalSeconds)*time.Second
	name := bigConfigMap(0)
	cmw, err := b.watchConfigMapValue(ctx, ns, name, value, "", timeout)
	if err != nil {
		return 0, 0, err
	}
	defer cmw.stop()
	tw, err := b.watchTargets(ctx, []string{bigTarget}, timeout, func(st *convergev1.SyncTarget) bool {
		return st.Status.LastHealthyRevision != previous && readyAt(st, st.Status.LastHealthyRevision)
	})
	if err != nil {
		return 0, 0, err
	}
	defer tw.stop()

	if !webhook {
		// Push at a random moment of the poll cycle, not right after the poll that the
		// last spec change caused: the latency of a poll is uniform over its interval.
		select {
		case <-ctx.Done():
			return 0, 0, ctx.Err()
		case <-time.After(rand.N(time.Duration(b.cfg.PollIntervalSeconds) * time.Second)):
		}
	}
	sha := g.repo.Commit(b.tb, "main", map[string]string{"big/configmaps/" + name + ".yaml": configMapYAML(name, value)})
	pushed := time.Now()
	if webhook {
		if err := b.sendWebhook(ctx, d, g.url); err != nil {
			return 0, 0, err
		}
	}
	at, err := cmw.wait()
	if err != nil {
		return 0, 0, fmt.Errorf("waiting for %s/%s to change: %w%s", ns, name, err, d.tail())
	}
	applied = at.Sub(pushed)
	at, err = tw.wait()
	if err != nil {
		return 0, 0, fmt.Errorf("waiting for Ready at the new revision: %w%s", err, d.tail())
	}
	healthy = at.Sub(pushed)
	if got := tw.last[bigTarget].Status.LastHealthyRevision; got != "main@sha1:"+sha {
		return 0, 0, fmt.Errorf("the SyncTarget is Ready at %s, want main@sha1:%s", got, sha)
	}
	return applied, healthy, nil
}

// sendWebhook announces a push to the repository with a generic signed payload.
func (b *Bench) sendWebhook(ctx context.Context, d *daemon, url string) error {
	body := fmt.Appendf(nil, `{"repository": {"url": %q}}`, url)
	return postWebhook(ctx, d, body, func(h http.Header, sig string) { h.Set("X-Signature", "sha256="+sig) })
}

// postWebhook sends body to the daemon's webhook receiver, its HMAC with the benchmark's
// webhook token set in the headers by sign, and wants it accepted.
func postWebhook(ctx context.Context, d *daemon, body []byte, sign func(h http.Header, sig string)) error {
	mac := hmac.New(sha256.New, []byte(webhookToken))
	mac.Write(body)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, d.webhookURL, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	sign(req.Header, hex.EncodeToString(mac.Sum(nil)))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		return fmt.Errorf("webhook answered %s, want 202", resp.Status)
	}
	return nil
}

// setInterval changes big's poll interval and waits until the daemon acted on the new spec.
func (b *Bench) setInterval(ctx context.Context, d *daemon, interval time.Duration) error {
	st := &convergev1.SyncTarget{}
	key := client.ObjectKey{Namespace: benchNamespace, Name: bigTarget}
	if err := b.c.Get(ctx, key, st); err != nil {
		return err
	}
	patch := client.MergeFrom(st.DeepCopy())
	st.Spec.Source.Interval = &metav1.Duration{Duration: interval}
	if err := b.c.Patch(ctx, st, patch); err != nil {
		return err
	}
	generation, revision := st.Generation, st.Status.LastHealthyRevision
	tw, err := b.watchTargets(ctx, []string{bigTarget}, 5*time.Minute, func(st *convergev1.SyncTarget) bool {
		return st.Generation == generation && readyAt(st, revision)
	})
	if err != nil {
		return err
	}
	if _, err := tw.wait(); err != nil {
		return fmt.Errorf("waiting for the new interval to be acted on: %w%s", err, d.tail())
	}
	return nil
}

// measureDrift edits a managed ConfigMap out of band and times edit → restored.
func (b *Bench) measureDrift(ctx context.Context, d *daemon, ns string) (time.Duration, error) {
	if err := d.waitQuiet(ctx, time.Second, 3*time.Minute); err != nil {
		return 0, err
	}
	return b.editAndWaitRestored(ctx, ns, 3*time.Minute, d.tail)
}

// editAndWaitRestored changes a managed ConfigMap of big by another field manager and
// times edit → restored, as seen through a watch; tail says what the tool logged, for errors.
func (b *Bench) editAndWaitRestored(ctx context.Context, ns string, timeout time.Duration, tail func() string) (time.Duration, error) {
	name := bigConfigMap(min(1, b.cfg.BigConfigMaps-1))
	cm := &corev1.ConfigMap{}
	if err := b.c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, cm); err != nil {
		return 0, err
	}
	original := cm.Data["value"]
	const drifted = "edited out of band"
	w, err := b.watchConfigMapValue(ctx, ns, name, original, drifted, timeout)
	if err != nil {
		return 0, err
	}
	defer w.stop()
	cm.Data["value"] = drifted
	start := time.Now()
	if err := b.c.Update(ctx, cm, client.FieldOwner("bench-drift")); err != nil {
		return 0, err
	}
	at, err := w.wait()
	if err != nil {
		return 0, fmt.Errorf("waiting for %s/%s to be restored: %w%s", ns, name, err, tail())
	}
	return at.Sub(start), nil
}

// housekeeping tells the requests the rest of the cluster sends on its own, whatever the
// daemon does: kwok's node heartbeats and leases, the API server's reconciling of the
// kubernetes Service's endpoints, OpenAPI aggregation. With default flags (no leader
// election) the daemon sends none of them while it reconciles big; what it does send is
// also counted on its side (DaemonRequests), which no background reaches.
func housekeeping(key string) bool {
	_, res, _ := strings.Cut(key, " ")
	res, _, _ = strings.Cut(res, " ")
	for _, p := range []string{"nodes", "coordination.k8s.io/leases", "endpoints", "discovery.k8s.io/endpointslices", "(non-resource)"} {
		if res == p || strings.HasPrefix(res, p+"/") {
			return true
		}
	}
	return false
}
