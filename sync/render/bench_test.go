package render

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/converge-gitops/converge/internal/testcharts"
)

// benchRepo writes 1 000 ConfigMaps and 100 Deployments, one per file, and, when
// kustomize is set, a kustomization listing them all.
func benchRepo(b *testing.B, kustomize bool) string {
	b.Helper()
	root, _ := newRepo(b)
	var res []string
	for i := 0; i < 1000; i++ {
		p := fmt.Sprintf("configmaps/cm-%04d.yaml", i)
		write(b, root, p, cm(fmt.Sprintf("cm-%04d", i), strings.Repeat("v", 64)))
		res = append(res, p)
	}
	for i := 0; i < 100; i++ {
		p := fmt.Sprintf("deployments/deploy-%03d.yaml", i)
		write(b, root, p, deploy(fmt.Sprintf("web-%03d", i)))
		res = append(res, p)
	}
	if kustomize {
		write(b, root, "kustomization.yaml", "namePrefix: prod-\nlabels: [{pairs: {team: shop}}]\nresources:\n- "+strings.Join(res, "\n- ")+"\n")
	}
	return root
}

// BenchmarkRender renders 1 000 ConfigMaps + 100 Deployments from the same
// read-only checkout, as a kustomization and as plain YAML.
//
//	go test ./sync/render -run '^$' -bench BenchmarkRender -benchmem
func BenchmarkRender(b *testing.B) {
	for _, mode := range []struct {
		name      string
		kustomize bool
	}{{"kustomize", true}, {"plain", false}} {
		b.Run(mode.name, func(b *testing.B) {
			root := benchRepo(b, mode.kustomize)
			opts := Options{Root: root, TargetNamespace: "shop", OwnerName: "shop", OwnerNamespace: "team-a"}
			res, err := render(opts) // warm up: the schema parse is once per process
			if err != nil {
				b.Fatal(err)
			}
			if len(res.Objects) != 1100 || res.Kustomized != mode.kustomize {
				b.Fatalf("rendered %d objects, kustomized=%v", len(res.Objects), res.Kustomized)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				if _, err := render(opts); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkChartRender renders podinfo and ingress-nginx from their directories as the daemon does, in
// process and through a warm render worker: the worker's cost is the ratio of the two
// (the request, the objects back as JSON, the worker's own GC).
func BenchmarkChartRender(b *testing.B) {
	p, err := NewPool(PoolOptions{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(p.Close)
	for _, chart := range []string{testcharts.Podinfo, testcharts.IngressNginx} {
		root := b.TempDir()
		dir, err := testcharts.CopyTo(root, chart)
		if err != nil {
			b.Fatal(err)
		}
		opts := Options{Root: root, Path: filepath.Base(dir), OwnerName: "bench", OwnerNamespace: "bench",
			Helm: &HelmOptions{ReleaseName: "bench", Namespace: "bench"}}
		for _, way := range []struct {
			name   string
			render func() (*Result, error)
		}{
			{"in-process", func() (*Result, error) { return Render(context.Background(), opts) }},
			{"worker", func() (*Result, error) { return p.Render(context.Background(), "bench", opts) }},
		} {
			b.Run(chart+"/"+way.name, func(b *testing.B) {
				if _, err := way.render(); err != nil { // warm: the worker started, schemas parsed
					b.Fatal(err)
				}
				b.ReportAllocs()
				b.ResetTimer()
				for b.Loop() {
					res, err := way.render()
					if err != nil {
						b.Fatal(err)
					}
					if len(res.Objects) == 0 {
						b.Fatal("no objects")
					}
				}
			})
		}
	}
}
