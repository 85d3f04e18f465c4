package helm

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	chartloader "helm.sh/helm/v4/pkg/chart/v2/loader"
	release "helm.sh/helm/v4/pkg/release/v1"
	releaseutil "helm.sh/helm/v4/pkg/release/v1/util"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/converge-gitops/converge/internal/testcharts"
)

type parityCase struct {
	name        string
	chart       string
	values      []ValuesSource
	inline      string
	apiVersions []string
	kubeVersion string
	isUpgrade   bool
	wantHooks   int      // at least this many hooks, so a case cannot pass by rendering none
	want        []string // "Kind name" of objects (or hooks, with their events) the values must bring
	chartFile   string   // a values file of the chart, as the first layer
}

func parityCases() []parityCase {
	return []parityCase{
		{name: "podinfo defaults", chart: testcharts.Podinfo, wantHooks: 3, kubeVersion: "v1.35.0"},
		{
			name: "podinfo hooks, redis, 3 replicas", chart: testcharts.Podinfo, wantHooks: 5, kubeVersion: "v1.35.0",
			values: []ValuesSource{{Name: "values.yaml", Data: []byte(
				"hooks:\n  preInstall:\n    job:\n      enabled: true\n  postInstall:\n    job:\n      enabled: true\n      hookDeletePolicy: before-hook-creation\n")}},
			inline: `{"redis":{"enabled":true},"replicaCount":3}`,
			want: []string{"Deployment rel-podinfo-redis", "Job rel-podinfo-pre-install [pre-install] [hook-succeeded hook-failed]",
				"Job rel-podinfo-post-install [post-install] [before-hook-creation]"},
		},
		{
			name: "podinfo prod values, upgrade, ServiceMonitor API", chart: testcharts.Podinfo, wantHooks: 3,
			chartFile: "values-prod.yaml", want: []string{"ServiceMonitor rel-podinfo", "HorizontalPodAutoscaler rel-podinfo"},
			inline:      `{"serviceMonitor":{"enabled":true},"hpa":{"enabled":true}}`,
			apiVersions: []string{"monitoring.coreos.com/v1"}, kubeVersion: "v1.35.0", isUpgrade: true,
		},
		{name: "ingress-nginx defaults", chart: testcharts.IngressNginx, wantHooks: 7, kubeVersion: "v1.35.0"},
		{
			name: "ingress-nginx DaemonSet with metrics", chart: testcharts.IngressNginx, wantHooks: 7,
			want: []string{"DaemonSet rel-ingress-nginx-controller", "ServiceMonitor rel-ingress-nginx-controller",
				"Service rel-ingress-nginx-controller-metrics"},
			inline:      `{"controller":{"kind":"DaemonSet","metrics":{"enabled":true,"serviceMonitor":{"enabled":true}}}}`,
			apiVersions: []string{"monitoring.coreos.com/v1/ServiceMonitor", "monitoring.coreos.com/v1"},
			kubeVersion: "v1.35.0",
		},
	}
}

// TestRenderMatchesHelmInstall renders the real charts with Render and with the Helm SDK's
// own install (dry run, client only) and compares the parsed objects, hooks and notes.
func TestRenderMatchesHelmInstall(t *testing.T) {
	for _, tc := range parityCases() {
		t.Run(tc.name, func(t *testing.T) {
			dir, err := testcharts.CopyTo(t.TempDir(), tc.chart)
			if err != nil {
				t.Fatal(err)
			}
			layers := tc.values
			if tc.chartFile != "" {
				b, err := os.ReadFile(filepath.Join(dir, tc.chartFile))
				if err != nil {
					t.Fatal(err)
				}
				layers = append([]ValuesSource{{Name: tc.chartFile, Data: b}}, layers...)
			}
			vals, err := BuildValues(layers, []byte(tc.inline))
			if err != nil {
				t.Fatal(err)
			}
			ours := renderOurs(t, dir, tc, vals)
			theirs := renderHelm(t, dir, tc, vals)
			if len(ours.Hooks) < tc.wantHooks {
				t.Errorf("%d hooks, want at least %d", len(ours.Hooks), tc.wantHooks)
			}
			compareRelease(t, ours, theirs)
			checkWanted(t, ours, tc.want)
		})
	}
}

