package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"time"

	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
)

// noChartFetcher is what a converge without a chart-repository fetcher says of spec.chart.
const noChartFetcher = "fetches no charts from chart repositories"

// packageChart packs podinfo at version as a chart archive, podinfo/ at its root, as
// `helm package` would, without its kubeVersion constraint: the YAML baseline renders the
// same chart with the Helm SDK's client-only install, whose default Kubernetes (v1.20) is
// outside ">=1.23.0-0".
func packageChart(version string) ([]byte, error) {
	files, err := podinfoFiles("podinfo", version)
	if err != nil {
		return nil, err
	}
	files["podinfo/Chart.yaml"] = withoutKubeVersion(files["podinfo/Chart.yaml"])
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	for _, name := range sortedKeys(files) {
		hdr := &tar.Header{Name: name, Mode: 0o644, Size: int64(len(files[name])), Typeflag: tar.TypeReg, ModTime: time.Unix(0, 0)}
		if err := tw.WriteHeader(hdr); err != nil {
			return nil, err
		}
		if _, err := tw.Write([]byte(files[name])); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// withoutKubeVersion drops the kubeVersion: line of a Chart.yaml.
func withoutKubeVersion(chartYAML string) string {
	var out []string
	for l := range strings.SplitSeq(chartYAML, "\n") {
		if !strings.HasPrefix(l, "kubeVersion:") {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// chartRepoHandler serves index.yaml and the archives of a chart repository.
func chartRepoHandler(archives map[string][]byte) (http.Handler, error) {
	var idx strings.Builder
	idx.WriteString("apiVersion: v1\nentries:\n  podinfo:\n")
	versions := make([]string, 0, len(archives))
	for v := range archives {
		versions = append(versions, v)
	}
	sort.Sort(sort.Reverse(sort.StringSlice(versions)))
	mux := http.NewServeMux()
	for _, v := range versions {
		sum := sha256.Sum256(archives[v])
		file := fmt.Sprintf("podinfo-%s.tgz", v)
		fmt.Fprintf(&idx, "  - apiVersion: v1\n    name: podinfo\n    version: %s\n    appVersion: %s\n    digest: %s\n    created: \"2026-01-01T00:00:00Z\"\n    urls:\n    - %s\n",
			v, v, hex.EncodeToString(sum[:]), file)
		data := archives[v]
		mux.HandleFunc("/"+file, func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "application/gzip")
			_, _ = w.Write(data)
		})
	}
	idx.WriteString("generated: \"2026-01-01T00:00:00Z\"\n")
	index := idx.String()
	mux.HandleFunc("/index.yaml", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/x-yaml")
		_, _ = w.Write([]byte(index))
	})
	return mux, nil
}

// startChartRepo serves podinfo at both versions of the workload over loopback HTTP.
func (b *Bench) startChartRepo() (string, error) {
	archives := map[string][]byte{}
	for _, v := range []string{helmVersion1, helmVersion2} {
		data, err := packageChart(v)
		if err != nil {
			return "", err
		}
		archives[v] = data
	}
	h, err := chartRepoHandler(archives)
	if err != nil {
		return "", err
	}
	srv := httptest.NewServer(h)
	b.tb.Cleanup(srv.Close)
	return srv.URL, nil
}

// repoHelmTargets follows podinfo in a loopback chart repository (spec.chart); the bump
// moves spec.chart.version. It returns nil, noting the skip, when the daemon fetches no
// charts from chart repositories.
func (b *Bench) repoHelmTargets(ctx context.Context, n int) (*helmTargets, error) {
	url, err := b.startChartRepo()
	if err != nil {
		return nil, err
	}
	ht := &helmTargets{source: helmSourceRepo, names: helmNames(n)}
	ht.spec = func(i int, v string) convergev1.SyncTargetSpec {
		return convergev1.SyncTargetSpec{
			Chart:           &convergev1.ChartSource{Repository: url, Name: "podinfo", Version: v},
			TargetNamespace: helmNamespace(i), Prune: true, Helm: helmSpec(i),
		}
	}
	ht.cold = func() func(*convergev1.SyncTarget) bool { return readyAtGeneration }
	ht.bump = func() (func(*convergev1.SyncTarget) bool, func(context.Context, *daemon) error, error) {
		cond := func(st *convergev1.SyncTarget) bool {
			return st.Spec.Chart != nil && st.Spec.Chart.Version == helmVersion2 && readyAtGeneration(st)
		}
		patch := fmt.Appendf(nil, `{"spec":{"chart":{"version":%q}}}`, helmVersion2)
		return cond, func(ctx context.Context, _ *daemon) error {
			return parallel(n, 8, func(i int) error {
				st := &convergev1.SyncTarget{ObjectMeta: metav1.ObjectMeta{Name: ht.names[i], Namespace: benchNamespace}}
				return b.c.Patch(ctx, st, client.RawPatch(types.MergePatchType, patch))
			})
		}, nil
	}
	ok, err := b.probeChartFetcher(ctx, ht)
	if err != nil || !ok {
		return nil, err
	}
	return ht, nil
}

// readyAtGeneration is true when a SyncTarget is Ready, healthy at what it applied, for
// its current generation.
func readyAtGeneration(st *convergev1.SyncTarget) bool {
	return st.Status.ObservedGeneration == st.Generation && st.Status.LastAppliedRevision != "" &&
		st.Status.LastHealthyRevision == st.Status.LastAppliedRevision &&
		apimeta.IsStatusConditionTrue(st.Status.Conditions, convergev1.ReadyCondition)
}

// probeChartFetcher runs one spec.chart SyncTarget and reports whether the daemon fetches
// charts from chart repositories; when it does not, the skip goes into the notes.
func (b *Bench) probeChartFetcher(ctx context.Context, ht *helmTargets) (bool, error) {
	d, err := b.startDaemon(ctx, "helm-probe", "--allow-loopback-clusters")
	if err != nil {
		return false, err
	}
	defer b.stopDaemon(d)
	if err := b.createNamespaces(ctx, helmNamespace(0)); err != nil {
		return false, err
	}
	defer func() { _ = b.deleteNamespaces(ctx, helmNamespace(0)) }()
	st := &convergev1.SyncTarget{
		ObjectMeta: metav1.ObjectMeta{Name: "helm-probe", Namespace: benchNamespace, Labels: map[string]string{workloadLabel: workloadHelm}},
		Spec:       ht.spec(0, helmVersion1),
	}
	if err := b.c.Create(ctx, st); err != nil {
		return false, err
	}
	defer func() { _ = b.deleteTargets(ctx, workloadHelm) }()
	var refused bool
	tw, err := b.watchTargets(ctx, []string{st.Name}, 5*time.Minute, func(st *convergev1.SyncTarget) bool {
		c := apimeta.FindStatusCondition(st.Status.Conditions, convergev1.ReadyCondition)
		refused = c != nil && strings.Contains(c.Message, noChartFetcher)
		return refused || readyAtGeneration(st)
	})
	if err != nil {
		return false, err
	}
	if _, err := tw.wait(); err != nil {
		return false, fmt.Errorf("helm (%s): the probe SyncTarget: %w%s", helmSourceRepo, err, d.tail())
	}
	if refused {
		b.res.Notes = append(b.res.Notes, "helm (repo): skipped: no chart fetcher (the daemon says it "+noChartFetcher+")")
		b.logf("helm (repo): skipped: no chart fetcher")
	}
	return !refused, nil
}
