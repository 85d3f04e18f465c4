package convert

import (
	"bytes"
	"fmt"
	"io"
	"strconv"
	"strings"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"
	"k8s.io/apimachinery/pkg/runtime"
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

// render is one document: "---", the header, the object. The object is encoded from its
// fields, not re-read from text, so that a value holding a line break YAML 1.1 knows
// (NEL, LS, PS) is written escaped rather than refused.
func render(o Object) ([]byte, error) {
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(o.Object)
	if err != nil {
		return nil, fmt.Errorf("converting %s: %w", escape(o.Object.GetName()), err)
	}
	delete(m, "status")
	if meta, ok := m["metadata"].(map[string]any); ok {
		delete(meta, "creationTimestamp")
	}
	var doc yaml.Node
	if err := doc.Encode(m); err != nil {
		return nil, err
	}
	var header []string
	for _, n := range o.Notes {
		if key := locate(&doc, n.Path); key != nil {
			key.HeadComment = joinComment(key.HeadComment, notePrefix+n.Text)
		} else {
			header = append(header, notePrefix+n.Text)
		}
	}
	var buf bytes.Buffer
	buf.WriteString("---\n" + comment("Converted from "+strings.Join(o.From, ", ")+".") + "\n")
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

// comment is s as a one-line comment: what the input names (objects, fields, expressions)
// cannot end it, its line breaks and other unprintable characters being escaped.
func comment(s string) string {
	return "# " + escape(s)
}

func joinComment(old, s string) string {
	if old == "" {
		return comment(s)
	}
	return old + "\n" + comment(s)
}

// escape writes every rune of s that is not printable (control characters, line and
// paragraph separators, format characters, invalid UTF-8) as its Go escape, \n, \u2028…,
// as strconv.Quote would; the printable runes stay as they are.
func escape(s string) string {
	if strings.IndexFunc(s, func(r rune) bool { return !strconv.IsPrint(r) || r == utf8.RuneError }) < 0 {
		return s
	}
	var b strings.Builder
	for i, r := range s {
		switch {
		case r == utf8.RuneError:
			_, size := utf8.DecodeRuneInString(s[i:])
			q := strconv.Quote(s[i : i+size])
			b.WriteString(q[1 : len(q)-1])
		case strconv.IsPrint(r):
			b.WriteRune(r)
		default:
			q := strconv.QuoteRune(r)
			b.WriteString(q[1 : len(q)-1])
		}
	}
	return b.String()
}

// quoteName is a name or namespace as written in the names of input objects: as it is,
// or Go-quoted when it holds what would be escaped (or a quote or backslash), so that the
// odd name is seen for what it is.
func quoteName(s string) string {
	if q := strconv.Quote(s); q[1:len(q)-1] != s {
		return q
	}
	return s
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
