package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
	"github.com/converge-gitops/converge/internal/gittest"
	"github.com/converge-gitops/converge/internal/testcharts"
)

// The chart versions of the helm workload: podinfo as it is, then the same chart with its
// version bumped (every object's helm.sh/chart label changes, so every object is updated).
const (
	helmVersion1 = "6.14.1"
	helmVersion2 = "6.14.2"
)

// Chart sources of the helm workload (BENCH_HELM_SOURCE).
const (
	helmSourceGit  = "git"  // the chart directory in a Git repository (spec.source + spec.path)
	helmSourceRepo = "repo" // a loopback HTTP chart repository (spec.chart)
)

// helmRun is one repetition of helm.
type helmRun struct {
	ready, bump time.Duration
	// sent is what the daemon's clients sent from create to all Ready; idle what they sent
	// while reconciling every target once with nothing to do (idleReconciles reconciles).
	sent, idle     requestCounts
	idleReconciles float64
	// reconciles is how many reconciles the daemon ran from create to all Ready, api what
	// the API server served meanwhile (all clients, the busiest kinds).
	reconciles float64
	api        requestCounts
}

// helmTargets describes how the N chart SyncTargets of one source are made.
type helmTargets struct {
	source string
	names  []string
	// spec returns the spec of the i-th target at chart version v.
	spec func(i int, v string) convergev1.SyncTargetSpec
	// bump prepares the move of every target to helmVersion2: it returns what the targets
	// must reach and the action that starts the move. The YAML baseline has none: it is
	// timed cold only.
	bump func() (cond func(*convergev1.SyncTarget) bool, start func(ctx context.Context, d *daemon) error, err error)
	// cold puts the source at helmVersion1 and returns what the targets must reach after
	// their creation.
	cold func() func(*convergev1.SyncTarget) bool
}

func helmNamespace(i int) string { return fmt.Sprintf("bench-helm-%04d", i) }

// helmSpec is the Helm part of every chart target: its own release name and one value.
func helmSpec(i int) *convergev1.HelmSpec {
	return &convergev1.HelmSpec{
		ReleaseName: fmt.Sprintf("podinfo-%04d", i),
		Values:      &apiextensionsv1.JSON{Raw: []byte(`{"replicaCount":1}`)},
	}
}

// podinfoFiles returns podinfo's files under dir, its Chart.yaml at version.
func podinfoFiles(dir, version string) (map[string]string, error) {
	files, err := testcharts.Files(testcharts.Podinfo, dir)
	if err != nil {
		return nil, err
	}
	files[dir+"/Chart.yaml"] = withChartVersion(files[dir+"/Chart.yaml"], version)
	return files, nil
}

// withChartVersion sets the version: line of a Chart.yaml.
func withChartVersion(chartYAML, version string) string {
	lines := strings.Split(chartYAML, "\n")
	for i, l := range lines {
		if strings.HasPrefix(l, "version:") {
			lines[i] = "version: " + version
		}
	}
	return strings.Join(lines, "\n")
}

// gitHelmTargets keeps podinfo in a Git repository: charts/podinfo, followed by every target.
func (b *Bench) gitHelmTargets(n int) (*helmTargets, error) {
	repo := gittest.NewRepo(b.tb, b.gitRoot, fmt.Sprintf("helm-%d", n))
	files, err := podinfoFiles("charts/podinfo", helmVersion1)
	if err != nil {
		return nil, err
	}
	url := b.git.RepoURL(repo)
	ht := &helmTargets{source: helmSourceGit, names: helmNames(n)}
	ht.spec = func(i int, _ string) convergev1.SyncTargetSpec {
		return convergev1.SyncTargetSpec{
			Source: convergev1.GitSource{URL: url, Ref: convergev1.GitRef{Branch: "main"}, Interval: &metav1.Duration{Duration: time.Hour},
				WebhookSecretRef: &convergev1.LocalObjectReference{Name: webhookSecret}},
			Path: "charts/podinfo", TargetNamespace: helmNamespace(i), Prune: true, Helm: helmSpec(i),
		}
	}
	ht.cold = func() func(*convergev1.SyncTarget) bool {
		revision := "main@sha1:" + repo.Commit(b.tb, "main", files)
		return func(st *convergev1.SyncTarget) bool { return readyAt(st, revision) }
	}
	// The commit lands before the timing starts; the targets poll hourly, so the webhook
	// is what announces it.
	ht.bump = func() (func(*convergev1.SyncTarget) bool, func(context.Context, *daemon) error, error) {
		files, err := podinfoFiles("charts/podinfo", helmVersion2)
		if err != nil {
			return nil, nil, err
		}
		bumped := "main@sha1:" + repo.Commit(b.tb, "main", files)
		return func(st *convergev1.SyncTarget) bool { return readyAt(st, bumped) },
			func(ctx context.Context, d *daemon) error { return b.sendWebhook(ctx, d, url) }, nil
	}
	return ht, nil
}

