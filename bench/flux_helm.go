package main

import (
	"context"
	"fmt"
	"os"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
)

// Flux's kinds of the helm baseline.
var (
	helmRepositoryGVR = schema.GroupVersionResource{Group: "source.toolkit.fluxcd.io", Version: "v1", Resource: "helmrepositories"}
	helmChartGVR      = schema.GroupVersionResource{Group: "source.toolkit.fluxcd.io", Version: "v1", Resource: "helmcharts"}
	helmReleaseGVR    = schema.GroupVersionResource{Group: "helm.toolkit.fluxcd.io", Version: "v2", Resource: "helmreleases"}
)

// fluxHelmRepo is the HelmRepository every HelmRelease of the baseline follows.
const fluxHelmRepo = "podinfo"

// helmRelease is the Flux equivalent of a chart SyncTarget of helm: its own release and
// namespace, the same value, podinfo at version from the HelmRepository.
func helmRelease(i int, version string) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "helm.toolkit.fluxcd.io/v2", "kind": "HelmRelease",
		"metadata": map[string]any{"name": helmName(i), "namespace": benchNamespace},
		"spec": map[string]any{
			"interval": "1h", "releaseName": fmt.Sprintf("podinfo-%04d", i),
			"targetNamespace": helmNamespace(i), "storageNamespace": helmNamespace(i),
			"chart": map[string]any{"spec": map[string]any{
				"chart": "podinfo", "version": version, "interval": "1h",
				"sourceRef": map[string]any{"kind": "HelmRepository", "name": fluxHelmRepo},
			}},
			"values": map[string]any{"replicaCount": int64(1)},
		},
	}}
}

// helmReleaseReady is true when a HelmRelease is Ready at chart version for its generation.
func helmReleaseReady(version string) func(*unstructured.Unstructured) bool {
	return func(u *unstructured.Unstructured) bool {
		attempted, _, _ := unstructured.NestedString(u.Object, "status", "lastAttemptedRevision")
		observed, _, _ := unstructured.NestedInt64(u.Object, "status", "observedGeneration")
		return attempted == version && observed == u.GetGeneration() && fluxCondition(u, "Ready") == "True"
	}
}

// fluxHelmBuilt reports whether `make flux` built helm-controller.
func (b *Bench) fluxHelmBuilt() bool {
	_, err := os.Stat(b.fluxBinary("helm-controller"))
	return err == nil
}

// runHelmFlux runs helm's repetitions for Flux's source-controller and helm-controller on a
// loopback HelmRepository and records them beside converge's row of workload w.
func (b *Bench) runHelmFlux(ctx context.Context, n int, w string) error {
	if !b.fluxHelmBuilt() {
		b.res.Notes = append(b.res.Notes, "helm: no Flux baseline: helm-controller is not in "+b.fluxBinary(""))
		return nil
	}
	url, err := b.startChartRepo()
	if err != nil {
		return err
	}
	namespaces := make([]string, n)
	for i := range n {
		namespaces[i] = helmNamespace(i)
	}
	var ready, bump, perTarget []float64
	for rep := range b.cfg.Reps {
		if err := b.createNamespaces(ctx, namespaces...); err != nil {
			return err
		}
		r, err := b.fluxHelmOnce(ctx, rep, n, url)
		if err != nil {
			return fmt.Errorf("helm N=%d, Flux, rep %d: %w", n, rep+1, err)
		}
		b.logf("helm N=%d rep %d/%d, Flux: all Ready in %s, version bump → all Ready in %s, %.1f API requests sent per HelmRelease (%s)",
			n, rep+1, b.cfg.Reps, r.ready.Round(time.Millisecond), r.bump.Round(time.Millisecond), r.sent.total()/float64(n), r.sent)
		ready, bump = append(ready, r.ready.Seconds()), append(bump, r.bump.Seconds())
		perTarget = append(perTarget, r.sent.total()/float64(n))
		if err := b.deleteFluxHelmObjects(ctx); err != nil {
			return err
		}
		if err := b.deleteNamespaces(ctx, namespaces...); err != nil {
			return err
		}
	}
	b.res.addFlux(w, "create → all Ready", ready)
	b.res.addFlux(w, "version bump → all Ready", bump)
	b.res.addFlux(w, "API requests sent per target (cold)", perTarget)
	return nil
}

