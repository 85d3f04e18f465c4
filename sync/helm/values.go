package helm

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"regexp"

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