func helmName(i int) string { return fmt.Sprintf("helm-%04d", i) }

func helmNames(n int) []string {
	names := make([]string, n)
	for i := range n {
		names[i] = helmName(i)
	}
	return names
}

// runHelm measures N chart SyncTargets of every configured chart source against N
// SyncTargets of the same objects as plain YAML, their repetitions interleaved (the YAML
// baseline, then every source) so that each meets the cluster in the same state.
func (b *Bench) runHelm(ctx context.Context, n int) error {
	baseline, err := b.yamlHelmTargets(n)
	if err != nil {
		return err
	}
	sources := []*helmTargets{baseline}
	for _, source := range b.cfg.HelmSources {
		ht, err := b.helmTargetsOf(ctx, source, n)
		if err != nil {
			return err
		}
		if ht != nil { // nil: skipped, and noted
			sources = append(sources, ht)
		}
	}
	figures := make([]helmFigures, len(sources))
	for rep := range b.cfg.Reps {
		for i, ht := range sources {
			r, err := b.helmRep(ctx, rep, ht)
			if err != nil {
				return err
			}
			figures[i].add(r, n)
		}
	}
	for i, ht := range sources[1:] {
		f := figures[i+1]
		w := fmt.Sprintf("helm N=%d (%s)", n, ht.source)
		b.res.add(w, "create → all Ready", Seconds, f.ready, fmt.Sprintf("%d targets of the chart's objects as YAML", n), figures[0].ready,
			&Target{Text: "≤ 1.2× YAML", Max: 1.2, OnRatio: true})
		b.res.add(w, "API requests sent per target (cold)", Requests, f.perTarget, fmt.Sprintf("%d targets of the chart's objects as YAML", n), figures[0].perTarget, nil)
		b.res.add(w, "API requests per idle reconcile per target", Requests, f.idle, "", nil, nil)
		b.res.add(w, "version bump → all Ready", Seconds, f.bump, "", nil, nil)
	}
	if !b.cfg.flux() {
		return nil
	}
	// Flux follows the loopback chart repository: beside converge's figures from it, or
	// from Git when those were not measured.
	w := fmt.Sprintf("helm N=%d (%s)", n, helmSourceRepo)
	if b.res.find(w, "create → all Ready") == nil {
		w = fmt.Sprintf("helm N=%d (%s)", n, helmSourceGit)
		b.res.Notes = append(b.res.Notes, "helm (git): the Flux column is Flux from a loopback HelmRepository (converge's chart-repository run was not measured).")
	}
	return b.runHelmFlux(ctx, n, w)
}

func (b *Bench) helmTargetsOf(ctx context.Context, source string, n int) (*helmTargets, error) {
	if source == helmSourceRepo {
		return b.repoHelmTargets(ctx, n)
	}
	return b.gitHelmTargets(n)
}

// helmFigures are the figures of one source over the repetitions.
type helmFigures struct {
	ready, bump, perTarget, idle []float64
}

func (f *helmFigures) add(r helmRun, n int) {
	f.ready = append(f.ready, r.ready.Seconds())
	f.perTarget = append(f.perTarget, r.sent.total()/float64(n))
	if r.idleReconciles > 0 {
		f.bump = append(f.bump, r.bump.Seconds())
		f.idle = append(f.idle, r.idle.total()/r.idleReconciles)
	}
}

// helmRep runs one repetition of one source in fresh namespaces and removes it after.
func (b *Bench) helmRep(ctx context.Context, rep int, ht *helmTargets) (helmRun, error) {
	n := len(ht.names)
	namespaces := make([]string, n)
	for i := range n {
		namespaces[i] = helmNamespace(i)
	}
	if err := b.createNamespaces(ctx, namespaces...); err != nil {
		return helmRun{}, err
	}
	r, err := b.helmOnce(ctx, rep, ht)
	if err != nil {
		return r, fmt.Errorf("helm N=%d (%s) rep %d: %w", n, ht.source, rep+1, err)
	}
	if ht.bump == nil {
		b.logf("helm N=%d (%s) rep %d/%d: all Ready in %s, %.1f reconciles and %.1f API requests sent per target (%s); API server: %s",
			n, ht.source, rep+1, b.cfg.Reps, r.ready.Round(time.Millisecond), r.reconciles/float64(n), r.sent.total()/float64(n), r.sent, r.api)
	} else {
		b.logf("helm N=%d (%s) rep %d/%d: all Ready in %s, version bump → all Ready in %s, %.1f reconciles and %.1f API requests sent per target (%s), idle: %.0f reconciles, %.1f requests per reconcile (%s); API server (cold): %s",
			n, ht.source, rep+1, b.cfg.Reps, r.ready.Round(time.Millisecond), r.bump.Round(time.Millisecond),
			r.reconciles/float64(n), r.sent.total()/float64(n), r.sent, r.idleReconciles, r.idle.total()/r.idleReconciles, r.idle, r.api)
	}
	if err := b.deleteTargets(ctx, workloadHelm); err != nil {
		return r, err
	}
	return r, b.deleteNamespaces(ctx, namespaces...)
}

