package testcharts

import (
	"io/fs"
	"os"
	"path/filepath"
	"testing"
)

func TestCopyToWritesEveryFileOfTheChart(t *testing.T) {
	for _, name := range []string{Podinfo, IngressNginx} {
		root, err := CopyTo(t.TempDir(), name)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range []string{"Chart.yaml", "values.yaml", ".helmignore", "templates/_helpers.tpl"} {
			if _, err := os.Stat(filepath.Join(root, f)); err != nil {
				t.Errorf("%s: %v", name, err)
			}
		}
	}
}

func TestFilesHoldsEveryFileUnderDir(t *testing.T) {
	files, err := Files(Podinfo, "deploy")
	if err != nil {
		t.Fatal(err)
	}
	want, err := fs.ReadFile(FS(Podinfo), "templates/_helpers.tpl")
	if err != nil {
		t.Fatal(err)
	}
	if files["deploy/templates/_helpers.tpl"] != string(want) {
		t.Errorf("deploy/templates/_helpers.tpl: want the chart's file, got %q", files["deploy/templates/_helpers.tpl"])
	}
	for _, f := range []string{"deploy/Chart.yaml", "deploy/values.yaml", "deploy/.helmignore"} {
		if _, ok := files[f]; !ok {
			t.Errorf("no %s among %d files", f, len(files))
		}
	}
	root, err := Files(Podinfo, "")
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := root["Chart.yaml"]; !ok || len(root) != len(files) {
		t.Errorf("at the root: want Chart.yaml and %d files, got %d", len(files), len(root))
	}
}
