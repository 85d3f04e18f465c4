package main

import (
	"testing"

	"github.com/converge-gitops/converge/internal/testcharts"
	"github.com/converge-gitops/converge/sync/render"
)

// BenchmarkRenderIngressNginxWarm renders the real ingress-nginx chart as a SyncTarget
// would, with Helm options, after a first render: the "render of ingress-nginx warm" of
// the helm workload (target ≤ 100 ms per render). Run it with
//
//	go test ./bench/ -run '^$' -bench RenderIngressNginxWarm -benchtime 20x
func BenchmarkRenderIngressNginxWarm(b *testing.B) {
	root := b.TempDir()
	if _, err := testcharts.CopyTo(root, testcharts.IngressNginx); err != nil {
		b.Fatal(err)
	}
	opts := render.Options{
		Root: root, Path: testcharts.IngressNginx, OwnerName: "ingress", OwnerNamespace: "bench",
		Helm: &render.HelmOptions{ReleaseName: "ingress-nginx", Namespace: "ingress-nginx", KubeVersion: "v1.34.0"},
	}
	first, err := render.Render(b.Context(), opts)
	if err != nil {
		b.Fatal(err)
	}
	if len(first.Objects) < 10 || !first.Chart {
		b.Fatalf("ingress-nginx rendered %d objects (chart %v), want a chart's dozens", len(first.Objects), first.Chart)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := render.Render(b.Context(), opts); err != nil {
			b.Fatal(err)
		}
	}
}