// helmOnce is one repetition: cold, idle, version bump, with a daemon of its own.
func (b *Bench) helmOnce(ctx context.Context, rep int, ht *helmTargets) (helmRun, error) {
	var r helmRun
	d, err := b.startDaemon(ctx, fmt.Sprintf("helm-%s-%d-%d", ht.source, len(ht.names), rep), "--allow-loopback-clusters")
	if err != nil {
		return r, err
	}
	defer b.stopDaemon(d)
	timeout := 10*time.Minute + time.Duration(len(ht.names))*time.Second
	c0, err := d.counters(ctx)
	if err != nil {
		return r, err
	}
	api0, err := apiserverRequests(ctx, b.cs)
	if err != nil {
		return r, err
	}
	prof := b.startProfile(d, fmt.Sprintf("helm N=%d (%s)", len(ht.names), ht.source))
	if r.ready, err = b.timeTargets(ctx, d, ht.names, timeout, ht.cold(), func() error { return b.createHelmTargets(ctx, ht) }); err != nil {
		return r, err
	}
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
	r.api = api1.minus(api0).top(12)
	r.sent, r.reconciles = c1.requests.minus(c0.requests), c1.reconciles-c0.reconciles
	if ht.bump == nil {
		return r, d.running() // the YAML baseline: cold only
	}
	if r.idle, r.idleReconciles, err = b.idleAll(ctx, d, ht.names, rep); err != nil {
		return r, err
	}
	cond, start, err := ht.bump()
	if err != nil {
		return r, err
	}
	if r.bump, err = b.timeTargets(ctx, d, ht.names, timeout, cond, func() error { return start(ctx, d) }); err != nil {
		return r, err
	}
	return r, d.running()
}

// timeTargets runs act and times it until cond holds for every named SyncTarget.
func (b *Bench) timeTargets(ctx context.Context, d *daemon, names []string, timeout time.Duration,
	cond func(*convergev1.SyncTarget) bool, act func() error) (time.Duration, error) {
	tw, err := b.watchTargets(ctx, names, timeout, cond)
	if err != nil {
		return 0, err
	}
	start := time.Now()
	if err := act(); err != nil {
		tw.stop()
		return 0, err
	}
	done, err := tw.wait()
	if err != nil {
		return 0, fmt.Errorf("%w%s", err, d.tail())
	}
	return done.Sub(start), nil
}

func (b *Bench) createHelmTargets(ctx context.Context, ht *helmTargets) error {
	return parallel(len(ht.names), 8, func(i int) error {
		return b.c.Create(ctx, &convergev1.SyncTarget{
			ObjectMeta: metav1.ObjectMeta{Name: ht.names[i], Namespace: benchNamespace, Labels: map[string]string{workloadLabel: workloadHelm}},
			Spec:       ht.spec(i, helmVersion1),
		})
	})
}

// idleAll pokes every named SyncTarget with an unrelated annotation (a reconcile with
// nothing to do) and returns what the daemon's clients sent until it reconciled them all.
func (b *Bench) idleAll(ctx context.Context, d *daemon, names []string, rep int) (requestCounts, float64, error) {
	if err := d.waitQuiet(ctx, 2*time.Second, 3*time.Minute); err != nil {
		return nil, 0, err
	}
	c0, err := d.counters(ctx)
	if err != nil {
		return nil, 0, err
	}
	poke := fmt.Sprintf(`{"metadata":{"annotations":{%q:"idle-%d-%d"}}}`, pokeAnnotation, rep, time.Now().UnixNano())
	err = parallel(len(names), 8, func(i int) error {
		st := &convergev1.SyncTarget{ObjectMeta: metav1.ObjectMeta{Name: names[i], Namespace: benchNamespace}}
		return b.c.Patch(ctx, st, client.RawPatch(types.MergePatchType, []byte(poke)))
	})
	if err != nil {
		return nil, 0, err
	}
	if err := d.waitQuiet(ctx, 2*time.Second, 3*time.Minute); err != nil {
		return nil, 0, err
	}
	c1, err := d.counters(ctx)
	if err != nil {
		return nil, 0, err
	}
	if c1.reconciles-c0.reconciles < float64(len(names)) {
		return nil, 0, fmt.Errorf("the daemon reconciled %.0f times after poking %d SyncTargets", c1.reconciles-c0.reconciles, len(names))
	}
	return c1.requests.minus(c0.requests), c1.reconciles - c0.reconciles, nil
}
