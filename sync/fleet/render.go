package fleet

import (
	"bytes"
	"context"
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

// Render renders the set's template with every parameter set, in order, within the bounds
// of a set's render (MaxRenderedBytes, MaxSetRenderedBytes, MaxTemplateWork, and what
// template functions may return) and before the deadline lim sets: it stops as soon as
// one is passed. The error names the parameter set that failed.
func Render(ctx context.Context, set *convergev1.SyncTargetSet, params []Params, lim Limits) ([]Rendered, error) {
	spec, err := decodeSpec(set.Spec.Template.Spec.Raw)
	if err != nil {
		return nil, err
	}
	b := newBudget(ctx, lim)
	out := make([]Rendered, 0, len(params))
	for i, p := range params {
		r, err := renderOne(set, spec, b.renderer(p))
		if err != nil {
			return nil, fmt.Errorf("parameters %s: %w", p, err)
		}
		if i == 0 {
			if err := checkWork(b.nodes, len(params)); err != nil {
				return nil, err
			}
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

func renderOne(set *convergev1.SyncTargetSet, spec map[string]any, r *renderer) (Rendered, error) {
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
	out := Rendered{Params: r.params, Name: name, Labels: labels, Annotations: annotations,
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
		if err := r.spend(len(k) + 4); err != nil {
			return nil, fmt.Errorf("%s[%s]: %w", field, k, err)
		}
		s, err := r.render(v)
		if err != nil {
			return nil, fmt.Errorf("%s[%s]: %w", field, k, err)
		}
		out[k] = s
	}
	return out, nil
}

// renderValue renders every string of a JSON value; keys are not templated. Keys and
// other values count against the bounds as their JSON text.
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
			if err := r.spend(len(k) + 4); err != nil {
				return nil, fmt.Errorf("%s: %w", field, err)
			}
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
			if err := r.spend(1); err != nil {
				return nil, fmt.Errorf("%s: %w", field, err)
			}
			x, err := r.renderValue(fmt.Sprintf("%s[%d]", field, i), e)
			if err != nil {
				return nil, err
			}
			out[i] = x
		}
		return out, nil
	}
	if err := r.spend(scalarSize(v) + 1); err != nil {
		return nil, fmt.Errorf("%s: %w", field, err)
	}
	return v, nil
}

// scalarSize is the length of a JSON number, boolean or null.
func scalarSize(v any) int {
	switch v := v.(type) {
	case json.Number:
		return len(v)
	case bool:
		return 5
	case nil:
		return 4
	}
	return len(fmt.Sprint(v))
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
