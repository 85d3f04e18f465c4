package main

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	chartloader "helm.sh/helm/v4/pkg/chart/v2/loader"
	"helm.sh/helm/v4/pkg/cli/values"
	"helm.sh/helm/v4/pkg/getter"
	release "helm.sh/helm/v4/pkg/release/v1"
	releaseutil "helm.sh/helm/v4/pkg/release/v1/util"
	"sigs.k8s.io/yaml"

	"github.com/converge-gitops/converge/internal/charttest"
	"github.com/converge-gitops/converge/internal/testcharts"
	"github.com/converge-gitops/converge/sync/render"
)

// buildChartCase is a `converge build CHART_DIR` run compared with helm install
// --dry-run=client given the same flags.
type buildChartCase struct {
	name  string
	chart string
	// files are -f values files of the chart's own directory; set, setString and setFile
	// are --set, --set-string and --set-file (a path relative to the chart directory).
	files, set, setString, setFile []string
	apiVersions                    []string
	want                           []string // "Kind/name" the flags must bring
	wantText                       []string // and text they must put in the output
}

func buildChartCases(t *testing.T) []buildChartCase {
	cases := []buildChartCase{
		{name: "podinfo defaults", chart: testcharts.Podinfo},
		{name: "podinfo values-prod.yaml", chart: testcharts.Podinfo, files: []string{"values-prod.yaml"}},
		{name: "podinfo flags", chart: testcharts.Podinfo, files: []string{"values-prod.yaml"},
			set:       []string{"replicaCount=4,redis.enabled=true", "serviceMonitor.enabled=true"},
			setString: []string{"podAnnotations.build=007"}, setFile: []string{"ui.message=message.txt"},
			apiVersions: []string{"monitoring.coreos.com/v1"},
			want:        []string{"Deployment/rel-podinfo-redis", "ServiceMonitor/rel-podinfo"}, wantText: []string{"build: \"007\"", "from a file"}},
		{name: "ingress-nginx defaults", chart: testcharts.IngressNginx},
	}
	ci, err := fs.ReadDir(testcharts.FS(testcharts.IngressNginx), "ci")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ci {
		cases = append(cases, buildChartCase{name: "ingress-nginx ci/" + e.Name(), chart: testcharts.IngressNginx,
			files: []string{"ci/" + e.Name()}, apiVersions: []string{"monitoring.coreos.com/v1", "monitoring.coreos.com/v1/ServiceMonitor"}})
	}
	return cases
}

// TestBuildChartDirectoryIsHelmTemplate: `converge build CHART_DIR` with helm template's
// flags prints what the Helm SDK's install renders with the same flags, for the real charts
// of the shared set, with and without their values files — every object and hook (test
// hooks aside), compared field by field, the namespace and converge's hook label aside.
func TestBuildChartDirectoryIsHelmTemplate(t *testing.T) {
	for _, tc := range buildChartCases(t) {
		t.Run(tc.name, func(t *testing.T) {
			dir, err := testcharts.CopyTo(t.TempDir(), tc.chart)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, "message.txt"), []byte("from a file"), 0o644); err != nil {
				t.Fatal(err)
			}
			args := []string{"build", dir, "--release-name", "rel", "--target-namespace", "shop", "--kube-version", "v1.35.0"}
			opts := values.Options{}
			for _, f := range tc.files {
				args = append(args, "-f", filepath.Join(dir, f))
				opts.ValueFiles = append(opts.ValueFiles, filepath.Join(dir, f))
			}
			for _, s := range tc.set {
				args, opts.Values = append(args, "--set", s), append(opts.Values, s)
			}
			for _, s := range tc.setString {
				args, opts.StringValues = append(args, "--set-string", s), append(opts.StringValues, s)
			}
			for _, s := range tc.setFile {
				name, file, _ := strings.Cut(s, "=")
				s = name + "=" + filepath.Join(dir, file)
				args, opts.FileValues = append(args, "--set-file", s), append(opts.FileValues, s)
			}
			for _, v := range tc.apiVersions {
				args = append(args, "--api-versions", v)
			}
			out, errOut, code := diffCLI(t, args...)
			if code != 0 {
				t.Fatalf("converge build: exit %d: %s", code, errOut)
			}
			got := objectsByID(t, out, true)
			want := helmObjects(t, dir, opts, tc.apiVersions)
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("converge build differs from the Helm SDK (-helm +converge):\n%s", diff)
			}
			for _, id := range tc.want {
				if _, ok := got[id]; !ok {
					t.Errorf("%s not rendered: the flags were not applied", id)
				}
			}
			for _, text := range tc.wantText {
				if !strings.Contains(out, text) {
					t.Errorf("%q not in the output: the flags were not applied", text)
				}
			}
			if len(got) < 2 {
				t.Errorf("%d objects rendered: too few to compare", len(got))
			}
		})
	}
}

