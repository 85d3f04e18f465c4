package render

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"

	yaml "go.yaml.in/yaml/v3"
)

// Parsing untrusted YAML safely.
//
// go.yaml.in/yaml/v3 (the parser of kustomize's kyaml, and ours) already refuses
// nesting deeper than 10 000 levels and, when decoding into Go values, documents
// whose alias expansion is "excessive" — but that ratio still lets a 1 KiB document
// expand to hundreds of thousands of nodes, and kyaml's DeAnchor copies every alias
// with no limit at all. So every document is first parsed into a yaml.Node tree,
// where an alias is a pointer and costs nothing, and measured: its depth, and the
// number of nodes its aliases would expand to (computed once per anchor, so a
// "billion laughs" document is rejected after a few hundred steps, in bounded
// memory). Only a document within Limits.MaxDepth and Limits.MaxAliasNodes is turned
// into JSON-compatible Go values, here or by kustomize.

// nodeStats are the size (nodes, aliases expanded) and height of a subtree.
type nodeStats struct{ size, height int }

// nodeChecker measures one document against the limits.
type nodeChecker struct {
	limits     Limits
	memo       map[*yaml.Node]nodeStats
	inProgress map[*yaml.Node]bool
	aliasNodes int
	// nested counts the levels of YAML-in-a-string being checked (kustomize parses
	// inline patches and generator configs held in strings).
	nested int
}

func newNodeChecker(limits Limits) *nodeChecker {
	return &nodeChecker{limits: limits}
}

// check walks n at the given depth (1 for a document's top-level value).
func (c *nodeChecker) check(n *yaml.Node, depth int) (nodeStats, error) {
	if n == nil {
		return nodeStats{}, nil
	}
	if depth > c.limits.MaxDepth {
		return nodeStats{}, classErr(ErrLimitExceeded, "document nests deeper than %d levels", c.limits.MaxDepth)
	}
	switch n.Kind {
	case yaml.AliasNode:
		return c.checkAlias(n, depth)
	case yaml.ScalarNode:
		if err := c.checkNestedYAML(n); err != nil {
			return nodeStats{}, err
		}
		return nodeStats{size: 1, height: 1}, nil
	}
	if n.Anchor != "" {
		if c.inProgress == nil {
			c.inProgress = map[*yaml.Node]bool{}
			c.memo = map[*yaml.Node]nodeStats{}
		}
		c.inProgress[n] = true
	}
	st, err := c.checkChildren(n, depth)
	if err != nil {
		return nodeStats{}, err
	}
	if n.Anchor != "" {
		delete(c.inProgress, n)
		c.memo[n] = st
	}
	return st, nil
}

// checkAlias measures what alias n expands to, once per anchor, against the limits.
func (c *nodeChecker) checkAlias(n *yaml.Node, depth int) (nodeStats, error) {
	target := n.Alias
	if target == nil {
		return nodeStats{}, classErr(ErrInvalidDocument, "alias *%s has no anchor", n.Value)
	}
	if c.inProgress[target] {
		return nodeStats{}, classErr(ErrInvalidDocument, "alias *%s refers to its own anchor", n.Value)
	}
	st, ok := c.memo[target]
	if !ok {
		var err error
		if st, err = c.check(target, depth); err != nil {
			return nodeStats{}, err
		}
	}
	if depth+st.height-1 > c.limits.MaxDepth {
		return nodeStats{}, classErr(ErrLimitExceeded, "document nests deeper than %d levels", c.limits.MaxDepth)
	}
	c.aliasNodes += st.size
	if c.aliasNodes > c.limits.MaxAliasNodes {
		return nodeStats{}, classErr(ErrLimitExceeded,
			"YAML aliases expand to more than %d nodes", c.limits.MaxAliasNodes)
	}
	return st, nil
}

// checkChildren measures a document, mapping or sequence node n from its children.
func (c *nodeChecker) checkChildren(n *yaml.Node, depth int) (nodeStats, error) {
	st := nodeStats{size: 1}
	childDepth := depth + 1
	if n.Kind == yaml.DocumentNode {
		childDepth = depth
	}
	for _, ch := range n.Content {
		cs, err := c.check(ch, childDepth)
		if err != nil {
			return nodeStats{}, err
		}
		st.size += cs.size
		st.height = max(st.height, cs.height)
	}
	if n.Kind != yaml.DocumentNode {
		st.height++
	}
	return st, nil
}

