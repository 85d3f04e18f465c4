package helm

import (
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
)

const releaseTemplate = `apiVersion: v1
kind: ConfigMap
metadata:
  name: release
data:
  install: {{ .Release.IsInstall | quote }}
  upgrade: {{ .Release.IsUpgrade | quote }}
  revision: {{ .Release.Revision | quote }}
  name: {{ .Release.Name | quote }}
  namespace: {{ .Release.Namespace | quote }}
  kube: {{ .Capabilities.KubeVersion.Version | quote }}
  monitoring: {{ .Capabilities.APIVersions.Has "monitoring.coreos.com/v1/ServiceMonitor" | quote }}
  apps: {{ .Capabilities.APIVersions.Has "apps/v1" | quote }}
`

func TestReleaseAndCapabilitiesReachTemplates(t *testing.T) {
	c := mustLoad(t, writeChart(t, map[string]string{
		"Chart.yaml":             fmt.Sprintf(chartYAML, "caps"),
		"templates/release.yaml": releaseTemplate,
	}))
	cases := []struct {
		opts Options
		want map[string]any
	}{
		{opts: Options{ReleaseName: "web", Namespace: "apps", KubeVersion: "v1.35.0"}, want: map[string]any{
			"install": "true", "upgrade": "false", "revision": "1", "name": "web", "namespace": "apps",
			"kube": "v1.35.0", "monitoring": "false", "apps": "true"}},
		{opts: Options{ReleaseName: "web", Namespace: "apps", IsUpgrade: true, Revision: 7, KubeVersion: "1.34.2",
			APIVersions: []string{"monitoring.coreos.com/v1/ServiceMonitor"}}, want: map[string]any{
			"install": "false", "upgrade": "true", "revision": "7", "name": "web", "namespace": "apps",
			"kube": "v1.34.2", "monitoring": "true", "apps": "true"}},
	}
	for _, tc := range cases {
		rel, err := render(t, c, tc.opts)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(tc.want, rel.Objects[0].Object["data"]); diff != "" {
			t.Errorf("%+v: (-want +got):\n%s", tc.opts, diff)
		}
	}
}

func TestKubeVersionConstraintOfTheChart(t *testing.T) {
	c := mustLoad(t, writeChart(t, map[string]string{
		"Chart.yaml":             fmt.Sprintf(chartYAML, "new") + "kubeVersion: \">=1.30.0-0\"\n",
		"templates/release.yaml": releaseTemplate,
	}))
	if _, err := render(t, c, Options{KubeVersion: "v1.29.3"}); err == nil || !strings.Contains(err.Error(), "requires kubeVersion >=1.30.0-0") {
		t.Errorf("Render on 1.29: %v", err)
	}
	if _, err := render(t, c, Options{KubeVersion: "v1.31.0"}); err != nil {
		t.Errorf("Render on 1.31: %v", err)
	}
	if _, err := render(t, c, Options{ReleaseName: "Not_A_Name"}); err == nil || !strings.Contains(err.Error(), "release name") {
		t.Errorf("Render with an invalid release name: %v", err)
	}
}

const crd = `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: %s.example.com
---
# only a comment
`

func subchartFiles(name string) map[string]string {
	return map[string]string{
		"Chart.yaml":          fmt.Sprintf(chartYAML, name),
		"values.yaml":         "greeting: hello from " + name + "\n",
		"crds/crd.yaml":       fmt.Sprintf(crd, name+"s"),
		"templates/cm.yaml":   configMap(name+"-{{ .Release.Name }}", "  greeting: {{ .Values.greeting | quote }}\n"),
		"templates/NOTES.txt": "notes of " + name,
	}
}

// vendoredChart has a directory subchart (enabled by a condition) and an archived one.
func vendoredChart(t *testing.T) string {
	files := map[string]string{
		"Chart.yaml": fmt.Sprintf(chartYAML, "top") + `dependencies:
- name: dirsub
  version: 0.1.0
  condition: dirsub.enabled
- name: tgzsub
  version: 0.1.0
  alias: aliased
`,
		"values.yaml":         "dirsub:\n  enabled: true\naliased:\n  greeting: overridden\n",
		"crds/top.yaml":       fmt.Sprintf(crd, "tops"),
		"templates/NOTES.txt": "notes of top {{ .Release.Name }}",
		"templates/hook.yaml": `apiVersion: batch/v1
kind: Job
metadata:
  name: migrate
  annotations:
    helm.sh/hook: pre-upgrade,pre-install
    helm.sh/hook-weight: "-5"
spec: {}
`,
	}
	for k, v := range subchartFiles("dirsub") {
		files["charts/dirsub/"+k] = v
	}
	dir := writeChart(t, files)
	var entries []tarEntry
	for k, v := range subchartFiles("tgzsub") {
		entries = append(entries, tarEntry{name: "tgzsub/" + k, content: v})
	}
	writeTgz(t, filepath.Join(dir, "charts", "tgzsub-0.1.0.tgz"), entries)
	return dir
}

