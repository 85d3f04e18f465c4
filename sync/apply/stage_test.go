package apply

import (
	"testing"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

func obj(apiVersion, kind, namespace, name string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetAPIVersion(apiVersion)
	u.SetKind(kind)
	u.SetNamespace(namespace)
	u.SetName(name)
	return u
}

func TestStage(t *testing.T) {
	tests := []struct {
		name string
		obj  *unstructured.Unstructured
		want int
	}{
		{name: "CRD", obj: obj("apiextensions.k8s.io/v1", "CustomResourceDefinition", "", "widgets.example.com"), want: DefinitionStage},
		{name: "Namespace", obj: obj("v1", "Namespace", "", "shop"), want: DefinitionStage},
		{name: "ClusterRole", obj: obj("rbac.authorization.k8s.io/v1", "ClusterRole", "", "reader"), want: DefinitionStage},
		{name: "StorageClass", obj: obj("storage.k8s.io/v1", "StorageClass", "", "fast"), want: ClassStage},
		{name: "IngressClass", obj: obj("networking.k8s.io/v1", "IngressClass", "", "nginx"), want: ClassStage},
		{name: "ClusterRoleBinding", obj: obj("rbac.authorization.k8s.io/v1", "ClusterRoleBinding", "", "reader"), want: RestStage},
		{name: "Deployment", obj: obj("apps/v1", "Deployment", "shop", "web"), want: RestStage},
		{name: "a Namespace kind of another group", obj: obj("example.com/v1", "Namespace", "", "x"), want: RestStage},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			g.Expect(Stage(tt.obj)).To(Equal(tt.want))
		})
	}
}

func TestStagesKeepsOrderWithinAStage(t *testing.T) {
	g := NewWithT(t)
	web := obj("apps/v1", "Deployment", "shop", "web")
	ns := obj("v1", "Namespace", "", "shop")
	sc := obj("storage.k8s.io/v1", "StorageClass", "", "fast")
	cm := obj("v1", "ConfigMap", "shop", "conf")
	crd := obj("apiextensions.k8s.io/v1", "CustomResourceDefinition", "", "widgets.example.com")

	stages := Stages([]*unstructured.Unstructured{web, ns, sc, cm, crd})
	g.Expect(stages).To(HaveLen(3))
	g.Expect(stages[DefinitionStage]).To(Equal([]*unstructured.Unstructured{ns, crd}))
	g.Expect(stages[ClassStage]).To(Equal([]*unstructured.Unstructured{sc}))
	g.Expect(stages[RestStage]).To(Equal([]*unstructured.Unstructured{web, cm}))

	g.Expect(Stages(nil)).To(HaveLen(3), "one slice per stage, even empty")
}

func TestExcludedAndForced(t *testing.T) {
	tests := []struct {
		name         string
		annotations  map[string]string
		wantExcluded bool
		wantForced   bool
	}{
		{name: "none"},
		{name: "reconcile disabled", annotations: map[string]string{"converge.dev/reconcile": "disabled"}, wantExcluded: true},
		{name: "reconcile enabled", annotations: map[string]string{"converge.dev/reconcile": "enabled"}},
		{name: "force enabled", annotations: map[string]string{ForceAnnotation: "enabled"}, wantForced: true},
		{name: "force other", annotations: map[string]string{ForceAnnotation: "true"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			o := obj("v1", "ConfigMap", "shop", "conf")
			o.SetAnnotations(tt.annotations)
			g.Expect(Excluded(o)).To(Equal(tt.wantExcluded))
			g.Expect(Forced(o)).To(Equal(tt.wantForced))
		})
	}
	g := NewWithT(t)
	g.Expect(Excluded(nil)).To(BeFalse(), "no live object")
	g.Expect(Forced(nil)).To(BeFalse(), "no live object")
}
