package main

import (
	"context"
	"fmt"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/registry"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
	"github.com/converge-gitops/converge/sources/charts"
)

// ociRepositoryGVR is Flux's OCIRepository, the source of the oci baseline.
var ociRepositoryGVR = schema.GroupVersionResource{Group: "source.toolkit.fluxcd.io", Version: "v1", Resource: "ocirepositories"}

// ociTag is the tag every artifact of oci is pushed under and followed at.
const ociTag = "latest"

// ociApps are the artifacts of one N of oci: the i-th app of many in a repository of its
// own, its URL and the revision it is deployed at ("latest@sha256:<manifest digest>", what
// converge and Flux both report).
type ociApps struct {
	urls, revisions []string
}

func ociName(i int) string { return fmt.Sprintf("oci-%04d", i) }

func ociNames(n int) []string {
	names := make([]string, n)
	for i := range n {
		names[i] = ociName(i)
	}
	return names
}

// startRegistry serves an in-process OCI registry (go-containerregistry's pkg/registry,
// blobs in memory) over plain HTTP on 127.0.0.1 and returns its host:port.
func (b *Bench) startRegistry() string {
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	b.tb.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

// pushOCIApps packs each of many's N apps (the files of many/<i>/, at the artifact's root)
// as converge push artifact does, and pushes it to oci://<host>/many/app-<i> at ociTag: one
// repository, one artifact and, below, one source object per app, as Flux's benchmark
// has one OCIRepository per app.
func (b *Bench) pushOCIApps(ctx context.Context, host string, n int) (*ociApps, error) {
	dir := filepath.Join(b.work, fmt.Sprintf("oci-%d", n))
	for name, content := range manyFiles(n) {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return nil, err
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			return nil, err
		}
	}
	apps := &ociApps{urls: make([]string, n), revisions: make([]string, n)}
	c := &charts.Client{AllowLoopback: true}
	err := parallel(n, 8, func(i int) error {
		a, err := charts.PackArtifact(filepath.Join(dir, "many", fmt.Sprintf("%04d", i)), charts.ArtifactMeta{Source: "converge-bench many/" + fmt.Sprintf("%04d", i)})
		if err != nil {
			return err
		}
		apps.urls[i] = fmt.Sprintf("oci://%s/many/app-%04d", host, i)
		r, err := c.PushArtifact(ctx, charts.Source{Kind: charts.KindArtifact, Repository: apps.urls[i], Tag: ociTag}, a)
		if err != nil {
			return err
		}
		apps.revisions[i] = r.String()
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("pushing the artifacts of oci: %w", err)
	}
	return apps, removeTree(dir)
}

// runOCI measures N SyncTargets of OCI artifacts (spec.oci), each an app of many in a
// repository of its own of a loopback registry, from their creation until all are Ready,
// beside many's N Git SyncTargets of the same objects, measured in this invocation (run
// first when many did not run at this N) and, with the Flux baseline, beside N
// OCIRepositories and N Kustomizations.
func (b *Bench) runOCI(ctx context.Context, n int) error {
	many := fmt.Sprintf("many N=%d", n)
	if b.res.find(many, "create → all Ready") == nil {
		if err := b.runMany(ctx, n); err != nil {
			return err
		}
	}
	apps, err := b.pushOCIApps(ctx, b.startRegistry(), n)
	if err != nil {
		return err
	}
	names := ociNames(n)
	namespaces := make([]string, n)
	index := map[string]int{}
	for i := range n {
		namespaces[i] = manyNamespace(i)
		index[names[i]] = i
	}

	var ready, rss, anon, perTarget []float64
	for rep := range b.cfg.Reps {
		r, err := b.coldOnce(ctx, coldRun{
			daemon: fmt.Sprintf("oci-%d-%d", n, rep), workload: fmt.Sprintf("oci N=%d", n), names: names,
			// The registry is on loopback, as the chart repository of helm (repo) is.
			daemonArgs: []string{"--allow-loopback-clusters"},
			cond:       func(st *convergev1.SyncTarget) bool { return readyAt(st, apps.revisions[index[st.Name]]) },
			create:     func() error { return b.createOCITargets(ctx, apps, names) },
		})
		if err != nil {
			return fmt.Errorf("oci N=%d rep %d: %w", n, rep+1, err)
		}
		b.logf("oci N=%d rep %d/%d: all Ready in %s, daemon peak RSS %.0f MiB (anonymous %.0f MiB), %.1f reconciles and %.1f API requests sent per SyncTarget (%s); deploy phases summed over targets: %s; API server: %s",
			n, rep+1, b.cfg.Reps, r.ready.Round(time.Millisecond), r.rss, r.anon, r.reconciles/float64(n), r.daemonSent.total()/float64(n), r.daemonSent, r.phases, r.requests)
		ready, rss, anon = append(ready, r.ready.Seconds()), append(rss, r.rss), append(anon, r.anon)
		perTarget = append(perTarget, r.daemonSent.total()/float64(n))
		if err := b.deleteTargets(ctx, workloadOCI); err != nil {
			return err
		}
		if err := b.deleteNamespaces(ctx, namespaces...); err != nil {
			return err
		}
	}

	w, git := fmt.Sprintf("oci N=%d", n), fmt.Sprintf("%d Git SyncTargets (many)", n)
	samples := func(metric string) []float64 {
		if r := b.res.find(many, metric); r != nil {
			return r.Samples
		}
		return nil
	}
	target := &Target{Text: "≤ 1× Git", Max: 1, OnRatio: true}
	if b.cfg.flux() {
		target = &Target{Text: "≤ 1× Git, ≤ 0.33× Flux", Max: 1, OnRatio: true, FluxMax: 1.0 / 3}
	}
	b.res.add(w, "create → all Ready", Seconds, ready, git, samples("create → all Ready"), target)
	b.res.add(w, "daemon peak RSS (VmHWM)", MiB, rss, git, samples("daemon peak RSS (VmHWM)"), nil)
	b.res.add(w, "daemon peak anonymous RSS (sampled)", MiB, anon, git, samples("daemon peak anonymous RSS (sampled)"), nil)
	b.res.add(w, "API requests sent per SyncTarget", Requests, perTarget, git, samples("API requests sent per SyncTarget"), nil)
	if b.cfg.flux() {
		return b.runOCIFlux(ctx, n, apps, namespaces)
	}
	return nil
}

// createOCITargets creates, 8 at a time, the SyncTarget of every app, following its
// artifact at ociTag (default interval), its root rendered, with prune.
func (b *Bench) createOCITargets(ctx context.Context, apps *ociApps, names []string) error {
	return parallel(len(names), 8, func(i int) error {
		return b.c.Create(ctx, &convergev1.SyncTarget{
			ObjectMeta: metav1.ObjectMeta{Name: names[i], Namespace: benchNamespace, Labels: map[string]string{workloadLabel: workloadOCI}},
			Spec: convergev1.SyncTargetSpec{
				OCI:   &convergev1.OCISource{URL: apps.urls[i], Ref: convergev1.OCIRef{Tag: ociTag}},
				Prune: true,
			},
		})
	})
}

// runOCIFlux runs oci's repetitions for Flux's source-controller and kustomize-controller,
// after converge's, on the same artifacts.
func (b *Bench) runOCIFlux(ctx context.Context, n int, apps *ociApps, namespaces []string) error {
	var ready, rss, perTarget []float64
	for rep := range b.cfg.Reps {
		r, err := b.fluxOCIOnce(ctx, rep, n, apps)
		if err != nil {
			return fmt.Errorf("oci N=%d, Flux, rep %d: %w", n, rep+1, err)
		}
		b.logf("oci N=%d rep %d/%d, Flux: all Ready in %s, peak RSS %.0f MiB (both controllers), %.1f API requests sent per Kustomization (%s)",
			n, rep+1, b.cfg.Reps, r.ready.Round(time.Millisecond), r.rss, r.daemonSent.total()/float64(n), r.daemonSent)
		ready, rss = append(ready, r.ready.Seconds()), append(rss, r.rss)
		perTarget = append(perTarget, r.daemonSent.total()/float64(n))
		if err := b.deleteFluxKinds(ctx, kustomizationGVR, ociRepositoryGVR); err != nil {
			return err
		}
		if err := b.deleteNamespaces(ctx, namespaces...); err != nil {
			return err
		}
	}
	w := fmt.Sprintf("oci N=%d", n)
	b.res.addFlux(w, "create → all Ready", ready)
	b.res.addFlux(w, "daemon peak RSS (VmHWM)", rss)
	b.res.addFlux(w, "API requests sent per SyncTarget", perTarget)
	return nil
}

// ociRepository is Flux's source of the i-th app: its repository at ociTag over plain HTTP
// (insecure: the registry is on loopback). converge packs its artifacts with a layer of
// charts.ArtifactLayerMediaType; Flux extracts an artifact's first layer when no selector
// names one, which is that layer, but the selector says so, so that Flux reads exactly the
// artifact converge reads — one artifact for both, not a Flux-format copy.
func ociRepository(name, url string) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "source.toolkit.fluxcd.io/v1", "kind": "OCIRepository",
		"metadata": map[string]any{"name": name, "namespace": benchNamespace},
		"spec": map[string]any{
			"url": url, "insecure": true, "interval": "1m", "timeout": "60s",
			"ref":           map[string]any{"tag": ociTag},
			"layerSelector": map[string]any{"mediaType": charts.ArtifactLayerMediaType, "operation": "extract"},
		},
	}}
}

