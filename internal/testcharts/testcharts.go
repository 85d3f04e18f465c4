// Package testcharts holds real public Helm charts, unmodified, for tests and benchmarks:
// podinfo (hooks, helm test Pods) and ingress-nginx (cluster-scoped RBAC, admission-webhook
// hook Jobs with delete policies). README.md says where each comes from.
package testcharts

import (
	"context"
	"embed"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"

	"helm.sh/helm/v4/pkg/action"
	"helm.sh/helm/v4/pkg/chart/common"
	chartv2 "helm.sh/helm/v4/pkg/chart/v2"
	release "helm.sh/helm/v4/pkg/release/v1"
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

// HelmInstall says how InstallDryRun runs `helm install --dry-run=client`.
type HelmInstall struct {
	ReleaseName, Namespace string
	// KubeVersion is .Capabilities.KubeVersion ("v1.X.Y"; empty: Helm's default), and
	// APIVersions are added to Helm's default .Capabilities.APIVersions.
	KubeVersion string
	APIVersions []string
	// IncludeCRDs puts the chart's crds/ into the manifest; IsUpgrade renders an upgrade.
	IncludeCRDs, IsUpgrade bool
}

// InstallDryRun renders ch with values as `helm install --dry-run=client` does, through
// Helm's own SDK: the reference a render of converge's is compared with.
func InstallDryRun(ctx context.Context, ch *chartv2.Chart, values map[string]any, o HelmInstall) (*release.Release, error) {
	inst := action.NewInstall(action.NewConfiguration())
	inst.DryRunStrategy = action.DryRunClient
	inst.ReleaseName, inst.Namespace = o.ReleaseName, o.Namespace
	inst.IncludeCRDs, inst.IsUpgrade, inst.APIVersions = o.IncludeCRDs, o.IsUpgrade, o.APIVersions
	if o.KubeVersion != "" {
		kv, err := common.ParseKubeVersion(o.KubeVersion)
		if err != nil {
			return nil, err
		}
		inst.KubeVersion = kv
	}
	rel, err := inst.RunWithContext(ctx, ch, values)
	if err != nil {
		return nil, err
	}
	r, ok := rel.(*release.Release)
	if !ok {
		return nil, fmt.Errorf("helm install --dry-run=client gave a %T", rel)
	}
	return r, nil
}
