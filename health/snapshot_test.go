package health

import (
	"testing"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
)

func TestStatusOf(t *testing.T) {
	deploy := func(ready int64) *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "apps/v1", "kind": "Deployment",
			"metadata": map[string]any{"name": "web", "namespace": "shop", "generation": int64(1)},
			"spec":     map[string]any{"replicas": int64(2)},
			"status": map[string]any{"observedGeneration": int64(1), "replicas": int64(2), "updatedReplicas": int64(2),
				"readyReplicas": ready, "availableReplicas": ready, "conditions": []any{
					map[string]any{"type": "Available", "status": "True"},
					map[string]any{"type": "Progressing", "status": "True", "reason": "NewReplicaSetAvailable"}}},
		}}
	}
	widget := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "example.com/v1", "kind": "Widget",
		"metadata": map[string]any{"name": "w", "namespace": "shop"},
		"status":   map[string]any{"phase": "Broken"},
	}}
	exprs := []convergev1.CustomHealthCheck{{APIVersion: "example.com/v1", Kind: "Widget",
		Current: "self.status.phase == 'Ok'", Failed: "self.status.phase == 'Broken'"}}
	for _, tc := range []struct {
		name  string
		obj   *unstructured.Unstructured
		exprs []convergev1.CustomHealthCheck
		want  Status
	}{
		{name: "a ready Deployment is Current", obj: deploy(2), want: Current},
		{name: "a Deployment rolling out is InProgress", obj: deploy(1), want: InProgress},
		{name: "a CEL rule decides its kind", obj: widget, exprs: exprs, want: Failed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			got, _, err := StatusOf(tc.obj, tc.exprs)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(got).To(Equal(tc.want))
		})
	}
	_, _, err := StatusOf(widget, []convergev1.CustomHealthCheck{{APIVersion: "example.com/v1", Kind: "Widget", Current: "self.("}})
	NewWithT(t).Expect(err).To(MatchError(ErrInvalidExpr))
}
