package e2e

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	chartloader "helm.sh/helm/v4/pkg/chart/v2/loader"
	releaseutil "helm.sh/helm/v4/pkg/release/v1/util"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/yaml"
	sigsyaml "sigs.k8s.io/yaml"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
	"github.com/converge-gitops/converge/internal/charttest"
	"github.com/converge-gitops/converge/internal/testcharts"
)

// podinfoVersion is the version of the podinfo chart of internal/testcharts.
const podinfoVersion = "6.14.1"

// TestConvertFluxHelmReleases: a Flux repository laid out as Flux's kustomize-helm example
// (clusters/staging with the GitRepository and the Kustomizations, infrastructure/, and
// apps/ with a HelmRepository and a HelmRelease of podinfo from an HTTP chart repository,
// and another from an OCI one, with values and a targetNamespace) is converted with
// `converge convert`; the SyncTargets it prints, applied, make the objects the Helm SDK
// renders for the same release names, namespace and values: same kinds and names, labels,
// and the values carried (replicas, the UI message) in the Deployments.
//
// The Git repository the Kustomizations' SyncTargets follow holds the repository as it
// is once migrated: the HelmRepository and HelmRelease files are gone from apps/ (their
// SyncTargets deploy the charts now), the rest is as Flux had it.
func TestConvertFluxHelmReleases(t *testing.T) {
	run(t, 53, "Flux HelmReleases converted", parallel, func(s *scenario) {
		g := NewWithT(t)
		archive := podinfoArchive(t)
		httpRepo := charttest.NewHTTPRepo()
		t.Cleanup(httpRepo.Close)
		httpRepo.Add("podinfo", podinfoVersion, archive)
		reg := charttest.NewOCIRegistry()
		t.Cleanup(reg.Close)
		_, err := reg.Push("podinfo", podinfoVersion, archive)
		g.Expect(err).NotTo(HaveOccurred())

		r := s.repo("flux-helm")
		migrated := map[string]string{
			"infrastructure/configs/settings.yaml": configMap("cluster-settings", "staging"),
			"apps/staging/kustomization.yaml":      "resources: [../base/podinfo]\n",
			"apps/base/podinfo/kustomization.yaml": "resources: [settings.yaml]\n",
			"apps/base/podinfo/settings.yaml":      configMap("podinfo-settings", "staging"),
		}
		rev := r.commit(migrated)
		releases := map[string]string{
			"frontend": `{"replicaCount":2,"ui":{"message":"converted from Flux"}}`,
			"backend":  `{"replicaCount":3,"service":{"httpPort":8080}}`,
		}
		dir := t.TempDir()
		fluxRepo := fluxHelmRepository(s, r, httpRepo.URL(), reg.Repository(), releases)
		for p, body := range migrated {
			if _, set := fluxRepo[p]; !set {
				fluxRepo[p] = body
			}
		}
		writeFiles(t, dir, fluxRepo)

		out := s.cli(60*time.Second, "convert", dir)
		g.Expect(out.code).To(Equal(0), out.String())
		targets := syncTargetsOf(g, out.stdout)
		g.Expect(targets).To(HaveKey("infra-configs"))
		g.Expect(targets).To(HaveKey("apps"))
		g.Expect(targets).To(HaveKey("frontend"))
		g.Expect(targets).To(HaveKey("backend"))
		g.Expect(targets).To(HaveLen(4), out.stdout)
		g.Expect(targets["frontend"].Spec.Chart.Repository).To(Equal(httpRepo.URL()))
		g.Expect(targets["backend"].Spec.Chart.Repository).To(Equal(reg.Repository()))
		for _, st := range targets {
			s.create(st)
			t.Cleanup(func() { _ = suite.k8s.Delete(context.Background(), st) })
		}
		s.waitHealthy(targets["infra-configs"], rev, 120*time.Second)
		s.waitHealthy(targets["apps"], rev, 120*time.Second)
		for name := range releases {
			s.eventually(targets[name], 120*time.Second, func(g Gomega, st *convergev1.SyncTarget) {
				g.Expect(st.Status.LastHealthyRevision).To(HavePrefix(podinfoVersion+"@sha256:"), ready(st).Message)
			})
		}
		object(g, s.app, "cluster-settings", &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "ConfigMap"}})

		for name, values := range releases {
			// Flux's release name without spec.releaseName: <targetNamespace>-<name>.
			rendered := helmRender(t, archive, s.app+"-"+name, s.app, values)
			g.Expect(rendered).NotTo(BeEmpty())
			for _, want := range rendered {
				live := &unstructured.Unstructured{}
				live.SetGroupVersionKind(want.GroupVersionKind())
				object(g, s.app, want.GetName(), live)
				for k, v := range want.GetLabels() {
					g.Expect(live.GetLabels()).To(HaveKeyWithValue(k, v), "%s %s", want.GetKind(), want.GetName())
				}
				g.Expect(live.GetLabels()).To(HaveKeyWithValue(convergev1.NameLabel, name))
				if want.GetKind() == "Deployment" {
					g.Expect(live.Object["spec"]).To(containSubset(want.Object["spec"]), "Deployment %s", want.GetName())
				}
			}
		}
	})
}

