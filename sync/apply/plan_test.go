package apply

import (
	"errors"
	"testing"

	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/yaml"
)

func parse(t *testing.T, s string) *unstructured.Unstructured {
	t.Helper()
	u := &unstructured.Unstructured{}
	if err := yaml.Unmarshal([]byte(s), &u.Object); err != nil {
		t.Fatal(err)
	}
	return u
}

func TestDrifted(t *testing.T) {
	const live = `apiVersion: v1
kind: ConfigMap
metadata:
  name: conf
  namespace: shop
  resourceVersion: "7"
  labels: {app: web}
  annotations: {note: a}
  managedFields: [{manager: converge}]
data: {mode: blue}
`
	tests := []struct {
		name   string
		dryRun string
		want   bool
	}{
		{name: "same", dryRun: live, want: false},
		{name: "other metadata only", dryRun: `apiVersion: v1
kind: ConfigMap
metadata:
  name: conf
  namespace: shop
  resourceVersion: "8"
  labels: {app: web}
  annotations: {note: a}
  managedFields: [{manager: converge}, {manager: kubectl}]
data: {mode: blue}
`, want: false},
		{name: "data", dryRun: `apiVersion: v1
kind: ConfigMap
metadata: {name: conf, namespace: shop, labels: {app: web}, annotations: {note: a}}
data: {mode: green}
`, want: true},
		{name: "labels", dryRun: `apiVersion: v1
kind: ConfigMap
metadata: {name: conf, namespace: shop, labels: {app: web, tier: front}, annotations: {note: a}}
data: {mode: blue}
`, want: true},
		{name: "annotations", dryRun: `apiVersion: v1
kind: ConfigMap
metadata: {name: conf, namespace: shop, labels: {app: web}}
data: {mode: blue}
`, want: true},
		{name: "status only", dryRun: `apiVersion: v1
kind: ConfigMap
metadata: {name: conf, namespace: shop, labels: {app: web}, annotations: {note: a}}
data: {mode: blue}
status: {phase: whatever}
`, want: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			g.Expect(Drifted(parse(t, live), parse(t, tt.dryRun))).To(Equal(tt.want))
		})
	}
}

func TestPendingNote(t *testing.T) {
	change := []*unstructured.Unstructured{
		parse(t, `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: widgets.example.com}
spec:
  group: example.com
  names: {kind: Widget, plural: widgets}
`),
		obj("v1", "Namespace", "", "fresh"),
	}
	noKind := &meta.NoKindMatchError{GroupKind: schema.GroupKind{Group: "example.com", Kind: "Widget"}}
	noNamespace := func(ns string) error {
		return apierrors.NewNotFound(schema.GroupResource{Resource: "namespaces"}, ns)
	}
	tests := []struct {
		name    string
		pending *Pending
		obj     *unstructured.Unstructured
		err     error
		want    string
	}{
		{name: "kind of the change", pending: PendingOf(change), obj: obj("example.com/v1", "Widget", "shop", "w"), err: noKind, want: PendingKindNote},
		{name: "kind not of the change", pending: PendingOf(change), obj: obj("other.com/v1", "Gadget", "shop", "g"),
			err: &meta.NoKindMatchError{GroupKind: schema.GroupKind{Group: "other.com", Kind: "Gadget"}}},
		{name: "namespace of the change", pending: PendingOf(change), obj: obj("v1", "ConfigMap", "fresh", "c"), err: noNamespace("fresh"), want: PendingNamespaceNote},
		{name: "namespace not of the change", pending: PendingOf(change), obj: obj("v1", "ConfigMap", "gone", "c"), err: noNamespace("gone")},
		{name: "another error", pending: PendingOf(change), obj: obj("v1", "ConfigMap", "fresh", "c"), err: errors.New("boom")},
		{name: "no pending (an apply)", obj: obj("example.com/v1", "Widget", "shop", "w"), err: noKind},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			g.Expect(tt.pending.note(tt.obj, tt.err)).To(Equal(tt.want))
		})
	}
}
