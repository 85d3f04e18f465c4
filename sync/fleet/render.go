package fleet

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
)

// TemplateHashAnnotation on a generated SyncTarget is the hash of what the set last wrote
// to it: a SyncTarget whose hash is that of its rendering is up to date.
const TemplateHashAnnotation = "converge.dev/set-template-hash"

// Rendered is the SyncTarget one parameter set renders, before it is written.
type Rendered struct {
	// Params is the parameter set it was rendered from.
	Params Params
	// Name, Labels and Annotations are its rendered metadata; Labels carry the set label.
	Name        string
	Labels      map[string]string
	Annotations map[string]string
	// Spec is the rendered spec, as JSON values.
	Spec map[string]any
	// Hash identifies Labels, Annotations and Spec.
	Hash string
}

// Render renders the set's template with every parameter set, in order. The error names
// the parameter set that failed.
func Render(set *convergev1.SyncTargetSet, params []Params) ([]Rendered, error) {
	spec, err := decodeSpec(set.Spec.Template.Spec.Raw)
	if err != nil {
		return nil, err
	}
	out := make([]Rendered, 0, len(params))
	parsed := parsedTemplates{}
	for _, p := range params {
		r, err := renderOne(set, spec, p, parsed)
		if err != nil {
			return nil, fmt.Errorf("parameters %s: %w", p, err)
		}
		out = append(out, r)
	}
	return out, nil
}

func decodeSpec(raw []byte) (map[string]any, error) {
	spec := map[string]any{}
	if len(bytes.TrimSpace(raw)) == 0 {
		return spec, nil
	}
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	if err := d.Decode(&spec); err != nil {
		return nil, fmt.Errorf("template.spec: %w", err)
	}
	return spec, nil
}

func renderOne(set *convergev1.SyncTargetSet, spec map[string]any, p Params, parsed parsedTemplates) (Rendered, error) {
	r := newRenderer(p)
	r.parsed = parsed
	meta := set.Spec.Template.Metadata
	name, err := r.render(meta.Name)
	if err != nil {
		return Rendered{}, fmt.Errorf("metadata.name: %w", err)
	}
	labels, err := r.renderMap("metadata.labels", meta.Labels)
	if err != nil {
		return Rendered{}, err
	}
	annotations, err := r.renderMap("metadata.annotations", meta.Annotations)
	if err != nil {
		return Rendered{}, err
	}
	renderedSpec, err := r.renderValue("spec", spec)
	if err != nil {
		return Rendered{}, err
	}
	if labels == nil {
		labels = map[string]string{}
	}
	labels[convergev1.SetLabel] = set.Name
	out := Rendered{Params: p, Name: name, Labels: labels, Annotations: annotations,
		Spec: renderedSpec.(map[string]any)}
	out.Hash = out.hash()
	return out, nil
}

// renderMap renders the values of m (keys are not templated).
func (r *renderer) renderMap(field string, m map[string]string) (map[string]string, error) {
	if m == nil {
		return nil, nil
	}
	out := make(map[string]string, len(m))
	for k, v := range m {
		s, err := r.render(v)
		if err != nil {
			return nil, fmt.Errorf("%s[%s]: %w", field, k, err)
		}
		out[k] = s
	}
	return out, nil
}

// renderValue renders every string of a JSON value; keys are not templated.
func (r *renderer) renderValue(field string, v any) (any, error) {
	switch v := v.(type) {
	case string:
		s, err := r.render(v)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", field, err)
		}
		return s, nil
	case map[string]any:
		out := make(map[string]any, len(v))
		for k, e := range v {
			x, err := r.renderValue(field+"."+k, e)
			if err != nil {
				return nil, err
			}
			out[k] = x
		}
		return out, nil
	case []any:
		out := make([]any, len(v))
		for i, e := range v {
			x, err := r.renderValue(fmt.Sprintf("%s[%d]", field, i), e)
			if err != nil {
				return nil, err
			}
			out[i] = x
		}
		return out, nil
	}
	return v, nil
}

// hash is a digest of what the set writes to the SyncTarget (encoding/json sorts map keys).
func (r Rendered) hash() string {
	b, _ := json.Marshal([]any{r.Labels, r.Annotations, r.Spec})
	return digest(b)
}

// String lists the parameter set as name=value pairs, sorted by name, values cut short.
func (p Params) String() string {
	keys := make([]string, 0, len(p))
	for k := range p {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		v := p[k]
		if len(v) > 64 {
			v = v[:64] + "…"
		}
		parts = append(parts, fmt.Sprintf("%s=%q", k, v))
	}
	s := "{" + strings.Join(parts, ", ") + "}"
	if len(s) > 512 {
		s = s[:512] + "…}"
	}
	return s
}
