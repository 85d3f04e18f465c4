package diff

import (
	"testing"

	. "github.com/onsi/gomega"
)

// TestOrderIsTheDaemonsStageOrder: objects are listed in the order the daemon applies
// them: CRDs, Namespaces and ClusterRoles, then class definitions, then the rest; by
// group, kind, namespace and name within a stage.
func TestOrderIsTheDaemonsStageOrder(t *testing.T) {
	g := NewWithT(t)
	objects := []Object{
		{APIVersion: "apps/v1", Kind: "Deployment", Namespace: "shop", Name: "web"},
		{APIVersion: "networking.k8s.io/v1", Kind: "IngressClass", Name: "nginx"},
		{APIVersion: "v1", Kind: "ConfigMap", Namespace: "shop", Name: "conf"},
		{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "ClusterRoleBinding", Name: "reader"},
		{APIVersion: "storage.k8s.io/v1", Kind: "StorageClass", Name: "fast"},
		{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "ClusterRole", Name: "reader"},
		{APIVersion: "apiextensions.k8s.io/v1", Kind: "CustomResourceDefinition", Name: "widgets.example.com"},
		{APIVersion: "v1", Kind: "Namespace", Name: "shop"},
	}
	sortObjects(objects)
	var got []string
	for _, o := range objects {
		got = append(got, o.Ref())
	}
	g.Expect(got).To(Equal([]string{
		// Stage 0: what later objects need.
		"v1 Namespace shop",
		"apiextensions.k8s.io/v1 CustomResourceDefinition widgets.example.com",
		"rbac.authorization.k8s.io/v1 ClusterRole reader",
		// Stage 1: class definitions.
		"networking.k8s.io/v1 IngressClass nginx",
		"storage.k8s.io/v1 StorageClass fast",
		// Stage 2: the rest.
		"v1 ConfigMap shop/conf",
		"apps/v1 Deployment shop/web",
		"rbac.authorization.k8s.io/v1 ClusterRoleBinding reader",
	}))
}
