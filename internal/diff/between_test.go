package diff

import (
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

func renderedConfigMap(name string, data map[string]any) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1", "kind": "ConfigMap",
		"metadata": map[string]any{"name": name, "namespace": "shop"},
		"data":     data,
	}}
}

// Two renderings compare object by object: what only the new one has is created, what
// only the old one had is pruned, what changed shows its lines, what did not is
// unchanged; hooks are left out.
func TestBetweenComparesTwoRenderings(t *testing.T) {
	g := NewWithT(t)
	hook := renderedConfigMap("migrate", map[string]any{"a": "1"})
	hook.SetAnnotations(map[string]string{"helm.sh/hook": "pre-upgrade"})
	before := []*unstructured.Unstructured{
		renderedConfigMap("kept", map[string]any{"a": "1"}),
		renderedConfigMap("changed", map[string]any{"colour": "blue"}),
		renderedConfigMap("gone", map[string]any{"a": "1"}),
	}
	after := []*unstructured.Unstructured{
		renderedConfigMap("changed", map[string]any{"colour": "green"}),
		renderedConfigMap("kept", map[string]any{"a": "1"}),
		renderedConfigMap("new", map[string]any{"a": "1"}),
		hook,
	}
	res, err := Between(before, after)
	g.Expect(err).NotTo(HaveOccurred())
	actions := map[string]Action{}
	for _, o := range res.Objects {
		actions[o.Name] = o.Action
	}
	g.Expect(actions).To(Equal(map[string]Action{"changed": Change, "kept": Unchanged, "new": Create, "gone": Prune}))
	g.Expect(res.Summary()).To(Equal(Summary{Create: 1, Change: 1, Prune: 1, Unchanged: 1}))
	for _, o := range res.Objects {
		switch o.Name {
		case "changed":
			g.Expect(o.Diff).To(HavePrefix("--- before\n+++ after\n"))
			g.Expect(o.Diff).To(ContainSubstring("-  colour: blue\n+  colour: green"))
		case "kept":
			g.Expect(o.Diff).To(BeEmpty())
		case "gone":
			g.Expect(o.Diff).To(ContainSubstring("-  name: gone"))
		}
	}
	g.Expect(res.Objects[0].Name).To(Equal("changed"), "in Result's order")
}

// A Secret's values never show; a value read from a Secret or a SOPS file is redacted
// where it reached another kind; a diff too long for its reader is left out, noted.
func TestBetweenMasksRedactsAndTrims(t *testing.T) {
	g := NewWithT(t)
	before := []*unstructured.Unstructured{secret(map[string]any{"data": map[string]any{"password": b64("hunter2-old")}})}
	after := []*unstructured.Unstructured{
		secret(map[string]any{"data": map[string]any{"password": b64("hunter2-new")}}),
		renderedConfigMap("leak", map[string]any{"copied": "the token is tok-3f9a1c and more"}),
		renderedConfigMap("big", map[string]any{"text": strings.Repeat("x", 4000)}),
	}
	res, err := Between(before, after)
	g.Expect(err).NotTo(HaveOccurred())
	Redact(res, []string{"tok-3f9a1c", "abc"})
	text := ""
	for _, o := range res.Objects {
		text += o.Diff + o.Note
	}
	g.Expect(text).NotTo(ContainSubstring("hunter2"))
	g.Expect(text).NotTo(ContainSubstring(b64("hunter2-new")))
	g.Expect(text).To(ContainSubstring(MaskedChanged))
	g.Expect(text).NotTo(ContainSubstring("tok-3f9a1c"))
	g.Expect(text).To(ContainSubstring("the token is [redacted] and more"))

	g.Expect(Trim(res, 1000)).To(Equal(1))
	for _, o := range res.Objects {
		if o.Name == "big" {
			g.Expect(o.Diff).To(BeEmpty())
			g.Expect(o.Note).To(Equal("diff left out: too long to show here"))
		} else {
			g.Expect(o.Diff).NotTo(BeEmpty())
		}
	}
}
