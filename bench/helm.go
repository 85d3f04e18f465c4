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
}

// helmTargets describes how the N chart SyncTargets of one source are made.
type helmTargets struct {
	source string
	names  []string
	// spec returns the spec of the i-th target at chart version v.
	spec func(i int, v string) convergev1.SyncTargetSpec
	// bump prepares the move of every target to helmVersion2: it returns what the targets
	// must reach and the action that starts the move.
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

// runHelm measures N chart SyncTargets of every configured chart source against the YAML
// many workload of the same N, run in the same invocation.
func (b *Bench) runHelm(ctx context.Context, n int) error {
	yaml, err := b.helmBaseline(ctx, n)
	if err != nil {
		return err
	}
	for _, source := range b.cfg.HelmSources {
		ht, err := b.helmTargetsOf(ctx, source, n)
		if err != nil {
			return err
		}
		if ht == nil {
			continue // skipped, and noted
		}
		if err := b.runHelmSource(ctx, n, ht, yaml); err != nil {
			return err
		}
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

// helmBaseline runs the YAML many workload of the same N, once per repetition, and returns
// its create → all Ready times.
func (b *Bench) helmBaseline(ctx context.Context, n int) ([]float64, error) {
	repo := gittest.NewRepo(b.tb, b.gitRoot, fmt.Sprintf("helm-yaml-%d", n))
	revision := "main@sha1:" + repo.Commit(b.tb, "main", manyFiles(n))
	names, namespaces := make([]string, n), make([]string, n)
	for i := range n {
		names[i], namespaces[i] = fmt.Sprintf("many-%04d", i), manyNamespace(i)
	}
	var ready []float64
	for rep := range b.cfg.Reps {
		r, err := b.manyOnce(ctx, rep, n, b.git.RepoURL(repo), revision, names)
		if err != nil {
			return nil, fmt.Errorf("helm N=%d, YAML baseline, rep %d: %w", n, rep+1, err)
		}
		b.logf("helm N=%d, YAML baseline (many) rep %d/%d: all Ready in %s", n, rep+1, b.cfg.Reps, r.ready.Round(time.Millisecond))
		ready = append(ready, r.ready.Seconds())
		if err := b.deleteTargets(ctx, workloadMany); err != nil {
			return nil, err
		}
		if err := b.deleteNamespaces(ctx, namespaces...); err != nil {
			return nil, err
		}
	}
	return ready, nil
}

// runHelmSource runs helm's repetitions for one chart source and records its figures.
func (b *Bench) runHelmSource(ctx context.Context, n int, ht *helmTargets, yaml []float64) error {
	namespaces := make([]string, n)
	for i := range n {
		namespaces[i] = helmNamespace(i)
	}
	var ready, bump, perTarget, idle []float64
	for rep := range b.cfg.Reps {
		if err := b.createNamespaces(ctx, namespaces...); err != nil {
			return err
		}
		r, err := b.helmOnce(ctx, rep, ht)
		if err != nil {
			return fmt.Errorf("helm N=%d (%s) rep %d: %w", n, ht.source, rep+1, err)
		}
		b.logf("helm N=%d (%s) rep %d/%d: all Ready in %s, version bump → all Ready in %s, %.1f API requests sent per target (%s), idle: %.0f reconciles, %.1f requests per reconcile (%s)",
			n, ht.source, rep+1, b.cfg.Reps, r.ready.Round(time.Millisecond), r.bump.Round(time.Millisecond),
			r.sent.total()/float64(n), r.sent, r.idleReconciles, r.idle.total()/r.idleReconciles, r.idle)
		ready, bump = append(ready, r.ready.Seconds()), append(bump, r.bump.Seconds())
		perTarget = append(perTarget, r.sent.total()/float64(n))
		idle = append(idle, r.idle.total()/r.idleReconciles)
		if err := b.deleteTargets(ctx, workloadHelm); err != nil {
			return err
		}
		if err := b.deleteNamespaces(ctx, namespaces...); err != nil {
			return err
		}
	}
	w := fmt.Sprintf("helm N=%d (%s)", n, ht.source)
	b.res.add(w, "create → all Ready", Seconds, ready, fmt.Sprintf("%d YAML targets", n), yaml,
		&Target{Text: "≤ 1.2× YAML", Max: 1.2, OnRatio: true})
	b.res.add(w, "API requests sent per target (cold)", Requests, perTarget, "", nil, nil)
	b.res.add(w, "API requests per idle reconcile per target", Requests, idle, "", nil, nil)
	b.res.add(w, "version bump → all Ready", Seconds, bump, "", nil, nil)
	return nil
}

// helmOnce is one repetition: cold, idle, version bump, with a daemon of its own.
func (b *Bench) helmOnce(ctx context.Context, rep int, ht *helmTargets) (helmRun, error) {
	var r helmRun
	d, err := b.startDaemon(ctx, fmt.Sprintf("helm-%s-%d-%d", ht.source, len(ht.names), rep))
	if err != nil {
		return r, err
	}
	defer b.stopDaemon(d)
	timeout := 10*time.Minute + time.Duration(len(ht.names))*time.Second
	c0, err := d.counters(ctx)
	if err != nil {
		return r, err
	}
	if r.ready, err = b.timeTargets(ctx, d, ht.names, timeout, ht.cold(), func() error { return b.createHelmTargets(ctx, ht) }); err != nil {
		return r, err
	}
	c1, err := d.counters(ctx)
	if err != nil {
		return r, err
	}
	r.sent = c1.requests.minus(c0.requests)
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