// fluxHelmOnce is one repetition for Flux: a HelmRepository and N HelmReleases created at
// once, until all are Ready; then every HelmRelease moved to the next chart version.
func (b *Bench) fluxHelmOnce(ctx context.Context, rep, n int, url string) (helmRun, error) {
	var r helmRun
	f, err := b.startFluxWith(ctx, fmt.Sprintf("helm-%d-%d", n, rep), "helm-controller")
	if err != nil {
		return r, err
	}
	defer b.stopFlux(f)
	r0, err := f.requests(ctx)
	if err != nil {
		return r, err
	}
	timeout := 10*time.Minute + time.Duration(n)*time.Second
	r.ready, err = b.timeFlux(ctx, f, n, timeout, helmReleaseReady(helmVersion1), func() error { return b.createFluxHelm(ctx, n, url) })
	if err != nil {
		return r, err
	}
	r1, err := f.requests(ctx)
	if err != nil {
		return r, err
	}
	r.sent = r1.minus(r0)
	patch := fmt.Appendf(nil, `{"spec":{"chart":{"spec":{"version":%q}}}}`, helmVersion2)
	r.bump, err = b.timeFlux(ctx, f, n, timeout, helmReleaseReady(helmVersion2), func() error {
		return parallel(n, 8, func(i int) error {
			_, err := b.floor.Resource(helmReleaseGVR).Namespace(benchNamespace).
				Patch(ctx, helmName(i), types.MergePatchType, patch, metav1.PatchOptions{})
			return err
		})
	})
	if err != nil {
		return r, err
	}
	return r, f.running()
}

// timeFlux runs act and times it until cond holds for every HelmRelease of helm.
func (b *Bench) timeFlux(ctx context.Context, f *flux, n int, timeout time.Duration,
	cond func(*unstructured.Unstructured) bool, act func() error) (time.Duration, error) {
	w, last, err := b.watchFlux(ctx, helmReleaseGVR, helmNames(n), timeout, cond)
	if err != nil {
		return 0, err
	}
	start := time.Now()
	if err := act(); err != nil {
		w.stop()
		return 0, err
	}
	at, err := w.wait()
	if err != nil {
		return 0, fluxWaitError(err, last, f)
	}
	return at.Sub(start), nil
}

// createFluxHelm creates the HelmRepository and the N HelmReleases.
func (b *Bench) createFluxHelm(ctx context.Context, n int, url string) error {
	repo := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "source.toolkit.fluxcd.io/v1", "kind": "HelmRepository",
		"metadata": map[string]any{"name": fluxHelmRepo, "namespace": benchNamespace},
		"spec":     map[string]any{"url": url, "interval": "1h", "timeout": "60s"},
	}}
	if _, err := b.floor.Resource(helmRepositoryGVR).Namespace(benchNamespace).Create(ctx, repo, metav1.CreateOptions{}); err != nil {
		return err
	}
	return parallel(n, 8, func(i int) error {
		_, err := b.floor.Resource(helmReleaseGVR).Namespace(benchNamespace).Create(ctx, helmRelease(i, helmVersion1), metav1.CreateOptions{})
		return err
	})
}

// deleteFluxHelmObjects deletes the HelmReleases, HelmCharts and HelmRepositories of
// benchNamespace without their finalizers (the controllers are stopped first).
func (b *Bench) deleteFluxHelmObjects(ctx context.Context) error {
	return b.deleteFluxKinds(ctx, helmReleaseGVR, helmChartGVR, helmRepositoryGVR)
}
