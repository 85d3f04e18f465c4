package crdkinds

import (
	"reflect"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

func TestServedKindsOfACRD(t *testing.T) {
	crd := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
		"spec": map[string]any{"group": "example.com", "names": map[string]any{"kind": "Gadget"},
			"versions": []any{
				map[string]any{"name": "v1alpha1", "served": false},
				map[string]any{"name": "v1beta1", "served": true},
				map[string]any{"name": "v1", "served": true},
			}}}}
	want := []schema.GroupVersionKind{{Group: "example.com", Version: "v1beta1", Kind: "Gadget"}, {Group: "example.com", Version: "v1", Kind: "Gadget"}}
	if got := Served(crd); !reflect.DeepEqual(got, want) {
		t.Errorf("Served = %v, want %v", got, want)
	}
	cm := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "spec": crd.Object["spec"]}}
	if got := Served(cm); got != nil {
		t.Errorf("a ConfigMap serves %v", got)
	}
}
