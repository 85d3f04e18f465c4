package fleet

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
)

func renderString(t *testing.T, p Params, s string) (string, error) {
	t.Helper()
	return newBudget(context.Background(), Limits{}).renderer(p).render(s)
}

func TestTemplateParameters(t *testing.T) {
	g := NewWithT(t)
	p := Params{"name": "prod", "path": "apps/web", "path.basename": "web", "path.segment0": "apps",
		"labels.app.kubernetes.io/name": "web"}
	for tmpl, want := range map[string]string{
		"{{ .name }}-apps":                                              "prod-apps",
		"{{ .path.basename }}":                                          "web",
		`{{ index . "path.basename" }}`:                                 "web",
		"{{ .path }}":                                                   "apps/web",
		"{{ .path.segment0 }}/{{ .path.basename }}":                     "apps/web",
		`{{ index . "labels.app.kubernetes.io/name" }}`:                 "web",
		`{{ if eq .path "apps/web" }}yes{{ end }}`:                      "yes",
		`{{ replace "/" "-" .path | upper }}`:                           "APPS-WEB",
		`{{ trunc 2 .name }}{{ default "x" .path }}`:                    "prapps/web",
		`{{ with .name }}{{ . }}{{ else }}none{{ end }}`:                "prod",
		"no template here":                                              "no template here",
		`{{ if and (lt .name "z") (ge .name "prod") }}y{{ end }}`:       "y",
		`{{ if gt (len .name) 3 }}long{{ end }}`:                        "long",
		`{{ if ne .path.segment0 "web" }}{{ .path.segment0 }}{{ end }}`: "apps",
	} {
		got, err := renderString(t, p, tmpl)
		g.Expect(err).NotTo(HaveOccurred(), tmpl)
		g.Expect(got).To(Equal(want), tmpl)
	}
}

func TestTemplateRefusals(t *testing.T) {
	g := NewWithT(t)
	p := Params{"name": "prod", "path": "apps/web", "path.basename": "web"}
	for tmpl, want := range map[string]string{
		"{{ .missing }}":                           `map has no entry for key "missing"`,
		"{{ .path.nothing }}":                      `no entry for key "nothing"`,
		`{{ printf "%*d" 1000000 1 }}`:             `function "printf" is not allowed`,
		`{{ print .name }}`:                        `function "print" is not allowed`,
		`{{ call .name }}`:                         `function "call" is not allowed`,
		`{{ env "HOME" }}`:                         `function "env" not defined`,
		`{{ range $k, $v := . }}{{ $k }}{{ end }}`: "range is not allowed",
		`{{ range 1000000000 }}x{{ end }}`:         "range is not allowed",
		`{{ if lt .name 3 }}{{ end }}`:             "incompatible types for comparison: string and int",
		`{{ define "x" }}a{{ end }}{{ .name }}`:    "define and block are not allowed",
		`{{ template "x" }}`:                       "template is not allowed",
		`{{ .name `:                                "unclosed action",
	} {
		_, err := renderString(t, p, tmpl)
		g.Expect(err).To(MatchError(ContainSubstring(want)), tmpl)
	}
}

func TestTemplateOutputCap(t *testing.T) {
	g := NewWithT(t)
	big := strings.Repeat("x", 1<<16)
	_, err := renderString(t, Params{"big": big}, `{{ replace "x" "`+strings.Repeat("y", 64)+`" .big }}`)
	g.Expect(err).To(MatchError(ContainSubstring("would exceed")))

	// The budget is shared by every string of one SyncTarget.
	r := newBudget(context.Background(), Limits{}).renderer(Params{"big": big})
	var err2 error
	for range 17 {
		if _, err2 = r.render("{{ .big }}"); err2 != nil {
			break
		}
	}
	g.Expect(err2).To(MatchError(errTargetTooLarge))
}

func testSet(spec string, meta convergev1.SyncTargetTemplateMeta) *convergev1.SyncTargetSet {
	return &convergev1.SyncTargetSet{
		ObjectMeta: metav1.ObjectMeta{Name: "fleet", Namespace: "team"},
		Spec: convergev1.SyncTargetSetSpec{Template: convergev1.SyncTargetTemplate{
			Metadata: meta, Spec: apiextensionsv1.JSON{Raw: []byte(spec)},
		}},
	}
}

