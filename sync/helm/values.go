package helm

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"regexp"

	"helm.sh/helm/v4/pkg/chart/common/util"
	chartloader "helm.sh/helm/v4/pkg/chart/v2/loader"
	"helm.sh/helm/v4/pkg/strvals"
)

// ValuesSource is one layer of user values, in order: valuesFiles, then valuesFrom entries.
type ValuesSource struct {
	// Name names the layer in error messages, e.g. "values-prod.yaml" or "Secret/db[values.yaml]".
	Name string
	// Data is YAML (one or more documents, merged), or the string value when TargetPath is set.
	Data []byte
	// TargetPath, when set, puts Data as one string value at this path, with the path syntax
	// of helm --set-string (a.b[0].c, escaped dots a\.b); Data is taken verbatim, commas
	// and backslashes included.
	TargetPath string
	// Sensitive marks a layer read from a Secret: no part of Data appears in an error.
	Sensitive bool
}

// BuildValues merges the layers in order (a later layer wins; maps merge deeply, as Helm
// merges -f files) and then inline (spec.helm.values, JSON), which wins over all. Errors
// name the layer; a Sensitive layer's content never appears in one.
func BuildValues(layers []ValuesSource, inline []byte) (map[string]any, error) {
	vals := map[string]any{}
	for _, l := range layers {
		var err error
		if l.TargetPath != "" {
			err = setString(vals, l)
		} else {
			vals, err = mergeLayer(vals, l)
		}
		if err != nil {
			return nil, err
		}
	}
	if len(bytes.TrimSpace(inline)) == 0 {
		return vals, nil
	}
	var in map[string]any
	if err := json.Unmarshal(inline, &in); err != nil {
		return nil, fmt.Errorf("spec.helm.values: not a JSON object: %w", err)
	}
	return chartloader.MergeMaps(vals, in), nil
}

func mergeLayer(vals map[string]any, l ValuesSource) (map[string]any, error) {
	m, err := chartloader.LoadValues(bytes.NewReader(l.Data))
	if err != nil {
		return nil, layerError(l, "not valid YAML values (a map)", err)
	}
	return chartloader.MergeMaps(vals, m), nil
}

func setString(vals map[string]any, l ValuesSource) error {
	value := string(l.Data)
	reader := func([]rune) (any, error) { return value, nil }
	if err := strvals.ParseIntoFile(l.TargetPath+"=-", vals, reader); err != nil {
		return layerError(l, fmt.Sprintf("cannot set the value at path %q", l.TargetPath), err)
	}
	return nil
}

var yamlLine = regexp.MustCompile(`line \d+`)

// layerError names the layer; for a Sensitive layer the cause is left out (a parser may quote
// the content), except for the line number it names.
func layerError(l ValuesSource, what string, cause error) error {
	if !l.Sensitive {
		return fmt.Errorf("values %s: %s: %w", l.Name, what, cause)
	}
	if line := yamlLine.FindString(cause.Error()); line != "" {
		return fmt.Errorf("values %s: %s (%s; details withheld: the layer is sensitive)", l.Name, what, line)
	}
	return fmt.Errorf("values %s: %s (details withheld: the layer is sensitive)", l.Name, what)
}

// Flags are helm template's value flags: values files read from disk, then --set, then
// --set-string, then --set-file, each in the order given — the order Helm merges them.
type Flags struct {
	// Files are -f/--values files; later ones win, maps merge deeply.
	Files []string
	// Set are --set name=value (typed as Helm types them); SetString --set-string
	// (always strings); SetFile --set-file name=path (the file's content).
	Set, SetString, SetFile []string
}

// Values merges the flags in Helm's order into the user values of a render, with Helm's
// own parsers. Errors name the flag or file.
func (f Flags) Values() (map[string]any, error) {
	layers := make([]ValuesSource, 0, len(f.Files))
	for _, p := range f.Files {
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, fmt.Errorf("values file: %w", err)
		}
		layers = append(layers, ValuesSource{Name: p, Data: b})
	}
	vals, err := BuildValues(layers, nil)
	if err != nil {
		return nil, err
	}
	for _, s := range f.Set {
		if err := strvals.ParseInto(s, vals); err != nil {
			return nil, fmt.Errorf("--set %s: %w", s, err)
		}
	}
	for _, s := range f.SetString {
		if err := strvals.ParseIntoString(s, vals); err != nil {
			return nil, fmt.Errorf("--set-string %s: %w", s, err)
		}
	}
	for _, s := range f.SetFile {
		read := func(rs []rune) (any, error) {
			b, err := os.ReadFile(string(rs))
			return string(b), err
		}
		if err := strvals.ParseIntoFile(s, vals, read); err != nil {
			return nil, fmt.Errorf("--set-file %s: %w", s, err)
		}
	}
	return vals, nil
}

// MaskPrefix starts the text that stands, in ShownValues, for a value a Sensitive layer
// gave: "*** (from Secret/db[values.yaml])".
const MaskPrefix = "***"

// ShownValues are the values of a render as a person may see them: supplied is what
// BuildValues merges from layers and inline (Helm's `get values`), computed is that
// coalesced with the chart's own values and its subcharts' (`get values --all`). Every
// value a Sensitive layer gave — a scalar of its document, or its whole string for a
// TargetPath — is masked as MaskPrefix and the layer's name, unless a later layer or
// inline sets the same key. Keys are shown. c nil leaves computed nil.
func ShownValues(c *Chart, layers []ValuesSource, inline []byte) (supplied, computed map[string]any, err error) {
	masked := make([]ValuesSource, 0, len(layers))
	for _, l := range layers {
		if l.Sensitive {
			m, err := maskLayer(l)
			if err != nil {
				return nil, nil, err
			}
			l = m
		}
		masked = append(masked, l)
	}
	supplied, err = BuildValues(masked, inline)
	if err != nil || c == nil {
		return supplied, nil, err
	}
	all, err := util.CoalesceValues(cloneChart(c.chart), deepCopyMap(supplied))
	if err != nil {
		return supplied, nil, fmt.Errorf("chart %s: values: %w", c.Name(), err)
	}
	return supplied, all, nil
}

// maskLayer is a Sensitive layer with each of its values replaced by the mask.
func maskLayer(l ValuesSource) (ValuesSource, error) {
	mask := MaskPrefix + " (from " + l.Name + ")"
	out := ValuesSource{Name: l.Name, TargetPath: l.TargetPath}
	if l.TargetPath != "" {
		out.Data = []byte(mask)
		return out, nil
	}
	m, err := chartloader.LoadValues(bytes.NewReader(l.Data))
	if err != nil {
		return out, layerError(l, "not valid YAML values (a map)", err)
	}
	data, err := json.Marshal(maskTree(map[string]any(m), mask))
	if err != nil {
		return out, layerError(l, "cannot be shown", err)
	}
	out.Data = data // JSON is YAML
	return out, nil
}

// maskTree replaces every scalar under v by mask, keeping maps and lists.
func maskTree(v any, mask string) any {
	switch t := v.(type) {
	case map[string]any:
		for k, e := range t {
			t[k] = maskTree(e, mask)
		}
		return t
	case []any:
		for i, e := range t {
			t[i] = maskTree(e, mask)
		}
		return t
	case nil:
		return nil
	}
	return mask
}
