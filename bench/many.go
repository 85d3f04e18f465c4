package main

import (
	"context"
	"fmt"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
	"github.com/converge-gitops/converge/internal/gittest"
)

// manyRun is one repetition of many.
type manyRun struct {
	ready time.Duration
	rss   float64 // MiB, VmHWM
	anon  float64 // MiB, peak RssAnon
	// requests is what the API server served during the repetition (all clients, the
	// cluster's own controllers included), daemonSent what the daemon's clients sent.
	requests, daemonSent requestCounts
	reconciles           float64
	// phases is how long the daemon's deploys spent in each phase, summed over targets.
	phases phaseTimes
}

// runMany measures N SyncTargets, each with its own path and namespace, from their creation
// until all are Ready, and the daemon's peak RSS. Each repetition has a daemon of its own
// (so VmHWM is this repetition's) with an empty checkout cache.
func (b *Bench) runMany(ctx context.Context, n int) error {
	repo := gittest.NewRepo(b.tb, b.gitRoot, fmt.Sprintf("many-%d", n))
	revision := "main@sha1:" + repo.Commit(b.tb, "main", manyFiles(n))
	url := b.git.RepoURL(repo)
	names := make([]string, n)
	namespaces := make([]string, n)
	for i := range n {
		names[i] = fmt.Sprintf("many-%04d", i)
		namespaces[i] = manyNamespace(i)
	}

	var runs []manyRun
	for rep := range b.cfg.Reps {
		r, err := b.manyOnce(ctx, rep, n, url, revision, names)
		if err != nil {
			return fmt.Errorf("many N=%d rep %d: %w", n, rep+1, err)
		}
		b.logf("many N=%d rep %d/%d: all Ready in %s, daemon peak RSS %.0f MiB (anonymous %.0f MiB), %.1f reconciles and %.1f API requests sent per SyncTarget (%s); deploy phases summed over targets: %s; API server: %s",
			n, rep+1, b.cfg.Reps, r.ready.Round(time.Millisecond), r.rss, r.anon, r.reconciles/float64(n), r.daemonSent.total()/float64(n), r.daemonSent, r.phases, r.requests)
		runs = append(runs, r)
		if err := b.deleteTargets(ctx, workloadMany); err != nil {
			return err
		}
		if err := b.deleteNamespaces(ctx, namespaces...); err != nil {
			return err
		}
	}

	var ready []time.Duration
	var rss, anon, perTarget []float64
	for _, r := range runs {
		ready = append(ready, r.ready)
		rss, anon = append(rss, r.rss), append(anon, r.anon)
		perTarget = append(perTarget, r.daemonSent.total()/float64(n))
	}
	w := fmt.Sprintf("many N=%d", n)
	var readyTarget, rssTarget *Target
	switch n {
	case 500:
		readyTarget = &Target{Text: "≤ 20 s", Max: 20}
	case 1000:
		readyTarget = &Target{Text: "≤ 45 s", Max: 45}
		rssTarget = &Target{Text: "≤ 120 MiB", Max: 120}
	}
	b.res.add(w, "create → all Ready", Seconds, seconds(ready), "", nil, readyTarget)
	b.res.add(w, "daemon peak RSS (VmHWM)", MiB, rss, "", nil, rssTarget)
	b.res.add(w, "daemon peak anonymous RSS (sampled)", MiB, anon, "", nil, nil)
	b.res.add(w, "API requests sent per SyncTarget", Requests, perTarget, "", nil, &Target{Text: "≤ 8", Max: 8})
	if b.cfg.flux() {
		return b.runManyFlux(ctx, n, url, revision, namespaces)
	}
	return nil
}

// runManyFlux runs many's repetitions for Flux, after converge's, on the same repository.
func (b *Bench) runManyFlux(ctx context.Context, n int, url, revision string, namespaces []string) error {
	var ready, rss, perTarget []float64
	for rep := range b.cfg.Reps {
		r, err := b.fluxMany(ctx, rep, n, url, revision)
		if err != nil {
			return fmt.Errorf("many N=%d, Flux, rep %d: %w", n, rep+1, err)
		}
		b.logf("many N=%d rep %d/%d, Flux: all Ready in %s, peak RSS %.0f MiB (both controllers), %.1f API requests sent per Kustomization (%s)",
			n, rep+1, b.cfg.Reps, r.ready.Round(time.Millisecond), r.rss, r.daemonSent.total()/float64(n), r.daemonSent)
		ready, rss = append(ready, r.ready.Seconds()), append(rss, r.rss)
		perTarget = append(perTarget, r.daemonSent.total()/float64(n))
		if err := b.deleteFluxObjects(ctx); err != nil {
			return err
		}
		if err := b.deleteNamespaces(ctx, namespaces...); err != nil {
			return err
		}
	}
	w := fmt.Sprintf("many N=%d", n)
	b.res.addFlux(w, "create → all Ready", ready)
	b.res.addFlux(w, "daemon peak RSS (VmHWM)", rss)
	b.res.addFlux(w, "API requests sent per SyncTarget", perTarget)
	return nil
}

func (b *Bench) manyOnce(ctx context.Context, rep, n int, url, revision string, names []string) (manyRun, error) {
	return b.coldOnce(ctx, coldRun{
		daemon: fmt.Sprintf("many-%d-%d", n, rep), workload: fmt.Sprintf("many N=%d", n), names: names,
		cond: func(st *convergev1.SyncTarget) bool { return readyAt(st, revision) },
		create: func() error {
			return b.createManyTargets(ctx, url, names, func(int) map[string]string { return map[string]string{workloadLabel: workloadMany} })
		},
	})
}

