package convert

import (
	"strconv"
	"strings"

	chartloader "helm.sh/helm/v4/pkg/chart/v2/loader"
	"helm.sh/helm/v4/pkg/strvals"
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
	merged := chartloader.MergeMaps(t.values, t.object) // as Helm merges values
	if len(merged) == 0 {
		merged = nil
	}
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

// parameter sets one Argo CD helm parameter in values as Argo CD hands it to Helm: helm
// --set name=value (--set-string with forceString), parsed by Helm's own strvals, the
// value's commas escaped unless it is a {list}.
func (c *conv) parameter(i int, p map[string]any, values *map[string]any) {
	name, val := str(p, "name"), str(p, "value")
	if *values == nil {
		*values = map[string]any{}
	}
	set := strvals.ParseInto
	if asBool(p["forceString"]) {
		set = strvals.ParseIntoString
	}
	if name == "" || strings.ContainsAny(name, "=,") {
		c.lost("parameters["+strconv.Itoa(i)+"]", "values", "the parameter's name is not one helm --set takes")
		return
	}
	if err := set(name+"="+setEscape(val), *values); err != nil {
		c.lost("parameters["+strconv.Itoa(i)+"]", "values", "helm --set refuses it: "+err.Error())
	}
}

// setEscape escapes the commas of a --set value that are not escaped yet, as Argo CD does
// before it calls Helm; a value in braces is a list and keeps them.
func setEscape(v string) string {
	if strings.HasPrefix(v, "{") && strings.HasSuffix(v, "}") {
		return v
	}
	var b strings.Builder
	for i, r := range v {
		if r == ',' && (i == 0 || v[i-1] != '\\') {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}