// checkNestedYAML applies the same checks to a string that kustomize may parse as
// YAML (an inline patch, generator or transformer config). Only strings that could
// hold an alias and a mapping are parsed, and at most two levels deep.
func (c *nodeChecker) checkNestedYAML(n *yaml.Node) error {
	s := n.Value
	if c.nested >= 2 || len(s) < 8 || !strings.Contains(s, "\n") ||
		!strings.ContainsRune(s, '&') || !strings.ContainsRune(s, '*') {
		return nil
	}
	inner := &nodeChecker{limits: c.limits, nested: c.nested + 1, aliasNodes: c.aliasNodes}
	if err := inner.checkAll([]byte(s)); err != nil {
		return err
	}
	c.aliasNodes = inner.aliasNodes
	return nil
}

// checkAll parses and checks every document of data. A document that does not parse
// ends the check without an error: whoever parses it next will report it.
func (c *nodeChecker) checkAll(data []byte) error {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	for {
		var n yaml.Node
		if err := dec.Decode(&n); err != nil {
			return nil //nolint:nilerr // not YAML: not ours to judge here
		}
		c.memo, c.inProgress = nil, nil
		if _, err := c.check(&n, 1); err != nil {
			return err
		}
	}
}

// guardYAML checks everything kustomize is about to read: when data parses as YAML,
// its documents must be within the depth and alias limits.
func guardYAML(data []byte, limits Limits) error {
	// Cheap filter: without both an anchor and an alias marker nothing can expand,
	// and deep nesting in alias-free YAML costs kustomize nothing worse than the
	// parser's own 10 000-level limit; the rendered objects' depth is checked after.
	if bytes.IndexByte(data, '&') < 0 || bytes.IndexByte(data, '*') < 0 {
		return nil
	}
	return newNodeChecker(limits).checkAll(data)
}

// decodedDoc is one non-empty document of a file.
type decodedDoc struct {
	index int // 1-based position among the file's documents
	value any
	node  *yaml.Node // the document's value
}

// decodeDocuments parses every YAML (or JSON) document of data into JSON-compatible
// values (map[string]any, []any, string, int64, float64, bool, nil), with YAML 1.2
// scalar rules as kustomize applies them. Empty documents are skipped but counted.
// maxDocs bounds the number of documents; errors name file.
func decodeDocuments(file string, data []byte, limits Limits, maxDocs int) ([]decodedDoc, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var out []decodedDoc
	for i := 1; ; i++ {
		var n yaml.Node
		err := dec.Decode(&n)
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			// yaml.v3 errors give a line and the problem, never the document's text.
			return nil, docErr(file, i, classErr(ErrInvalidDocument, "%s", strings.TrimPrefix(err.Error(), "yaml: ")))
		}
		if i > maxDocs {
			return nil, fileErr(file, classErr(ErrLimitExceeded, "more than %d documents", maxDocs))
		}
		c := newNodeChecker(limits)
		if _, err := c.check(&n, 1); err != nil {
			return nil, docErr(file, i, err)
		}
		if len(n.Content) == 0 {
			continue
		}
		v, err := toValue(n.Content[0])
		if err != nil {
			return nil, docErr(file, i, err)
		}
		if v == nil {
			continue // a document holding only comments or "null"
		}
		out = append(out, decodedDoc{index: i, value: v, node: n.Content[0]})
	}
}

// toValue converts a checked node into JSON-compatible Go values, expanding aliases
// and merge keys (`<<`). Error messages name keys and tags, never values.
func toValue(n *yaml.Node) (any, error) {
	switch n.Kind {
	case yaml.AliasNode:
		return toValue(n.Alias)
	case yaml.ScalarNode:
		return scalarValue(n)
	case yaml.SequenceNode:
		out := make([]any, 0, len(n.Content))
		for _, ch := range n.Content {
			v, err := toValue(ch)
			if err != nil {
				return nil, err
			}
			out = append(out, v)
		}
		return out, nil
	case yaml.MappingNode:
		return mappingValue(n)
	case yaml.DocumentNode:
		if len(n.Content) == 0 {
			return nil, nil
		}
		return toValue(n.Content[0])
	}
	return nil, classErr(ErrInvalidDocument, "unsupported YAML node kind %d", n.Kind)
}

