package fleet

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
)

// benchSet is a set of n SyncTargets of the benchmark's fleet shape: a Git source, a path
// and a kubeconfig Secret from the element.
func benchSet(b *testing.B, n int) (*convergev1.SyncTargetSet, []Params) {
	spec, err := json.Marshal(map[string]any{
		"source":     map[string]any{"url": "https://git.example.com/fleet.git", "ref": map[string]any{"branch": "main"}, "interval": "1h"},
		"kubeConfig": map[string]any{"secretRef": map[string]any{"name": "{{ .cluster }}"}},
		"path":       "{{ .path }}", "prune": true,
	})
	if err != nil {
		b.Fatal(err)
	}
	set := &convergev1.SyncTargetSet{
		ObjectMeta: metav1.ObjectMeta{Name: "fleet", Namespace: "team", UID: "6b1c6c57-0d0e-4c3e-9a57-8c1d1b0f0a01"},
		Spec: convergev1.SyncTargetSetSpec{Template: convergev1.SyncTargetTemplate{
			Metadata: convergev1.SyncTargetTemplateMeta{Name: "{{ .name }}", Labels: map[string]string{"tier": "web"}},
			Spec:     apiextensionsv1.JSON{Raw: spec},
		}},
	}
	params := make([]Params, n)
	for i := range n {
		params[i] = Params{"name": fmt.Sprintf("fleet-%04d", i), "path": fmt.Sprintf("many/%04d", i), "cluster": fmt.Sprintf("cluster-%d", i%2)}
	}
	return set, params
}

// What a set's reconcile spends in process before its first write, for 100 SyncTargets:
// rendering, then validating each rendering (locally and against the CRD's schema and CEL
// rules).
func BenchmarkRenderAndValidate100(b *testing.B) {
	set, params := benchSet(b, 100)
	schema, err := builtinSchema()
	if err != nil {
		b.Fatal(err)
	}
	r := &Reconciler{Schema: schema}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		rendered, err := Render(ctx, set, params, Limits{})
		if err != nil {
			b.Fatal(err)
		}
		targets := make([]*Target, len(rendered))
		for i, rd := range rendered {
			// Live is set: the SyncTargets exist (a template change), claim reads nothing.
			targets[i] = &Target{Rendered: rd, Live: &convergev1.SyncTarget{}}
		}
		if err := r.validate(ctx, set, targets); err != nil {
			b.Fatal(err)
		}
	}
}