// helmObjects are the objects and hooks (test hooks aside) of helm install --dry-run=client
// of the chart at dir with the flags of opts.
func helmObjects(t *testing.T, dir string, opts values.Options, apiVersions []string) map[string]map[string]any {
	t.Helper()
	vals, err := opts.MergeValues(getter.Providers{})
	if err != nil {
		t.Fatal(err)
	}
	ch, err := chartloader.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	rel, err := testcharts.InstallDryRun(context.Background(), ch, vals, testcharts.HelmInstall{ReleaseName: "rel",
		Namespace: "shop", KubeVersion: "v1.35.0", APIVersions: apiVersions, IncludeCRDs: true})
	if err != nil {
		t.Fatal(err)
	}
	var docs []string
	for _, m := range releaseutil.SplitManifests(rel.Manifest) {
		docs = append(docs, m)
	}
	for _, h := range rel.Hooks {
		if !slices.Contains(h.Events, release.HookTest) {
			docs = append(docs, h.Manifest)
		}
	}
	return objectsByID(t, strings.Join(docs, "\n---\n"), false)
}

// objectsByID parses multi-document YAML into objects by "Kind/name", without their
// namespace (converge gives the release's to those without one, helm template leaves it
// out) and, from converge, its hook label.
func objectsByID(t *testing.T, manifests string, fromConverge bool) map[string]map[string]any {
	t.Helper()
	out := map[string]map[string]any{}
	for _, doc := range strings.Split(manifests, "\n---") {
		obj := map[string]any{}
		if err := yaml.Unmarshal([]byte(doc), &obj); err != nil {
			t.Fatalf("%v in:\n%s", err, doc)
		}
		if len(obj) == 0 {
			continue
		}
		meta, _ := obj["metadata"].(map[string]any)
		delete(meta, "namespace")
		if labels, ok := meta["labels"].(map[string]any); ok && fromConverge {
			delete(labels, render.HookLabel)
			if len(labels) == 0 {
				delete(meta, "labels")
			}
		}
		id := fmt.Sprintf("%v/%v", obj["kind"], meta["name"])
		if _, dup := out[id]; dup {
			t.Fatalf("%s twice", id)
		}
		out[id] = obj
	}
	return out
}

// TestBuildChartOfARepository: `converge build --chart-repository URL --chart NAME
// [--chart-version V]` fetches the chart as a SyncTarget of that spec.chart would (the
// newest match of the range) and renders it as helm template, with the chart flags.
func TestBuildChartOfARepository(t *testing.T) {
	repo := charttest.NewHTTPRepo()
	t.Cleanup(repo.Close)
	for _, v := range []string{"1.0.0", "1.0.3", "1.1.0"} {
		b, err := charttest.Package("shop", charttest.Chart("shop", v))
		if err != nil {
			t.Fatal(err)
		}
		repo.Add("shop", v, b)
	}
	noCluster := []string{"--kubeconfig", filepath.Join(t.TempDir(), "absent")}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{args: []string{"--chart-version", "1.0.x"}, want: `message: hello` + "\n" + `  version: 1.0.3`},
		{args: []string{"--set", "message=hi", "--release-name", "web"}, want: `message: hi` + "\n" + `  version: 1.1.0`},
	} {
		args := append(append([]string{"build", "--chart-repository", repo.URL(), "--chart", "shop"}, tc.args...), noCluster...)
		out, errOut, code := diffCLI(t, args...)
		if code != 0 {
			t.Fatalf("%v: exit %d: %s", tc.args, code, errOut)
		}
		if !strings.Contains(out, tc.want) {
			t.Errorf("%v: output lacks %q:\n%s", tc.args, tc.want, out)
		}
	}
	out, _, _ := diffCLI(t, append([]string{"build", "--chart-repository", repo.URL(), "--chart", "shop", "--release-name", "web"}, noCluster...)...)
	if !strings.Contains(out, "name: web\n") {
		t.Errorf("the release name is not web:\n%s", out)
	}
	for _, tc := range []struct {
		args    []string
		wantErr string
	}{
		{args: []string{"--chart", "shop"}, wantErr: "--chart-repository and --chart go together"},
		{args: []string{"--chart-repository", repo.URL(), "--chart", "shop", "."}, wantErr: "either a PATH or --chart-repository"},
		{args: []string{"--chart-repository", repo.URL(), "--chart", "shop", "--chart-version", "9.x"}, wantErr: "9.x"},
	} {
		_, errOut, code := diffCLI(t, append(append([]string{"build"}, tc.args...), noCluster...)...)
		if code == 0 || !strings.Contains(errOut, tc.wantErr) {
			t.Errorf("%v: exit %d, stderr %q; want an error saying %q", tc.args, code, errOut, tc.wantErr)
		}
	}
}