// fluxOCIOnce is oci's repetition for Flux: an OCIRepository and a Kustomization of the
// same name per app (Flux's benchmark's shape), all created at once; timed until every
// Kustomization is Ready at its artifact's revision.
func (b *Bench) fluxOCIOnce(ctx context.Context, rep, n int, apps *ociApps) (manyRun, error) {
	f, err := b.startFlux(ctx, fmt.Sprintf("oci-%d-%d", n, rep))
	if err != nil {
		return manyRun{}, err
	}
	defer b.stopFlux(f)
	names := ociNames(n)
	index := map[string]int{}
	for i, name := range names {
		index[name] = i
	}
	r0, err := f.requests(ctx)
	if err != nil {
		return manyRun{}, err
	}
	w, last, err := b.watchKustomizations(ctx, names, 10*time.Minute+time.Duration(n)*time.Second,
		func(u *unstructured.Unstructured) bool {
			i, ok := index[u.GetName()]
			return ok && fluxReady(u, apps.revisions[i])
		})
	if err != nil {
		return manyRun{}, err
	}
	start := time.Now()
	if err := parallel(n, 8, func(i int) error {
		if _, err := b.floor.Resource(ociRepositoryGVR).Namespace(benchNamespace).
			Create(ctx, ociRepository(names[i], apps.urls[i]), metav1.CreateOptions{}); err != nil {
			return err
		}
		k := kustomization(names[i], names[i], "", 10*time.Minute)
		if err := unstructured.SetNestedField(k.Object, "OCIRepository", "spec", "sourceRef", "kind"); err != nil {
			return err
		}
		_, err := b.floor.Resource(kustomizationGVR).Namespace(benchNamespace).Create(ctx, k, metav1.CreateOptions{})
		return err
	}); err != nil {
		w.stop()
		return manyRun{}, fmt.Errorf("creating OCIRepositories and Kustomizations: %w", err)
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
