package fleet

import (
	"errors"
	"fmt"
	"sort"
	"strings"
	"text/template"
	"text/template/parse"
)

// MaxRenderedBytes caps what the strings of one rendered SyncTarget may add up to.
const MaxRenderedBytes = 1 << 20

// Params is one parameter set: parameter name → value.
type Params map[string]string

// node is a parameter that is also the prefix of dotted parameters: "path" when
// "path.basename" exists. It prints as its own value (the "" key, which no field
// reference can name) and its fields are the names after the dot.
type node map[string]any

// String is the parameter's own value.
func (n node) String() string {
	s, _ := n[""].(string)
	return s
}

// data is the template data of a parameter set: every parameter under its full name (for
// index . "path.basename"), and dotted names nested on their dots (for .path.basename).
func (p Params) data() node {
	out := node{}
	keys := make([]string, 0, len(p))
	for k := range p {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		out[k] = p[k]
	}
	for _, k := range keys {
		segs := strings.Split(k, ".")
		if len(segs) < 2 || slicesHasEmpty(segs) {
			continue
		}
		nest(out, segs, p[k])
	}
	return out
}

func slicesHasEmpty(ss []string) bool {
	for _, s := range ss {
		if s == "" {
			return true
		}
	}
	return false
}

// nest puts v at the path segs under n, turning a plain value met on the way into a node
// that keeps it as its own value.
func nest(n node, segs []string, v string) {
	for _, seg := range segs[:len(segs)-1] {
		switch cur := n[seg].(type) {
		case node:
			n = cur
		case string:
			child := node{"": cur}
			n[seg] = child
			n = child
		default:
			child := node{}
			n[seg] = child
			n = child
		}
	}
	last := segs[len(segs)-1]
	if child, ok := n[last].(node); ok {
		child[""] = v
		return
	}
	n[last] = v
}

// refused stands for a built-in function templates may not call.
func refused(name string) func(...any) (string, error) {
	return func(...any) (string, error) {
		return "", fmt.Errorf("function %q is not allowed in a SyncTargetSet template", name)
	}
}

// funcs are the functions a template may call: these, and the built-ins index, len, not,
// and, or, eq, ne, lt, le, gt and ge. The other built-ins (call, print, printf, println,
// html, js, urlquery, slice) are refused.
var funcs = template.FuncMap{
	"lower":      func(s any) string { return strings.ToLower(str(s)) },
	"upper":      func(s any) string { return strings.ToUpper(str(s)) },
	"trimPrefix": func(prefix string, s any) string { return strings.TrimPrefix(str(s), prefix) },
	"trimSuffix": func(suffix string, s any) string { return strings.TrimSuffix(str(s), suffix) },
	"replace":    func(old, replacement string, s any) (string, error) { return replace(old, replacement, str(s)) },
	"trunc":      func(n int, s any) string { return trunc(n, str(s)) },
	"default":    defaultValue,
	"eq":         func(a any, bs ...any) bool { return equal(a, bs...) },
	"ne":         func(a, b any) bool { return !equal(a, b) },
	"call":       refused("call"),
	"print":      refused("print"),
	"printf":     refused("printf"),
	"println":    refused("println"),
	"html":       refused("html"),
	"js":         refused("js"),
	"urlquery":   refused("urlquery"),
	"slice":      refused("slice"),
}

// replace is strings.ReplaceAll(s, old, new) that refuses to grow past MaxRenderedBytes.
func replace(old, replacement, s string) (string, error) {
	if old != "" && len(replacement) > len(old) {
		grow := strings.Count(s, old) * (len(replacement) - len(old))
		if len(s)+grow > MaxRenderedBytes {
			return "", fmt.Errorf("replace: the result would exceed %d bytes", MaxRenderedBytes)
		}
	}
	if old == "" {
		return "", errors.New("replace: the string to replace is empty")
	}
	return strings.ReplaceAll(s, old, replacement), nil
}

// trunc keeps the first n bytes of s (all of it when n is negative or past its end).
func trunc(n int, s string) string {
	if n < 0 || n >= len(s) {
		return s
	}
	return s[:n]
}

// str is a parameter's value as a string (a node's own value).
func str(v any) string { return fmt.Sprint(plain(v)) }

