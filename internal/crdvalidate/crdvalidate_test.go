package crdvalidate

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
)

func syncTarget(spec map[string]any) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": convergev1.GroupVersion.String(), "kind": convergev1.SyncTargetKind,
		"metadata": map[string]any{"name": "shop", "namespace": "team-a"},
		"spec":     spec,
	}}
}

func source(extra map[string]any) map[string]any {
	s := map[string]any{"source": map[string]any{"url": "https://github.com/acme/shop", "ref": map[string]any{"branch": "main"}}}
	for k, v := range extra {
		s[k] = v
	}
	return s
}

func TestErrors(t *testing.T) {
	v, err := For(convergev1.SyncTargetKind)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		u    *unstructured.Unstructured
		want []string // substrings of the errors, in order; none: valid
	}{
		{name: "valid", u: syncTarget(source(nil))},
		{name: "no namespace: the request's", u: func() *unstructured.Unstructured {
			u := syncTarget(source(nil))
			u.SetNamespace("")
			return u
		}()},
		{name: "a name the API server refuses", u: func() *unstructured.Unstructured {
			u := syncTarget(source(nil))
			u.SetName("Shop")
			return u
		}(), want: []string{`metadata.name: Invalid value: "Shop"`}},
		{name: "an unknown field", u: syncTarget(source(map[string]any{"pruen": true})),
			want: []string{`spec.pruen: Forbidden: field not declared in schema`}},
		{name: "a CEL rule", u: syncTarget(source(map[string]any{"maxDeletions": "150%"})),
			want: []string{`spec.maxDeletions: Invalid value: "150%": must be a count (0 or more) or a percentage from 0% to 100%`}},
		{name: "a json.Number for an int-or-string", u: syncTarget(source(map[string]any{"maxDeletions": json.Number("2")}))},
		{name: "a blocking error: the rules not checked", u: syncTarget(source(map[string]any{"prune": "yes", "maxDeletions": "150%"})),
			want: []string{`spec.prune: Invalid value: "string": spec.prune in body must be of type boolean`, "some validation rules were not checked"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := tc.u.DeepCopy()
			errs := v.Errors(context.Background(), tc.u)
			if len(errs) != len(tc.want) {
				t.Fatalf("got %d errors, want %d: %v", len(errs), len(tc.want), errs)
			}
			for i, w := range tc.want {
				if !strings.Contains(errs[i].Error(), w) {
					t.Errorf("error %d: %q, want it to say %q", i, errs[i].Error(), w)
				}
			}
			if !equal(before, tc.u) {
				t.Errorf("the object was modified")
			}
		})
	}
}

func equal(a, b *unstructured.Unstructured) bool {
	ja, _ := json.Marshal(a.Object)
	jb, _ := json.Marshal(b.Object)
	return string(ja) == string(jb)
}

func TestForEveryKind(t *testing.T) {
	for _, kind := range []string{convergev1.SyncTargetKind, "SyncTargetSet", "Notifier"} {
		if _, err := For(kind); err != nil {
			t.Errorf("%s: %v", kind, err)
		}
	}
	if _, err := For("Deployment"); err == nil {
		t.Error("a kind the binary carries no CRD of: want an error")
	}
}
