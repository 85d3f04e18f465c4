package helm

import (
	"context"
	"testing"

	"github.com/converge-gitops/converge/internal/testcharts"
)

// BenchmarkRenderIngressNginx renders ingress-nginx's defaults with the chart loaded once.
func BenchmarkRenderIngressNginx(b *testing.B) {
	dir, err := testcharts.CopyTo(b.TempDir(), testcharts.IngressNginx)
	if err != nil {
		b.Fatal(err)
	}
	c, err := LoadChart(dir)
	if err != nil {
		b.Fatal(err)
	}
	opts := Options{ReleaseName: "bench", Namespace: "ingress", KubeVersion: "v1.35.0", Values: map[string]any{}}
	b.ReportAllocs()
	for b.Loop() {
		rel, err := Render(context.Background(), c, opts)
		if err != nil {
			b.Fatal(err)
		}
		if len(rel.Objects) == 0 {
			b.Fatal("no objects")
		}
	}
}
