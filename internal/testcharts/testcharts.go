// Package testcharts holds real public Helm charts, unmodified, for tests and benchmarks:
// podinfo (hooks, helm test Pods) and ingress-nginx (cluster-scoped RBAC, admission-webhook
// hook Jobs with delete policies). README.md says where each comes from.
package testcharts

import (
	"embed"
	"io/fs"
	"os"
	"path"
	"path/filepath"
)

//go:embed all:podinfo all:ingress-nginx
var charts embed.FS

// Names of the charts held here.
const (
	Podinfo      = "podinfo"
	IngressNginx = "ingress-nginx"
)

// FS returns the files of one chart, rooted at its Chart.yaml's directory.
func FS(name string) fs.FS {
	sub, err := fs.Sub(charts, name)
	if err != nil {
		panic(err)
	}
	return sub
}

// CopyTo writes the chart name into dir/name and returns that path.
func CopyTo(dir, name string) (string, error) {
	root := filepath.Join(dir, name)
	err := fs.WalkDir(charts, name, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		dst := filepath.Join(dir, filepath.FromSlash(p))
		if d.IsDir() {
			return os.MkdirAll(dst, 0o755)
		}
		b, err := charts.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(dst, b, 0o644)
	})
	return root, err
}

// Files returns the files of the chart name by path under dir ("" for the chart's root),
// for a test that commits the chart to a repository or packages it.
func Files(name, dir string) (map[string]string, error) {
	files := map[string]string{}
	chart := FS(name)
	err := fs.WalkDir(chart, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(chart, p)
		files[path.Join(dir, p)] = string(b)
		return err
	})
	return files, err
}
