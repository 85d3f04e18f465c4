package convert

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	sigsyaml "sigs.k8s.io/yaml"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
)

// convertString converts the multi-document YAML in, and returns the result and the
// printed output.
func convertString(t *testing.T, in string) (Result, string) {
	t.Helper()
	input := &Input{Stdin: strings.NewReader(in)}
	if err := input.Read("-"); err != nil {
		t.Fatal(err)
	}
	for _, p := range input.Problems {
		t.Fatalf("reading the input: %s", p)
	}
	res := Convert(input.Objects)
	var out bytes.Buffer
	if err := Print(&out, res); err != nil {
		t.Fatal(err)
	}
	return res, out.String()
}

// documents splits the printed output into its documents, checking that each is valid
// YAML (with its comments) and has a kind.
func documents(t *testing.T, out string) map[string][]byte {
	t.Helper()
	docs := map[string][]byte{}
	dec := yaml.NewDecoder(strings.NewReader(out))
	for {
		var n yaml.Node
		err := dec.Decode(&n)
		if errors.Is(err, io.EOF) {
			return docs
		}
		if err != nil {
			t.Fatalf("the output is not valid YAML: %v\n%s", err, out)
		}
		var m map[string]any
		if err := n.Decode(&m); err != nil {
			t.Fatal(err)
		}
		meta, _ := m["metadata"].(map[string]any)
		b, err := sigsyaml.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		docs[m["kind"].(string)+"/"+asString(meta["name"])] = b
	}
}

// syncTarget parses the printed SyncTarget name back, strictly (an unknown field fails).
func syncTarget(t *testing.T, docs map[string][]byte, name string) *convergev1.SyncTarget {
	t.Helper()
	b, ok := docs["SyncTarget/"+name]
	if !ok {
		t.Fatalf("no SyncTarget %s in the output; have %v", name, keysOf(docs))
	}
	var st convergev1.SyncTarget
	if err := sigsyaml.UnmarshalStrict(b, &st); err != nil {
		t.Fatalf("SyncTarget %s: %v", name, err)
	}
	return &st
}

func keysOf(m map[string][]byte) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// problem returns the problem of from about field, failing when there is none.
func problem(t *testing.T, res Result, from, field string) Problem {
	t.Helper()
	for _, p := range res.Problems {
		if p.From == from && p.Field == field {
			return p
		}
	}
	t.Fatalf("no problem reported for %s %s; have:\n%s", from, field, problemList(res))
	return Problem{}
}

func problemList(res Result) string {
	var b strings.Builder
	for _, p := range res.Problems {
		b.WriteString(p.String() + "\n")
	}
	return b.String()
}

// values decodes spec.helm.values.
func values(t *testing.T, st *convergev1.SyncTarget) map[string]any {
	t.Helper()
	if st.Spec.Helm == nil || st.Spec.Helm.Values == nil {
		t.Fatalf("SyncTarget %s has no helm values", st.Name)
	}
	var m map[string]any
	if err := sigsyaml.Unmarshal(st.Spec.Helm.Values.Raw, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

// commentBefore reports whether out has a "# converge convert:" comment holding text
// right above the line that starts (after indentation) with line.
func commentBefore(out, line, text string) bool {
	lines := strings.Split(out, "\n")
	for i, l := range lines {
		l = strings.TrimPrefix(strings.TrimSpace(l), "- ")
		if strings.TrimSpace(l) != line && !strings.HasPrefix(strings.TrimSpace(l), line) {
			continue
		}
		for j := i - 1; j >= 0 && strings.HasPrefix(strings.TrimSpace(lines[j]), "#"); j-- {
			if strings.Contains(lines[j], notePrefix) && strings.Contains(lines[j], text) {
				return true
			}
		}
	}
	return false
}

type unstructuredT = unstructured.Unstructured

func unmarshalStrict(b []byte, v any) error { return sigsyaml.UnmarshalStrict(b, v) }
