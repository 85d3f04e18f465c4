package convert

import (
	"bytes"
	"fmt"
	"io"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
	"k8s.io/apimachinery/pkg/runtime"
	sigsyaml "sigs.k8s.io/yaml"
)

// Print writes the objects of res as multi-document YAML, each preceded by comments that
// name what it was made from, its fields commented with their notes.
func Print(w io.Writer, res Result) error {
	for _, o := range res.Objects {
		b, err := render(o)
		if err != nil {
			return err
		}
		if _, err := w.Write(b); err != nil {
			return err
		}
	}
	return nil
}

// render is one document: "---", the header, the object.
func render(o Object) ([]byte, error) {
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(o.Object)
	if err != nil {
		return nil, fmt.Errorf("converting %s: %w", o.Object.GetName(), err)
	}
	delete(m, "status")
	if meta, ok := m["metadata"].(map[string]any); ok {
		delete(meta, "creationTimestamp")
	}
	raw, err := sigsyaml.Marshal(m)
	if err != nil {
		return nil, err
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		return nil, err
	}
	var header []string
	for _, n := range o.Notes {
		if key := locate(doc.Content[0], n.Path); key != nil {
			key.HeadComment = joinComment(key.HeadComment, notePrefix+n.Text)
		} else {
			header = append(header, notePrefix+n.Text)
		}
	}
	var buf bytes.Buffer
	buf.WriteString("---\n# Converted from " + strings.Join(o.From, ", ") + ".\n")
	for _, h := range header {
		buf.WriteString(comment(h) + "\n")
	}
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(&doc); err != nil {
		return nil, err
	}
	return buf.Bytes(), enc.Close()
}

func comment(s string) string {
	return "# " + strings.ReplaceAll(s, "\n", "\n# ")
}

func joinComment(old, s string) string {
	if old == "" {
		return comment(s)
	}
	return old + "\n" + comment(s)
}

// locate finds the key of the field at path (a.b[0].c) in the mapping n, or of its
// deepest present parent; nil when not even the first key is there.
func locate(n *yaml.Node, path string) *yaml.Node {
	var last *yaml.Node
	cur, item := n, false
	for _, seg := range strings.Split(path, ".") {
		name, idx := splitIndex(seg)
		key, val := lookupKey(cur, name)
		if key == nil {
			return last
		}
		last = key
		if item && cur.Content[0] == key {
			// The first key of a list item: the comment goes above the "- ".
			last = cur
		}
		cur, item = val, len(idx) > 0
		for _, i := range idx {
			if cur.Kind != yaml.SequenceNode || i >= len(cur.Content) {
				return last
			}
			cur = cur.Content[i]
		}
	}
	return last
}

func lookupKey(n *yaml.Node, name string) (key, val *yaml.Node) {
	if n == nil || n.Kind != yaml.MappingNode {
		return nil, nil
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == name {
			return n.Content[i], n.Content[i+1]
		}
	}
	return nil, nil
}

// splitIndex reads name[1][2] as name and 1, 2.
func splitIndex(seg string) (string, []int) {
	name, rest, _ := strings.Cut(seg, "[")
	var idx []int
	for rest != "" {
		num, after, _ := strings.Cut(rest, "]")
		if i, err := strconv.Atoi(num); err == nil {
			idx = append(idx, i)
		}
		_, rest, _ = strings.Cut(after, "[")
	}
	return name, idx
}