// coldRun is one cold repetition of many's shape: N SyncTargets created at once into an
// empty cache, timed until cond holds for every one.
type coldRun struct {
	daemon     string   // the daemon's name
	daemonArgs []string // its flags beyond the defaults
	workload   string   // the workload the profile is named after
	names      []string
	cond       func(*convergev1.SyncTarget) bool
	create     func() error
}

// coldOnce runs one cold repetition with a daemon of its own (so that VmHWM is this
// repetition's) and checks many's objects afterwards.
func (b *Bench) coldOnce(ctx context.Context, cr coldRun) (manyRun, error) {
	n := len(cr.names)
	d, err := b.startDaemon(ctx, cr.daemon, cr.daemonArgs...)
	if err != nil {
		return manyRun{}, err
	}
	defer b.stopDaemon(d)
	prof := b.startProfile(d, cr.workload)

	timeout := 10*time.Minute + time.Duration(n)*time.Second
	api0, err := apiserverRequests(ctx, b.cs)
	if err != nil {
		return manyRun{}, err
	}
	c0, err := d.counters(ctx)
	if err != nil {
		return manyRun{}, err
	}
	p0, err := d.phases(ctx)
	if err != nil {
		return manyRun{}, err
	}
	tw, err := b.watchTargets(ctx, cr.names, timeout, cr.cond)
	if err != nil {
		return manyRun{}, err
	}
	start := time.Now()
	if err := cr.create(); err != nil {
		tw.stop()
		return manyRun{}, fmt.Errorf("creating SyncTargets: %w", err)
	}
	done, err := tw.wait()
	if err != nil {
		return manyRun{}, fmt.Errorf("%w%s", err, d.tail())
	}
	r := manyRun{ready: done.Sub(start)}
	if err := b.finishProfile(prof); err != nil {
		return r, err
	}
	api1, err := apiserverRequests(ctx, b.cs)
	if err != nil {
		return r, err
	}
	c1, err := d.counters(ctx)
	if err != nil {
		return r, err
	}
	p1, err := d.phases(ctx)
	if err != nil {
		return r, err
	}
	r.requests = api1.minus(api0).top(12)
	r.daemonSent = c1.requests.minus(c0.requests)
	r.reconciles = c1.reconciles - c0.reconciles
	r.phases = p1.since(p0)
	if r.rss, err = peakRSS(d.pid()); err != nil {
		return r, err
	}
	r.anon = d.peakAnonMiB()
	if err := d.running(); err != nil {
		return r, err
	}
	return r, b.checkMany(ctx, n)
}

// createManyTargets creates, 8 at a time, one SyncTarget per name, the i-th following
// many/<i> of url with prune, labelled with labels(i).
func (b *Bench) createManyTargets(ctx context.Context, url string, names []string, labels func(i int) map[string]string) error {
	return parallel(len(names), 8, func(i int) error {
		return b.c.Create(ctx, &convergev1.SyncTarget{
			ObjectMeta: metav1.ObjectMeta{Name: names[i], Namespace: benchNamespace, Labels: labels(i)},
			Spec: convergev1.SyncTargetSpec{
				Source: convergev1.GitSource{URL: url, Ref: convergev1.GitRef{Branch: "main"}},
				Path:   fmt.Sprintf("many/%04d", i),
				Prune:  true,
			},
		})
	})
}

// checkMany checks that every namespace of many holds its four objects, applied by converge.
func (b *Bench) checkMany(ctx context.Context, n int) error {
	namespaces := make([]string, n)
	for i := range n {
		namespaces[i] = manyNamespace(i)
	}
	return checkManyIn(ctx, b.c, namespaces)
}

// checkManyIn checks that each of namespaces holds many's four objects in the cluster of c,
// applied by converge.
func checkManyIn(ctx context.Context, c client.Client, namespaces []string) error {
	owned := client.MatchingLabels{convergev1.NamespaceLabel: benchNamespace}
	lists := map[string]client.ObjectList{
		"Deployments":     &appsv1.DeploymentList{},
		"ServiceAccounts": &corev1.ServiceAccountList{},
		"Services":        &corev1.ServiceList{},
		"Ingresses":       &networkingv1.IngressList{},
	}
	n := len(namespaces)
	want := map[string]bool{}
	for _, ns := range namespaces {
		want[ns] = true
	}
	for kind, list := range lists {
		if err := c.List(ctx, list, owned); err != nil {
			return err
		}
		found := map[string]bool{}
		items, err := metaItems(list)
		if err != nil {
			return err
		}
		for _, o := range items {
			if want[o.GetNamespace()] && o.GetName() == "app" {
				found[o.GetNamespace()] = true
			}
		}
		if len(found) != n {
			return fmt.Errorf("many: %d of %d namespaces hold their %s", len(found), n, kind)
		}
	}
	return nil
}

// metaItems returns the items of a list as metadata.
func metaItems(list client.ObjectList) ([]metav1.Object, error) {
	objs, err := apimeta.ExtractList(list)
	if err != nil {
		return nil, err
	}
	out := make([]metav1.Object, 0, len(objs))
	for _, o := range objs {
		m, err := apimeta.Accessor(o)
		if err != nil {
			return nil, err
		}
		out = append(out, m)
	}
	return out, nil
}