// fluxHelmRepository is the Flux repository: the Kustomizations under clusters/staging,
// and under apps/base/podinfo a HelmRepository of each kind and a HelmRelease of each of
// releases (name → values), installed into the scenario's app namespace.
func fluxHelmRepository(s *scenario, r *repo, httpURL, ociURL string, releases map[string]string) map[string]string {
	files := map[string]string{
		"clusters/staging/infrastructure.yaml": fmt.Sprintf(`apiVersion: source.toolkit.fluxcd.io/v1
kind: GitRepository
metadata: {name: flux-system, namespace: %[1]s}
spec:
  interval: 2s
  url: %[2]s
  ref: {branch: main}
  secretRef: {name: %[3]s}
---
apiVersion: kustomize.toolkit.fluxcd.io/v1
kind: Kustomization
metadata: {name: infra-configs, namespace: %[1]s}
spec:
  interval: 1h
  path: ./infrastructure/configs
  prune: true
  sourceRef: {kind: GitRepository, name: flux-system}
  targetNamespace: %[4]s
`, s.ns, r.httpURL(), httpSecret, s.app),
		"clusters/staging/apps.yaml": fmt.Sprintf(`apiVersion: kustomize.toolkit.fluxcd.io/v1
kind: Kustomization
metadata: {name: apps, namespace: %[1]s}
spec:
  interval: 10m
  dependsOn: [{name: infra-configs}]
  path: ./apps/staging
  prune: true
  wait: true
  sourceRef: {kind: GitRepository, name: flux-system}
  targetNamespace: %[2]s
`, s.ns, s.app),
		"apps/base/podinfo/kustomization.yaml": "resources: [settings.yaml, repository.yaml, release.yaml]\n",
		"apps/base/podinfo/repository.yaml": fmt.Sprintf(`apiVersion: source.toolkit.fluxcd.io/v1
kind: HelmRepository
metadata: {name: podinfo, namespace: %[1]s}
spec:
  interval: 5m
  url: %[2]s
---
apiVersion: source.toolkit.fluxcd.io/v1
kind: HelmRepository
metadata: {name: podinfo-oci, namespace: %[1]s}
spec:
  type: oci
  interval: 5m
  url: %[3]s
`, s.ns, httpURL, ociURL),
	}
	var docs []string
	for name, values := range releases {
		source := "podinfo"
		if name == "backend" {
			source = "podinfo-oci"
		}
		docs = append(docs, fmt.Sprintf(`apiVersion: helm.toolkit.fluxcd.io/v2
kind: HelmRelease
metadata: {name: %[1]s, namespace: %[2]s}
spec:
  interval: 1m
  targetNamespace: %[3]s
  chart:
    spec:
      chart: podinfo
      version: "6.x"
      sourceRef: {kind: HelmRepository, name: %[4]s}
      interval: 2s
  install: {crds: Create}
  values: %[5]s
`, name, s.ns, s.app, source, values))
	}
	files["apps/base/podinfo/release.yaml"] = strings.Join(docs, "---\n")
	return files
}

