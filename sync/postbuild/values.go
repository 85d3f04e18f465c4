package postbuild

import (
	"context"
	"fmt"
	"hash"

	"go.yaml.in/yaml/v3"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
)

// DefaultValuesKey is the key of a spec.helm.valuesFrom referent read when it names none.
const DefaultValuesKey = "values.yaml"

// ValuesLayer is one entry of spec.helm.valuesFrom, read.
type ValuesLayer struct {
	// Name says where it came from, for messages: "Secret/db[values.yaml]".
	Name string
	// Data is the key's value: a YAML document, or with TargetPath a string.
	Data []byte
	// TargetPath is the entry's targetPath.
	TargetPath string
	// Sensitive is true when it came from a Secret: it is never shown.
	Sensitive bool
}

// readValues reads spec.helm.valuesFrom, in order, into layers, adding each referent to
// the digest h. A missing referent or key fails unless the entry is optional.
func readValues(ctx context.Context, r readerFunc, st *convergev1.SyncTarget, h hash.Hash) ([]ValuesLayer, []string, error) {
	if st.Spec.Helm == nil {
		return nil, nil, nil
	}
	var layers []ValuesLayer
	var sensitive []string
	for i, ref := range st.Spec.Helm.ValuesFrom {
		key := ref.ValuesKey
		if key == "" {
			key = DefaultValuesKey
		}
		sref := convergev1.SubstituteReference{Kind: ref.Kind, Name: ref.Name, Optional: ref.Optional}
		data, found, err := r(ctx, sref)
		if err != nil {
			return nil, nil, fmt.Errorf("spec.helm.valuesFrom[%d]: %w", i, err)
		}
		writeDigest(h, sref, found, data)
		v, ok := data[key]
		if !ok {
			if found && !ref.Optional {
				return nil, nil, fmt.Errorf("spec.helm.valuesFrom[%d]: %s %s/%s has no key %q", i, ref.Kind,
					st.Namespace, ref.Name, key)
			}
			continue
		}
		layer := ValuesLayer{Name: fmt.Sprintf("%s/%s[%s]", ref.Kind, ref.Name, key), Data: []byte(v),
			TargetPath: ref.TargetPath, Sensitive: ref.Kind == "Secret"}
		layers = append(layers, layer)
		if layer.Sensitive {
			sensitive = append(sensitive, sensitiveParts(v, ref.TargetPath != "")...)
		}
	}
	return layers, sensitive, nil
}

// sensitiveParts are the strings of a Secret's values document to keep out of messages:
// the whole value for a targetPath, else every scalar of the document (a rendered
// object's field holds one of them, not the document).
func sensitiveParts(v string, whole bool) []string {
	if whole {
		return []string{v}
	}
	out := []string{v}
	for _, s := range scalars([]byte(v)) {
		if len(s) >= 4 { // shorter scalars (true, 1, no) are everywhere: redacting them says nothing
			out = append(out, s)
		}
	}
	return out
}

// readerFunc reads one referent's data, and whether it exists.
type readerFunc func(ctx context.Context, ref convergev1.SubstituteReference) (map[string]string, bool, error)

// scalars returns the string forms of the scalars of a YAML document; nothing when it
// does not parse (the render says so, without the text).
func scalars(doc []byte) []string {
	var n yaml.Node
	if err := yaml.Unmarshal(doc, &n); err != nil {
		return nil
	}
	var out []string
	var walk func(*yaml.Node, bool)
	walk = func(n *yaml.Node, isKey bool) {
		if n.Kind == yaml.ScalarNode && !isKey {
			out = append(out, n.Value)
		}
		for i, c := range n.Content {
			walk(c, n.Kind == yaml.MappingNode && i%2 == 0)
		}
	}
	walk(&n, false)
	return out
}
