package render

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
	"github.com/converge-gitops/converge/internal/testcharts"
	"github.com/converge-gitops/converge/sync/helm"
)

// chartRepo writes a Git-like tree holding the podinfo chart at charts/podinfo and a
// values file elsewhere in the repository.
func chartRepo(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	if _, err := testcharts.CopyTo(filepath.Join(root, "charts"), testcharts.Podinfo); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(root, "env"), 0o755); err != nil {
		t.Fatal(err)
	}
	prod := "replicaCount: 3\nhooks:\n  preInstall:\n    job:\n      enabled: true\n"
	if err := os.WriteFile(filepath.Join(root, "env", "prod.yaml"), []byte(prod), 0o644); err != nil {
		t.Fatal(err)
	}
	return root
}

func findObject(t *testing.T, res *Result, kind, name string) map[string]any {
	t.Helper()
	for _, o := range res.Objects {
		if o.GetKind() == kind && o.GetName() == name {
			return o.Object
		}
	}
	t.Fatalf("no %s %s among %d objects", kind, name, len(res.Objects))
	return nil
}

func TestChartInGitRendersWithHelm(t *testing.T) {
	root := chartRepo(t)
	res, err := Render(context.Background(), Options{Root: root, Path: "charts/podinfo", OwnerName: "web", OwnerNamespace: "shop",
		Helm: &HelmOptions{ReleaseName: "web", Namespace: "shop", ValuesFiles: []string{"../../env/prod.yaml"},
			Values: []helm.ValuesSource{{Name: "ConfigMap/ui[values.yaml]", Data: []byte("ui:\n  message: hello\n")}},
			Inline: []byte(`{"replicaCount":4}`)}})
	if err != nil {
		t.Fatal(err)
	}
	if !res.Chart || res.Kustomized {
		t.Fatalf("Chart = %v, Kustomized = %v; want a chart render", res.Chart, res.Kustomized)
	}
	dep := findObject(t, res, "Deployment", "web-podinfo")
	meta := dep["metadata"].(map[string]any)
	if meta["namespace"] != "shop" {
		t.Errorf("namespace %v, want the release's", meta["namespace"])
	}
	labels := meta["labels"].(map[string]any)
	if labels[convergev1.NameLabel] != "web" || labels[convergev1.NamespaceLabel] != "shop" {
		t.Errorf("owner labels missing: %v", labels)
	}
	if r := dep["spec"].(map[string]any)["replicas"]; r != int64(4) {
		t.Errorf("replicas %v (%T), want the inline 4 over the file's 3", r, r)
	}
	job := findObject(t, res, "Job", "web-podinfo-pre-install")
	if job["metadata"].(map[string]any)["labels"].(map[string]any)[HookLabel] == nil {
		t.Errorf("hook Job without %s", HookLabel)
	}
	for _, o := range res.Objects {
		if isTestEvent(o.GetAnnotations()[HookAnnotation]) {
			t.Errorf("test hook %s rendered for the daemon", o.GetName())
		}
	}
}

func isTestEvent(s string) bool { return s == "test" || s == "test-success" }

func TestChartValuesFilesStayInTheRepository(t *testing.T) {
	root := chartRepo(t)
	_, err := Render(context.Background(), Options{Root: root, Path: "charts/podinfo",
		Helm: &HelmOptions{ReleaseName: "web", Namespace: "shop", ValuesFiles: []string{"../../../etc/passwd"}}})
	if !errors.Is(err, ErrOutsideRoot) {
		t.Fatalf("err = %v, want ErrOutsideRoot", err)
	}
}

func TestChartWithoutHelmOptionsIsNotRendered(t *testing.T) {
	root := chartRepo(t)
	_, err := Render(context.Background(), Options{Root: root, Path: "charts/podinfo"})
	if err == nil {
		t.Fatal("templates read as plain YAML rendered without error")
	}
}

func TestChartGenerateNameGetsAStableName(t *testing.T) {
	root := t.TempDir()
	chart := filepath.Join(root, "c")
	files := map[string]string{
		"Chart.yaml": "apiVersion: v2\nname: c\nversion: 1.0.0\n",
		"templates/job.yaml": `apiVersion: batch/v1
kind: Job
metadata:
  generateName: migrate-
  annotations: {"helm.sh/hook": "pre-upgrade"}
spec: {template: {spec: {restartPolicy: Never, containers: [{name: m, image: busybox}]}}}
`,
	}
	for name, content := range files {
		p := filepath.Join(chart, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	render := func() string {
		res, err := Render(context.Background(), Options{Root: root, Path: "c", Helm: &HelmOptions{ReleaseName: "r", Namespace: "ns"}})
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Objects) != 1 {
			t.Fatalf("%d objects", len(res.Objects))
		}
		o := res.Objects[0]
		if o.GetGenerateName() != "" || len(o.GetName()) != len("migrate-")+8 {
			t.Fatalf("name %q generateName %q", o.GetName(), o.GetGenerateName())
		}
		return o.GetName()
	}
	if a, b := render(), render(); a != b {
		t.Fatalf("names differ between renders: %s, %s", a, b)
	}
}
