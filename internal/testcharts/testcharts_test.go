package testcharts

import (
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
