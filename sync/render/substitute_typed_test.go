package render

import (
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// typed renders one ConfigMap whose data.v is written as value (plain, quoted, tagged as
// given) with the substitution, and returns data.v whatever its type.
func typed(t *testing.T, value string, s Substitution) (any, error) {
	t.Helper()
	root, _ := newRepo(t)
	write(t, root, "cm.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\ndata:\n  v: "+value+"\n")
	res, err := render(Options{Root: root, Path: "cm.yaml", Substitute: &s})
	if err != nil {
		return nil, err
	}
	return res.Objects[0].Object["data"].(map[string]any)["v"], nil
}

// TestSubstituteTypesPlainScalars: a plain scalar that is exactly one reference is typed
// as Flux's kustomize-controller types it (it substitutes the YAML text and parses it
// with sigs.k8s.io/yaml, YAML 1.1 scalars); quoted, tagged and longer strings stay
// strings, and no value adds structure.
func TestSubstituteTypesPlainScalars(t *testing.T) {
	tests := []struct {
		name, in, value string
		want            any
	}{
		{name: "plain number", in: `${v}`, value: "3", want: int64(3)},
		{name: "double-quoted number", in: `"${v}"`, value: "3", want: "3"},
		{name: "single-quoted number", in: `'${v}'`, value: "3", want: "3"},
		{name: "explicit !!str tag", in: `!!str ${v}`, value: "3", want: "3"},
		{name: "inside a longer string", in: `app:${v}`, value: "3", want: "app:3"},
		{name: "two references", in: `${v}${v}`, value: "3", want: "33"},
		{name: "boolean", in: `${v}`, value: "true", want: true},
		{name: "YAML 1.1 yes is true, as in Flux", in: `${v}`, value: "yes", want: true},
		{name: "float", in: `${v}`, value: "2.5", want: 2.5},
		// YAML 1.2 reads 0x1F as 31 too, 1e3 as a float and 08 as the integer 8; YAML
		// 1.1 (go-yaml v2, under sigs.k8s.io/yaml) reads 08 as the float 8 and 010 as
		// octal 8. JSON, which Flux goes through, makes 8 and 1000 integers.
		{name: "hexadecimal", in: `${v}`, value: "0x1F", want: int64(31)},
		{name: "exponent", in: `${v}`, value: "1e3", want: int64(1000)},
		{name: "leading zero", in: `${v}`, value: "08", want: int64(8)},
		{name: "YAML 1.1 octal", in: `${v}`, value: "010", want: int64(8)},
		{name: "tilde is null", in: `${v}`, value: "~", want: nil},
		{name: "empty is null", in: `${v}`, value: "", want: nil},
		{name: "a mapping stays text", in: `${v}`, value: "a: b", want: "a: b"},
		{name: "a flow mapping stays text", in: `${v}`, value: "{x: y}", want: "{x: y}"},
		{name: "a list stays text", in: `${v}`, value: "[1, 2]", want: "[1, 2]"},
		{name: "a quoted number stays its text", in: `${v}`, value: `"3"`, want: `"3"`},
		{name: "multi-line stays text", in: `${v}`, value: "1\n2", want: "1\n2"},
		{name: "text stays text", in: `${v}`, value: "prod", want: "prod"},
		{name: "infinity stays text (JSON has none)", in: `${v}`, value: ".inf", want: ".inf"},
		{name: "typed default", in: `${unset:=5}`, want: int64(5)},
		{name: "quoted default", in: `"${unset:=5}"`, want: "5"},
		{name: "escaped reference is text", in: `$${v}`, value: "3", want: "${v}"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			got, err := typed(t, tt.in, Substitution{Vars: map[string]string{"v": tt.value}})
			g.Expect(err).NotTo(HaveOccurred())
			if tt.want == nil {
				g.Expect(got).To(BeNil())
				return
			}
			g.Expect(got).To(Equal(tt.want))
		})
	}
}

// TestSubstituteTypesReplicas: the case that fails against the API server today, a
// Deployment's replicas from a variable, renders a number, in plain manifests, in a List
// and in kustomize's output (which keeps its inputs' quoting).
func TestSubstituteTypesReplicas(t *testing.T) {
	g := NewWithT(t)
	root, _ := newRepo(t)
	dep := "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: NAME}\nspec:\n  replicas: ${n}\n" +
		"  template:\n    metadata: {annotations: {rev: \"${n}\"}}\n"
	write(t, root, "plain/d.yaml", strings.ReplaceAll(dep, "NAME", "d"))
	write(t, root, "list/l.yaml", "apiVersion: v1\nkind: List\nitems:\n- {apiVersion: v1, kind: ConfigMap, metadata: {name: a}, data: {q: \"${n}\"}}\n"+
		"- apiVersion: apps/v1\n  kind: Deployment\n  metadata: {name: l}\n  spec:\n    replicas: ${n}\n")
	write(t, root, "kust/kustomization.yaml", "resources: [d.yaml]\nnamePrefix: k-\n")
	write(t, root, "kust/d.yaml", strings.ReplaceAll(dep, "NAME", "d"))
	for _, path := range []string{"plain", "list", "kust"} {
		res, err := render(Options{Root: root, Path: path, Substitute: &Substitution{Vars: map[string]string{"n": "3"}}})
		g.Expect(err).NotTo(HaveOccurred(), path)
		for _, o := range res.Objects {
			if o.GetKind() == "Deployment" {
				g.Expect(o.Object["spec"]).To(HaveKeyWithValue("replicas", int64(3)), path)
				continue
			}
			g.Expect(o.Object["data"]).To(HaveKeyWithValue("q", "3"), path)
		}
		if path != "list" {
			ann, _, _ := unstructured.NestedString(res.Objects[0].Object, "spec", "template", "metadata", "annotations", "rev")
			g.Expect(ann).To(Equal("3"), "quoted stays a string")
		}
	}
}

// TestSubstituteTypesSensitiveValues: a value read from a Secret is typed like any other,
// and errors still never show it.
func TestSubstituteTypesSensitiveValues(t *testing.T) {
	const port, token = "54321", "s3cr3t-t0ken-value"
	g := NewWithT(t)
	root, _ := newRepo(t)
	write(t, root, "ok.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\ndata:\n  port: ${port}\n")
	write(t, root, "bad.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: 'db-${token}'}\ndata:\n  port: ${port}\n  x: '${missing}'\n")
	s := &Substitution{Vars: map[string]string{"port": port, "token": token}, Strict: true, Sensitive: []string{port, token}}
	res, err := render(Options{Root: root, Path: "ok.yaml", Substitute: s})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(res.Objects[0].Object["data"]).To(HaveKeyWithValue("port", int64(54321)))

	res, err = render(Options{Root: root, Path: "bad.yaml", Substitute: s})
	expectFailure(g, res, err, ErrSubstitution, "variables not set (strict): missing")
	g.Expect(err.Error()).To(ContainSubstring("[redacted]"))
	g.Expect(err.Error()).NotTo(ContainSubstring(token))
	g.Expect(err.Error()).NotTo(ContainSubstring(port))
}
