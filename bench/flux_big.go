package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
)

// fluxSamples are Flux's figures of the big group, one per repetition.
type fluxSamples struct {
	cold                     []time.Duration
	idleWall, idleSent       []float64
	pollApplied, pollHealthy []time.Duration
	drift                    []time.Duration
	rss                      []float64
}

// bigFlux times a Kustomization of big from its creation (with its GitRepository) to Ready
// in a fresh namespace, then runs idle, change (by polling: Flux's webhook receiver is a
// third controller) and drift on it, as bigConverge does for converge.
func (b *Bench) bigFlux(ctx context.Context, g *bigGroup, rep int) error {
	ns := fmt.Sprintf("bench-big-flux-%d", rep)
	if err := b.createNamespaces(ctx, ns); err != nil {
		return err
	}
	f, err := b.startFlux(ctx, fmt.Sprintf("big-%d", rep))
	if err != nil {
		return err
	}
	defer b.stopFlux(f)
	revision := "main@sha1:" + g.repo.Head(b.tb, "main")
	w, last, err := b.watchKustomizations(ctx, []string{bigTarget}, 15*time.Minute,
		func(u *unstructured.Unstructured) bool { return fluxReady(u, revision) })
	if err != nil {
		return err
	}
	poll := time.Duration(b.cfg.PollIntervalSeconds) * time.Second
	start := time.Now()
	if err := b.createGitRepository(ctx, bigTarget, g.url, poll); err != nil {
		w.stop()
		return err
	}
	k := kustomization(bigTarget, bigTarget, "big", time.Hour)
	_ = unstructured.SetNestedField(k.Object, ns, "spec", "targetNamespace")
	if _, err := b.floor.Resource(kustomizationGVR).Namespace(benchNamespace).Create(ctx, k, metav1.CreateOptions{}); err != nil {
		w.stop()
		return err
	}
	at, err := w.wait()
	if err != nil {
		return fluxWaitError(err, last, f)
	}
	g.fs.cold = append(g.fs.cold, at.Sub(start))
	if err := b.checkBig(ctx, ns); err != nil {
		return err
	}
	b.logf("big rep %d/%d: Flux cold sync → Ready in %s", rep+1, b.cfg.Reps, at.Sub(start).Round(time.Millisecond))
	if err := b.bigFluxAfter(ctx, f, g, ns, rep); err != nil {
		return err
	}
	rss, err := f.peakRSS()
	if err != nil {
		return err
	}
	g.fs.rss = append(g.fs.rss, rss)
	if err := f.running(); err != nil {
		return err
	}
	b.stopFlux(f)
	if err := b.deleteFluxObjects(ctx); err != nil {
		return err
	}
	return b.deleteNamespaces(ctx, ns)
}

// bigFluxAfter runs idle, change and drift on Flux's big Kustomization.
func (b *Bench) bigFluxAfter(ctx context.Context, f *flux, g *bigGroup, ns string, rep int) error {
	if b.cfg.runs(workloadIdle) {
		wall, sent, err := b.fluxIdle(ctx, f)
		if err != nil {
			return fmt.Errorf("idle, Flux: %w", err)
		}
		g.fs.idleWall, g.fs.idleSent = append(g.fs.idleWall, wall), append(g.fs.idleSent, sent)
		b.logf("idle rep %d/%d, Flux: reconcile with nothing to do %.0f ms, %.0f API requests sent", rep+1, b.cfg.Reps, wall*1000, sent)
	}
	if b.cfg.runs(workloadChange) {
		applied, healthy, err := b.fluxChange(ctx, f, g, ns, fmt.Sprintf("rep%d-flux", rep))
		if err != nil {
			return fmt.Errorf("change, Flux: %w", err)
		}
		g.fs.pollApplied, g.fs.pollHealthy = append(g.fs.pollApplied, applied), append(g.fs.pollHealthy, healthy)
		b.logf("change rep %d/%d, Flux (poll %ds): push → applied %s, → healthy %s", rep+1, b.cfg.Reps,
			b.cfg.PollIntervalSeconds, applied.Round(time.Millisecond), healthy.Round(time.Millisecond))
	}
	if b.cfg.runs(workloadDrift) {
		took, err := b.fluxDrift(ctx, f, ns)
		if err != nil {
			return fmt.Errorf("drift, Flux: %w", err)
		}
		g.fs.drift = append(g.fs.drift, took)
		b.logf("drift rep %d/%d, Flux (interval %ds): edit → restored %s", rep+1, b.cfg.Reps, b.cfg.PollIntervalSeconds, took.Round(time.Millisecond))
	}
	return nil
}