func TestVendoredSubchartsCRDsNotesAndHooks(t *testing.T) {
	c := mustLoad(t, vendoredChart(t))
	rel, err := render(t, c, Options{ReleaseName: "r"})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]any{}
	for _, o := range rel.Objects {
		got[o.GetName()] = o.Object["data"]
	}
	want := map[string]any{
		"dirsub-r": map[string]any{"greeting": "hello from dirsub"},
		"tgzsub-r": map[string]any{"greeting": "overridden"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("objects (-want +got):\n%s", diff)
	}
	var crds []string
	for _, o := range rel.CRDs {
		crds = append(crds, o.GetName())
	}
	if diff := cmp.Diff([]string{"tops.example.com", "dirsubs.example.com", "tgzsubs.example.com"}, crds); diff != "" {
		t.Errorf("CRDs (-want +got):\n%s", diff)
	}
	if rel.Notes != "notes of top r" {
		t.Errorf("notes %q: want the top chart's only", rel.Notes)
	}
	if len(rel.Hooks) != 1 || rel.Hooks[0].Weight != -5 ||
		!cmp.Equal(rel.Hooks[0].Events, []string{"pre-upgrade", "pre-install"}) ||
		!cmp.Equal(rel.Hooks[0].DeletePolicies, []string{"before-hook-creation"}) {
		t.Errorf("hooks %+v", rel.Hooks)
	}

	rel, err = render(t, c, Options{SkipCRDs: true, DisableHooks: true, Values: map[string]any{"dirsub": map[string]any{"enabled": false}}})
	if err != nil {
		t.Fatal(err)
	}
	if len(rel.CRDs) != 0 || len(rel.Hooks) != 0 || len(rel.Objects) != 1 || rel.Objects[0].GetName() != "tgzsub-rel" {
		t.Errorf("SkipCRDs, DisableHooks, dirsub disabled: %d CRDs, %d hooks, objects %v", len(rel.CRDs), len(rel.Hooks), rel.Objects)
	}
}

// TestRenderLeavesTheChartAsLoaded renders one Chart concurrently with different values: a
// render that changed the loaded chart (Helm's dependency processing modifies the chart it is
// given) would show in the others.
func TestRenderLeavesTheChartAsLoaded(t *testing.T) {
	c := mustLoad(t, vendoredChart(t))
	var wg sync.WaitGroup
	errs := make(chan error, 20)
	for i := range 20 {
		wg.Go(func() {
			enabled := i%2 == 0
			rel, err := render(t, c, Options{Values: map[string]any{"dirsub": map[string]any{"enabled": enabled}}})
			if err != nil {
				errs <- err
				return
			}
			if want := map[bool]int{true: 2, false: 1}[enabled]; len(rel.Objects) != want {
				errs <- fmt.Errorf("dirsub.enabled=%v: %d objects, want %d", enabled, len(rel.Objects), want)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func TestDigestIsStableAndFollowsContent(t *testing.T) {
	dir := vendoredChart(t)
	a, b := mustLoad(t, dir), mustLoad(t, dir)
	if a.Digest() != b.Digest() || !strings.HasPrefix(a.Digest(), "sha256:") {
		t.Fatalf("digests %q, %q", a.Digest(), b.Digest())
	}
	other := mustLoad(t, writeChart(t, map[string]string{"Chart.yaml": fmt.Sprintf(chartYAML, "top")}))
	if other.Digest() == a.Digest() {
		t.Error("different charts, same digest")
	}
	if a.Name() != "top" || a.Version() != "0.1.0" || a.AppVersion() != "" {
		t.Errorf("metadata %s %s %s", a.Name(), a.Version(), a.AppVersion())
	}
}
