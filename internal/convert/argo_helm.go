package convert

import (
	"strconv"
	"strings"

	"sigs.k8s.io/yaml"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
)

// argoValues gathers an Application's values, merged once all are read: values, then
// valuesObject over them, then parameters over both, as Argo CD does.
type argoValues struct {
	helm   *convergev1.HelmSpec
	values map[string]any
	object map[string]any
	params []any
}

// argoHelm maps spec.source.helm onto spec.helm.
func (c *conv) argoHelm(m map[string]any, s *convergev1.SyncTargetSpec) {
	if s.Helm == nil {
		s.Helm = &convergev1.HelmSpec{}
	}
	t := &argoValues{helm: s.Helm}
	hc := c.at("", c.in+"helm.", c.out+"helm.")
	mapFields(hc, m, t, argoHelmRules, argoHelmLost)
	merged := deepMerge(t.values, t.object)
	for i, p := range t.params {
		hc.parameter(i, asMap(p), &merged)
	}
	if len(merged) > 0 {
		s.Helm.Values = toJSON(merged)
	}
}

var argoHelmRules = []rule[*argoValues]{
	{"releaseName", func(_ *conv, v any, t *argoValues) { t.helm.ReleaseName = asString(v) }},
	{"valueFiles", func(c *conv, v any, t *argoValues) {
		for _, f := range strings1(v) {
			if strings.HasPrefix(f, "$") {
				c.lost("valueFiles", "valuesFiles", "a values file of another source ($ref) has no equivalent: converge deploys one source per SyncTarget")
				continue
			}
			t.helm.ValuesFiles = append(t.helm.ValuesFiles, f)
		}
	}},
	{"values", func(c *conv, v any, t *argoValues) {
		if err := yaml.Unmarshal([]byte(asString(v)), &t.values); err != nil {
			c.lost("values", "values", "not a YAML map")
		}
	}},
	{"valuesObject", func(_ *conv, v any, t *argoValues) { t.object = asMap(v) }},
	{"parameters", func(_ *conv, v any, t *argoValues) { t.params = asSlice(v) }},
	{"skipCrds", func(_ *conv, v any, t *argoValues) {
		if asBool(v) {
			t.helm.CRDs = convergev1.CRDsSkip
		}
	}},
	{"skipTests", func(_ *conv, _ any, _ *argoValues) {}},
	noteOnly[*argoValues]("passCredentials", "", "converge sends the credentials to the repository's host only"),
	noteOnly[*argoValues]("version", "", "converge renders with the Helm SDK it is built with"),
	noteOnly[*argoValues]("skipSchemaValidation", "", "converge validates the values against the chart's schema"),
}

var argoHelmLost = map[string]string{
	"fileParameters":          "no equivalent: put the file's content in the values, or in a ConfigMap read by valuesFrom",
	"ignoreMissingValueFiles": "a values file converge cannot find is an error",
	"namespace":               "the release namespace is the targetNamespace",
	"kubeVersion":             "converge renders with the version of the target cluster",
	"apiVersions":             "converge renders with the API versions of the target cluster",
}

// parameter sets one Argo CD helm parameter (name a.b.c) in values; names helm --set
// writes with indexes or escaped dots are lost.
func (c *conv) parameter(i int, p map[string]any, values *map[string]any) {
	name, val := str(p, "name"), str(p, "value")
	if name == "" || strings.ContainsAny(name, `[]\`) {
		c.lost("parameters["+strconv.Itoa(i)+"]", "values", "only parameters named a.b.c can be written as values")
		return
	}
	var v any = val
	if !asBool(p["forceString"]) {
		v = setValue(val)
	}
	if *values == nil {
		*values = map[string]any{}
	}
	m := *values
	parts := strings.Split(name, ".")
	for _, k := range parts[:len(parts)-1] {
		next, ok := m[k].(map[string]any)
		if !ok {
			next = map[string]any{}
			m[k] = next
		}
		m = next
	}
	m[parts[len(parts)-1]] = v
}

// setValue types a value as helm --set does: booleans, integers, null, else a string.
func setValue(s string) any {
	switch s {
	case "true":
		return true
	case "false":
		return false
	case "null":
		return nil
	}
	if n, err := strconv.ParseInt(s, 10, 64); err == nil {
		return n
	}
	return s
}

// deepMerge is a with b merged over it (maps merged key by key, anything else replaced).
func deepMerge(a, b map[string]any) map[string]any {
	if len(a) == 0 {
		return b
	}
	out := make(map[string]any, len(a)+len(b))
	for k, v := range a {
		out[k] = v
	}
	for k, v := range b {
		am, aok := out[k].(map[string]any)
		bm, bok := v.(map[string]any)
		if aok && bok {
			out[k] = deepMerge(am, bm)
			continue
		}
		out[k] = v
	}
	return out
}