func renderOurs(t *testing.T, dir string, tc parityCase, vals map[string]any) *Release {
	t.Helper()
	c, err := LoadChart(dir)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rel, err := Render(ctx, c, Options{
		ReleaseName: "rel", Namespace: "apps", Values: vals, Revision: 1, IsUpgrade: tc.isUpgrade,
		KubeVersion: tc.kubeVersion, APIVersions: tc.apiVersions,
	})
	if err != nil {
		t.Fatal(err)
	}
	return rel
}

func renderHelm(t *testing.T, dir string, tc parityCase, vals map[string]any) *release.Release {
	t.Helper()
	ch, err := chartloader.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	r, err := testcharts.InstallDryRun(context.Background(), ch, vals, testcharts.HelmInstall{
		ReleaseName: "rel", Namespace: "apps", IncludeCRDs: true, IsUpgrade: tc.isUpgrade,
		KubeVersion: tc.kubeVersion, APIVersions: tc.apiVersions,
	})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// randomSuffix is the one random part of these charts: podinfo's test Pods are named
// <fullname>-<kind>-test-{{ randAlphaNum 5 | lower }}. Both sides' names are normalised to
// a placeholder after checking the suffix has that shape; everything else must be equal.
var randomSuffix = regexp.MustCompile(`-test-[a-z0-9]{5}$`)

func normalise(t *testing.T, obj *unstructured.Unstructured) *unstructured.Unstructured {
	t.Helper()
	obj = obj.DeepCopy()
	if name := obj.GetName(); strings.Contains(name, "-test-") {
		if !randomSuffix.MatchString(name) {
			t.Errorf("test object %q: no random suffix of 5", name)
		}
		obj.SetName(randomSuffix.ReplaceAllString(name, "-test-RANDOM"))
	}
	return obj
}

func key(o *unstructured.Unstructured) string {
	return fmt.Sprintf("%s %s %s/%s", o.GetAPIVersion(), o.GetKind(), o.GetNamespace(), o.GetName())
}

func compareRelease(t *testing.T, ours *Release, theirs *release.Release) {
	t.Helper()
	var helmObjs []*unstructured.Unstructured
	for _, doc := range releaseutil.SplitManifests(theirs.Manifest) {
		obj, err := decodeObject("helm manifest", doc)
		if err != nil {
			t.Fatal(err)
		}
		if obj != nil {
			helmObjs = append(helmObjs, obj)
		}
	}
	if len(ours.Objects) == 0 {
		t.Fatal("no objects rendered")
	}
	want := byKey(t, helmObjs)
	got := byKey(t, append(append([]*unstructured.Unstructured{}, ours.CRDs...), ours.Objects...))
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("objects differ from Helm's (-helm +ours):\n%s", diff)
	}
	checkHookOrder(t, ours.Hooks)
	if diff := cmp.Diff(sortViews(helmHooks(t, theirs.Hooks)), sortViews(ourHooks(t, ours.Hooks))); diff != "" {
		t.Errorf("hooks differ from Helm's (-helm +ours):\n%s", diff)
	}
	if ours.Notes != theirs.Info.Notes {
		t.Errorf("notes differ:\n%s\n---\n%s", ours.Notes, theirs.Info.Notes)
	}
}

func byKey(t *testing.T, objs []*unstructured.Unstructured) map[string]map[string]any {
	out := map[string]map[string]any{}
	for _, o := range objs {
		o = normalise(t, o)
		if _, dup := out[key(o)]; dup && !strings.Contains(key(o), "RANDOM") {
			t.Errorf("duplicate object %s", key(o))
		}
		out[key(o)] = o.Object
	}
	return out
}