func mappingValue(n *yaml.Node) (map[string]any, error) {
	out := make(map[string]any, len(n.Content)/2)
	var merges []*yaml.Node
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		for k.Kind == yaml.AliasNode {
			k = k.Alias
		}
		if k.Kind != yaml.ScalarNode {
			return nil, classErr(ErrInvalidDocument, "line %d: mapping key is not a scalar", k.Line)
		}
		if k.ShortTag() == "!!merge" {
			merges = append(merges, v)
			continue
		}
		key := k.Value
		if _, dup := out[key]; dup {
			return nil, classErr(ErrInvalidDocument, "line %d: key %q is defined twice", k.Line, key)
		}
		val, err := toValue(v)
		if err != nil {
			return nil, err
		}
		out[key] = val
	}
	// Merged keys never override explicit ones; earlier merge sources win.
	for _, m := range merges {
		for m.Kind == yaml.AliasNode {
			m = m.Alias
		}
		sources := []*yaml.Node{m}
		if m.Kind == yaml.SequenceNode {
			sources = m.Content
		}
		for _, src := range sources {
			for src.Kind == yaml.AliasNode {
				src = src.Alias
			}
			if src.Kind != yaml.MappingNode {
				return nil, classErr(ErrInvalidDocument, "line %d: merge key value is not a mapping", m.Line)
			}
			mv, err := mappingValue(src)
			if err != nil {
				return nil, err
			}
			for k, v := range mv {
				if _, ok := out[k]; !ok {
					out[k] = v
				}
			}
		}
	}
	return out, nil
}

func scalarValue(n *yaml.Node) (any, error) {
	switch n.ShortTag() {
	case "!!null":
		return nil, nil
	case "!!bool":
		switch n.Value {
		case "true", "True", "TRUE":
			return true, nil
		case "false", "False", "FALSE":
			return false, nil
		}
		var b bool
		if err := n.Decode(&b); err != nil {
			return nil, classErr(ErrInvalidDocument, "line %d: invalid boolean", n.Line)
		}
		return b, nil
	case "!!int":
		// Fast path for plain decimals; anything else (0x…, 0o…, 0…, 1_000, overflow)
		// is left to yaml.v3 so the result is exactly what kustomize would get.
		if plainDecimal(n.Value) {
			if i, err := strconv.ParseInt(n.Value, 10, 64); err == nil {
				return i, nil
			}
		}
		var v any
		if err := n.Decode(&v); err != nil {
			return nil, classErr(ErrInvalidDocument, "line %d: invalid integer", n.Line)
		}
		return normalizeNumber(v, n.Line)
	case "!!float":
		var v any
		if err := n.Decode(&v); err != nil {
			return nil, classErr(ErrInvalidDocument, "line %d: invalid number", n.Line)
		}
		return normalizeNumber(v, n.Line)
	default:
		// !!str, !!timestamp and !!binary stay the text they are written as (a
		// Secret's base64 data must reach the API server as written); so does a
		// scalar with a custom tag.
		return n.Value, nil
	}
}

// plainDecimal reports whether v cannot be read other than as base 10: no sign
// but '-', no leading zero (yaml.v3 reads 0777 as octal).
func plainDecimal(v string) bool {
	v = strings.TrimPrefix(v, "-")
	return v != "" && v[0] != '0' && v[0] != '+'
}

func normalizeNumber(v any, line int) (any, error) {
	switch x := v.(type) {
	case int:
		return int64(x), nil
	case int64:
		return x, nil
	case uint64:
		if x <= math.MaxInt64 {
			return int64(x), nil
		}
		return float64(x), nil
	case float64:
		if math.IsInf(x, 0) || math.IsNaN(x) {
			return nil, classErr(ErrInvalidDocument, "line %d: number is not finite", line)
		}
		return x, nil
	case string:
		return x, nil
	}
	return nil, classErr(ErrInvalidDocument, "line %d: unsupported number %s", line, fmt.Sprintf("%T", v))
}