// fluxIdle asks Flux to reconcile big with nothing changed (the reconcile.fluxcd.io
// annotation, Flux's only way) and returns the wall time of that reconcile, as
// kustomize-controller's controller_runtime_reconcile_time_seconds counts it, and the API
// requests both controllers sent meanwhile.
func (b *Bench) fluxIdle(ctx context.Context, f *flux) (wall, sent float64, err error) {
	s0, err := scrape(ctx, f.applier.metricsURL, "controller_runtime_reconcile_")
	if err != nil {
		return 0, 0, err
	}
	r0, err := f.requests(ctx)
	if err != nil {
		return 0, 0, err
	}
	stamp := strconv.FormatInt(time.Now().UnixNano(), 10)
	w, last, err := b.watchKustomizations(ctx, []string{bigTarget}, 5*time.Minute, func(u *unstructured.Unstructured) bool {
		handled, _, _ := unstructured.NestedString(u.Object, "status", "lastHandledReconcileAt")
		return handled == stamp && fluxCondition(u, "Ready") == "True"
	})
	if err != nil {
		return 0, 0, err
	}
	patch := fmt.Appendf(nil, `{"metadata":{"annotations":{"reconcile.fluxcd.io/requestedAt":%q}}}`, stamp)
	if _, err := b.floor.Resource(kustomizationGVR).Namespace(benchNamespace).Patch(ctx, bigTarget, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		w.stop()
		return 0, 0, err
	}
	if _, err := w.wait(); err != nil {
		return 0, 0, fluxWaitError(err, last, f)
	}
	// The status is written before the reconcile returns and its time is observed: wait
	// for the observation.
	sel := map[string]string{"controller": "kustomization"}
	var s1 []sample
	for deadline := time.Now().Add(30 * time.Second); ; {
		if s1, err = scrape(ctx, f.applier.metricsURL, "controller_runtime_reconcile_"); err != nil {
			return 0, 0, err
		}
		if sum(s1, "controller_runtime_reconcile_total", sel) > sum(s0, "controller_runtime_reconcile_total", sel) {
			break
		}
		if time.Now().After(deadline) {
			return 0, 0, errors.New("kustomize-controller counted no reconcile of big")
		}
		select {
		case <-ctx.Done():
			return 0, 0, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	r1, err := f.requests(ctx)
	if err != nil {
		return 0, 0, err
	}
	wall = sum(s1, "controller_runtime_reconcile_time_seconds_sum", sel) - sum(s0, "controller_runtime_reconcile_time_seconds_sum", sel)
	return wall, r1.minus(r0).total(), nil
}

// fluxChange pushes a changed ConfigMap at a random moment of the GitRepository's poll
// cycle and times push → applied and push → Ready at the new revision.
func (b *Bench) fluxChange(ctx context.Context, f *flux, g *bigGroup, ns, value string) (applied, healthy time.Duration, err error) {
	poll := time.Duration(b.cfg.PollIntervalSeconds) * time.Second
	timeout := 3*time.Minute + 3*poll
	name := bigConfigMap(0)
	cmw, err := b.watchConfigMapValue(ctx, ns, name, value, "", timeout)
	if err != nil {
		return 0, 0, err
	}
	defer cmw.stop()
	cur, err := b.floor.Resource(kustomizationGVR).Namespace(benchNamespace).Get(ctx, bigTarget, metav1.GetOptions{})
	if err != nil {
		return 0, 0, err
	}
	previous, _, _ := unstructured.NestedString(cur.Object, "status", "lastAppliedRevision")
	kw, last, err := b.watchKustomizations(ctx, []string{bigTarget}, timeout, func(u *unstructured.Unstructured) bool {
		rev, _, _ := unstructured.NestedString(u.Object, "status", "lastAppliedRevision")
		return rev != previous && fluxReady(u, rev)
	})
	if err != nil {
		return 0, 0, err
	}
	defer kw.stop()
	select {
	case <-ctx.Done():
		return 0, 0, ctx.Err()
	case <-time.After(rand.N(poll)):
	}
	sha := g.repo.Commit(b.tb, "main", map[string]string{"big/configmaps/" + name + ".yaml": configMapYAML(name, value)})
	pushed := time.Now()
	at, err := cmw.wait()
	if err != nil {
		return 0, 0, fmt.Errorf("waiting for %s/%s to change: %w%s", ns, name, err, f.applier.tail())
	}
	applied = at.Sub(pushed)
	if at, err = kw.wait(); err != nil {
		return 0, 0, fluxWaitError(err, last, f)
	}
	if got, _, _ := unstructured.NestedString(last[bigTarget].Object, "status", "lastAppliedRevision"); got != "main@sha1:"+sha {
		return 0, 0, fmt.Errorf("the Kustomization is Ready at %s, want main@sha1:%s", got, sha)
	}
	return applied, at.Sub(pushed), nil
}

// fluxDrift edits a managed ConfigMap out of band and times edit → restored. Flux watches
// no applied object: it restores at the Kustomization's next interval, set here to the poll
// interval for the measurement (its default is 10m).
func (b *Bench) fluxDrift(ctx context.Context, f *flux, ns string) (time.Duration, error) {
	poll := time.Duration(b.cfg.PollIntervalSeconds) * time.Second
	if err := b.setFluxInterval(ctx, f, poll); err != nil {
		return 0, err
	}
	return b.editAndWaitRestored(ctx, ns, 3*time.Minute+3*poll, f.applier.tail)
}

// setFluxInterval changes the Kustomization's interval and waits until Flux reconciled the
// new generation, so that the reconcile the spec change causes is over before a measurement.
func (b *Bench) setFluxInterval(ctx context.Context, f *flux, interval time.Duration) error {
	patch := fmt.Appendf(nil, `{"spec":{"interval":%q}}`, interval.String())
	u, err := b.floor.Resource(kustomizationGVR).Namespace(benchNamespace).Patch(ctx, bigTarget, types.MergePatchType, patch, metav1.PatchOptions{})
	if err != nil {
		return err
	}
	revision, _, _ := unstructured.NestedString(u.Object, "status", "lastAppliedRevision")
	w, last, err := b.watchKustomizations(ctx, []string{bigTarget}, 5*time.Minute,
		func(u *unstructured.Unstructured) bool { return fluxReady(u, revision) })
	if err != nil {
		return err
	}
	if _, err := w.wait(); err != nil {
		return fluxWaitError(err, last, f)
	}
	return nil
}
