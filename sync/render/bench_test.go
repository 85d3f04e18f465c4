package render

import (
	"fmt"
	"strings"
	"testing"
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