// syncTargetsOf decodes the SyncTargets of `converge convert`'s output, by name.
func syncTargetsOf(g Gomega, out string) map[string]*convergev1.SyncTarget {
	targets := map[string]*convergev1.SyncTarget{}
	dec := yaml.NewYAMLOrJSONDecoder(bytes.NewBufferString(out), 4096)
	for {
		st := &convergev1.SyncTarget{}
		err := dec.Decode(st)
		if err == io.EOF {
			return targets
		}
		g.Expect(err).NotTo(HaveOccurred())
		if st.Kind == convergev1.SyncTargetKind {
			targets[st.Name] = st
		}
	}
}

// podinfoArchive is the podinfo chart of internal/testcharts, packaged.
func podinfoArchive(t *testing.T) []byte {
	t.Helper()
	files, err := testcharts.Files(testcharts.Podinfo, "")
	if err != nil {
		t.Fatal(err)
	}
	b, err := charttest.Package("podinfo", files)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// clientGoKubeVersion is the Kubernetes release of the client-go converge is built with
// (v0.X.Y is v1.X.Y): the .Capabilities.KubeVersion the converge binary renders charts with.
func clientGoKubeVersion(t *testing.T) string {
	t.Helper()
	// The test binary's build information lists no dependencies: read go.mod.
	gomod, err := os.ReadFile(filepath.Join("..", "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^\s*k8s\.io/client-go v0\.(\S+)`).FindSubmatch(gomod)
	if m == nil {
		t.Fatal("no k8s.io/client-go in go.mod")
	}
	return "v1." + string(m[1])
}

// helmRender renders the chart archive as `helm install --dry-run=client` does for the
// Kubernetes version converge renders charts with, and returns its objects (hooks aside).
func helmRender(t *testing.T, archive []byte, name, namespace, values string) []*unstructured.Unstructured {
	t.Helper()
	ch, err := chartloader.LoadArchive(bytes.NewReader(archive))
	if err != nil {
		t.Fatal(err)
	}
	var vals map[string]any
	if err := sigsyaml.Unmarshal([]byte(values), &vals); err != nil {
		t.Fatal(err)
	}
	rel, err := testcharts.InstallDryRun(t.Context(), ch, vals, testcharts.HelmInstall{
		ReleaseName: name, Namespace: namespace, KubeVersion: clientGoKubeVersion(t)})
	if err != nil {
		t.Fatal(err)
	}
	var objs []*unstructured.Unstructured
	for _, doc := range releaseutil.SplitManifests(rel.Manifest) {
		u := &unstructured.Unstructured{}
		if err := sigsyaml.Unmarshal([]byte(doc), &u.Object); err != nil {
			t.Fatal(err)
		}
		if len(u.Object) > 0 {
			objs = append(objs, u)
		}
	}
	return objs
}

// containSubset matches a value that holds every field of want with the same value
// (lists element by element, numbers by value); it may hold more (defaults).
func containSubset(want any) OmegaMatcher {
	return WithTransform(func(got any) string { return subsetDiff("", want, got) }, BeEmpty())
}

// subsetDiff names the first field of want that got lacks or holds differently.
func subsetDiff(path string, want, got any) string {
	switch w := want.(type) {
	case map[string]any:
		m, ok := got.(map[string]any)
		if !ok {
			return fmt.Sprintf("%s: want a map, got %v", path, got)
		}
		for k, v := range w {
			if d := subsetDiff(path+"."+k, v, m[k]); d != "" {
				return d
			}
		}
	case []any:
		l, ok := got.([]any)
		if !ok || len(l) != len(w) {
			return fmt.Sprintf("%s: want %v, got %v", path, w, got)
		}
		for i := range w {
			if d := subsetDiff(fmt.Sprintf("%s[%d]", path, i), w[i], l[i]); d != "" {
				return d
			}
		}
	default:
		if fmt.Sprint(want) != fmt.Sprint(got) {
			return fmt.Sprintf("%s: want %v, got %v", path, want, got)
		}
	}
	return ""
}
