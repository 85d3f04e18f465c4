// Package crdkinds tells a CustomResourceDefinition and reads what it serves: the one
// reading of a CRD's group, kind and served versions, for the apply engine (which waits for
// them to be known) and for a chart's .Capabilities (which count them as served).
package crdkinds

import (
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// GroupKind is the group and kind of a CustomResourceDefinition.
var GroupKind = schema.GroupKind{Group: "apiextensions.k8s.io", Kind: "CustomResourceDefinition"}

// Is says whether obj is a CustomResourceDefinition.
func Is(obj *unstructured.Unstructured) bool { return obj.GroupVersionKind().GroupKind() == GroupKind }

// Served are the kinds, one per served version, that obj defines when it is a
// CustomResourceDefinition; nil for any other object.
func Served(obj *unstructured.Unstructured) []schema.GroupVersionKind {
	if !Is(obj) {
		return nil
	}
	group, _, _ := unstructured.NestedString(obj.Object, "spec", "group")
	kind, _, _ := unstructured.NestedString(obj.Object, "spec", "names", "kind")
	versions, _, _ := unstructured.NestedSlice(obj.Object, "spec", "versions")
	var out []schema.GroupVersionKind
	for _, v := range versions {
		m, _ := v.(map[string]any)
		name, _ := m["name"].(string)
		if served, _ := m["served"].(bool); served && name != "" && group != "" && kind != "" {
			out = append(out, schema.GroupVersionKind{Group: group, Version: name, Kind: kind})
		}
	}
	return out
}