// defaultValue is v, or def when v is empty.
func defaultValue(def string, v any) string {
	if s := str(v); s != "" {
		return s
	}
	return def
}

// plain turns a node into its own value.
func plain(v any) any {
	if n, ok := v.(node); ok {
		return n.String()
	}
	return v
}

func equal(a any, bs ...any) bool {
	a = plain(a)
	for _, b := range bs {
		if a == plain(b) {
			return true
		}
	}
	return false
}

// renderer renders the strings of one SyncTarget from one parameter set, within a byte
// budget shared by all of them.
type renderer struct {
	data   node
	budget int
	// parsed, when set, keeps the templates parsed for the other parameter sets.
	parsed parsedTemplates
}

func newRenderer(p Params) *renderer {
	return &renderer{data: p.data(), budget: MaxRenderedBytes}
}

// parsedTemplates keeps every template string of a set parsed once for all its parameter
// sets: parsing a template costs more than executing it. Its size is that of the set's
// template.
type parsedTemplates map[string]parsedTemplate

type parsedTemplate struct {
	t   *template.Template
	err error
}

// get parses s, or returns what it parsed before.
func (p parsedTemplates) get(s string) (*template.Template, error) {
	if c, ok := p[s]; ok {
		return c.t, c.err
	}
	t, err := parseTemplate(s)
	if p != nil {
		p[s] = parsedTemplate{t: t, err: err}
	}
	return t, err
}

func parseTemplate(s string) (*template.Template, error) {
	t, err := template.New("").Option("missingkey=error").Funcs(funcs).Parse(s)
	if err != nil {
		return nil, err
	}
	if err := checkTree(t); err != nil {
		return nil, err
	}
	return t, nil
}

// render executes s as a template. A string without "{{" is returned as is.
func (r *renderer) render(s string) (string, error) {
	if !strings.Contains(s, "{{") {
		return r.spend(s)
	}
	t, err := r.parsed.get(s)
	if err != nil {
		return "", err
	}
	w := &cappedWriter{left: r.budget}
	if err := t.Execute(w, r.data); err != nil {
		return "", unwrapExec(err)
	}
	r.budget = w.left
	return w.b.String(), nil
}

func (r *renderer) spend(s string) (string, error) {
	if len(s) > r.budget {
		return "", errTooLarge
	}
	r.budget -= len(s)
	return s, nil
}

var errTooLarge = fmt.Errorf("the rendered SyncTarget exceeds %d bytes", MaxRenderedBytes)

// unwrapExec keeps the cap's error recognisable through text/template's wrapping.
func unwrapExec(err error) error {
	if errors.Is(err, errTooLarge) {
		return errTooLarge
	}
	return err
}

// cappedWriter fails once more than left bytes are written.
type cappedWriter struct {
	b    strings.Builder
	left int
}

func (w *cappedWriter) Write(p []byte) (int, error) {
	if len(p) > w.left {
		return 0, errTooLarge
	}
	w.left -= len(p)
	return w.b.Write(p)
}

// checkTree refuses what could make a template's run longer than its text: range loops,
// and template, define and block actions (other templates). The rest (if, with, else,
// pipelines) runs each node at most once.
func checkTree(t *template.Template) error {
	if len(t.Templates()) > 1 {
		return errors.New("define and block are not allowed in a SyncTargetSet template")
	}
	return checkNode(t.Root)
}

func checkNode(n parse.Node) error {
	switch n := n.(type) {
	case nil:
		return nil
	case *parse.ListNode:
		if n == nil {
			return nil
		}
		for _, c := range n.Nodes {
			if err := checkNode(c); err != nil {
				return err
			}
		}
	case *parse.RangeNode:
		return errors.New("range is not allowed in a SyncTargetSet template")
	case *parse.TemplateNode:
		return errors.New("template is not allowed in a SyncTargetSet template")
	case *parse.IfNode:
		return checkBranch(&n.BranchNode)
	case *parse.WithNode:
		return checkBranch(&n.BranchNode)
	}
	return nil
}

func checkBranch(b *parse.BranchNode) error {
	if err := checkNode(b.List); err != nil {
		return err
	}
	if b.ElseList == nil {
		return nil
	}
	return checkNode(b.ElseList)
}