type hookView struct {
	Key      string
	Events   []string
	Weight   int
	Policies []string
	Object   map[string]any
}

// helmHooks puts Helm's hooks in the order Helm runs them (kind order, then stably by weight
// and name) with the default delete policy Helm applies when it runs one.
func helmHooks(t *testing.T, hooks []*release.Hook) []hookView {
	sorted := append([]*release.Hook(nil), hooks...)
	sort.SliceStable(sorted, func(i, j int) bool {
		if sorted[i].Weight == sorted[j].Weight {
			return sorted[i].Name < sorted[j].Name
		}
		return sorted[i].Weight < sorted[j].Weight
	})
	var out []hookView
	for _, h := range sorted {
		obj, err := decodeObject(h.Path, h.Manifest)
		if err != nil {
			t.Fatal(err)
		}
		v := hookView{Weight: h.Weight}
		for _, e := range h.Events {
			v.Events = append(v.Events, string(e))
		}
		for _, p := range h.DeletePolicies {
			v.Policies = append(v.Policies, string(p))
		}
		if len(v.Policies) == 0 {
			v.Policies = []string{"before-hook-creation"}
		}
		obj = normalise(t, obj)
		v.Key, v.Object = key(obj), obj.Object
		out = append(out, v)
	}
	return out
}

func ourHooks(t *testing.T, hooks []Hook) []hookView {
	var out []hookView
	for _, h := range hooks {
		obj := normalise(t, h.Object)
		out = append(out, hookView{Key: key(obj), Events: h.Events, Weight: h.Weight, Policies: h.DeletePolicies, Object: obj.Object})
	}
	return out
}

// sortViews orders hooks for comparison: podinfo's test Pods have random names, so two with
// the same weight may run in either order; the order itself is checked by checkHookOrder.
func sortViews(v []hookView) []hookView {
	sort.SliceStable(v, func(i, j int) bool {
		if v[i].Weight != v[j].Weight {
			return v[i].Weight < v[j].Weight
		}
		if v[i].Key != v[j].Key {
			return v[i].Key < v[j].Key
		}
		return fmt.Sprint(v[i].Object) < fmt.Sprint(v[j].Object)
	})
	return v
}

// checkHookOrder asserts Helm's run order: by weight, then by name.
func checkHookOrder(t *testing.T, hooks []Hook) {
	t.Helper()
	for i := 1; i < len(hooks); i++ {
		a, b := hooks[i-1], hooks[i]
		if a.Weight > b.Weight || a.Weight == b.Weight && a.Object.GetName() > b.Object.GetName() {
			t.Errorf("hook %d (%s, weight %d) runs before %s (weight %d)", i, a.Object.GetName(), a.Weight, b.Object.GetName(), b.Weight)
		}
	}
}

func checkWanted(t *testing.T, rel *Release, want []string) {
	t.Helper()
	have := map[string]bool{}
	for _, o := range rel.Objects {
		have[o.GetKind()+" "+o.GetName()] = true
	}
	for _, h := range rel.Hooks {
		have[fmt.Sprintf("%s %s %v %v", h.Object.GetKind(), h.Object.GetName(), h.Events, h.DeletePolicies)] = true
	}
	for _, w := range want {
		if !have[w] {
			t.Errorf("rendered no %s; have %v", w, have)
		}
	}
	rank := func(kind string) int {
		for i, k := range releaseutil.InstallOrder {
			if k == kind {
				return i
			}
		}
		return len(releaseutil.InstallOrder)
	}
	for i := 1; i < len(rel.Objects); i++ {
		if a, b := rel.Objects[i-1].GetKind(), rel.Objects[i].GetKind(); rank(a) > rank(b) {
			t.Errorf("a %s before a %s: not Helm's install order", a, b)
		}
	}
}