const validSpec = `{"source": {"url": "https://git.example.com/{{ .repo }}.git", "ref": {"branch": "main"}},
	"path": "{{ .path }}", "prune": true, "timeout": "1m"}`

func TestRenderSpecAndMetadata(t *testing.T) {
	g := NewWithT(t)
	set := testSet(validSpec, convergev1.SyncTargetTemplateMeta{Name: "{{ .path.basename }}",
		Labels: map[string]string{"{{ .keys }}": "{{ .repo }}"}, Annotations: map[string]string{"a": "{{ .path }}"}})
	out, err := Render(context.Background(), set, []Params{{"repo": "apps", "path": "envs/prod", "path.basename": "prod", "keys": "k"}}, Limits{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(out).To(HaveLen(1))
	r := out[0]
	g.Expect(r.Name).To(Equal("prod"))
	g.Expect(r.Labels).To(Equal(map[string]string{"{{ .keys }}": "apps", convergev1.SetLabel: "fleet"}), "keys are not templated")
	g.Expect(r.Annotations).To(Equal(map[string]string{"a": "envs/prod"}))
	g.Expect(r.Spec).To(HaveKeyWithValue("path", "envs/prod"))
	g.Expect(r.Spec["source"]).To(HaveKeyWithValue("url", "https://git.example.com/apps.git"))
	g.Expect(r.Spec).To(HaveKeyWithValue("prune", true))

	st := &convergev1.SyncTarget{}
	b, _ := json.Marshal(r.Object("team", set).Object)
	g.Expect(json.Unmarshal(b, st)).To(Succeed())
	g.Expect(st.Namespace).To(Equal("team"))
	g.Expect(st.OwnerReferences).To(ConsistOf(HaveField("Kind", convergev1.SyncTargetSetKind)))
	g.Expect(st.Annotations).To(HaveKeyWithValue(TemplateHashAnnotation, r.Hash))
	g.Expect(r.Validate("team")).To(Succeed())

	again, err := Render(context.Background(), set, []Params{{"repo": "apps", "path": "envs/prod", "path.basename": "prod", "keys": "k"}}, Limits{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(again[0].Hash).To(Equal(r.Hash), "the hash is stable")
}

func TestRenderErrorNamesTheParameters(t *testing.T) {
	g := NewWithT(t)
	set := testSet(`{"path": "{{ .dir }}"}`, convergev1.SyncTargetTemplateMeta{Name: "x"})
	_, err := Render(context.Background(), set, []Params{{"path": "a"}}, Limits{})
	g.Expect(err).To(MatchError(And(ContainSubstring(`parameters {path="a"}`), ContainSubstring("spec.path"),
		ContainSubstring(`no entry for key "dir"`))))
}

func TestValidateRefusals(t *testing.T) {
	g := NewWithT(t)
	render := func(spec, name string) Rendered {
		out, err := Render(context.Background(), testSet(spec, convergev1.SyncTargetTemplateMeta{Name: name}), []Params{{"n": "Not_A_Name", "repo": "r", "path": "p"}}, Limits{})
		g.Expect(err).NotTo(HaveOccurred())
		return out[0]
	}
	g.Expect(render(validSpec, "{{ .n }}").Validate("team")).To(MatchError(ContainSubstring(`name "Not_A_Name" is not a valid SyncTarget name`)))
	g.Expect(render(`{"sourc": {}}`, "ok").Validate("team")).To(MatchError(ContainSubstring(`unknown field "sourc"`)))
	g.Expect(render(`{"prune": "yes"}`, "ok").Validate("team")).To(MatchError(ContainSubstring("not a SyncTarget")))

	// A SyncTarget of another namespace is refused, whatever put it there.
	r := render(validSpec, "ok")
	u := r.Object("other", nil)
	g.Expect(decodeStrict(u, "team")).To(MatchError(ContainSubstring(`namespace "other": a set generates SyncTargets in its own namespace "team" only`)))
}
