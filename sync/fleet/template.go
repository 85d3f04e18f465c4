package fleet

import (
	"errors"
	"fmt"
	"sort"
	"strings"
	"text/template"
	"text/template/parse"
)

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

// funcs are the functions a template may call, each answering to the render's budget b:
// these, and the built-ins index, len, not, and and or. The other built-ins (call, print,
// printf, println, html, js, urlquery, slice) are refused; eq, ne, lt, le, gt and ge are
// ours, so that what they compare is counted.
func (b *budget) funcs() template.FuncMap {
	return template.FuncMap{
		"lower":      b.unary("lower", strings.ToLower),
		"upper":      b.unary("upper", strings.ToUpper),
		"trimPrefix": b.binary("trimPrefix", func(prefix, s string) string { return strings.TrimPrefix(s, prefix) }),
		"trimSuffix": b.binary("trimSuffix", func(suffix, s string) string { return strings.TrimSuffix(s, suffix) }),
		"default":    b.binary("default", defaultValue),
		"replace":    b.replace,
		"trunc":      b.trunc,
		"eq":         b.eq,
		"ne":         func(x, y any) (bool, error) { eq, err := b.eq(x, y); return !eq, err },
		"lt":         b.order("lt", func(c int) bool { return c < 0 }),
		"le":         b.order("le", func(c int) bool { return c <= 0 }),
		"gt":         b.order("gt", func(c int) bool { return c > 0 }),
		"ge":         b.order("ge", func(c int) bool { return c >= 0 }),
		"call":       refused("call"),
		"print":      refused("print"),
		"printf":     refused("printf"),
		"println":    refused("println"),
		"html":       refused("html"),
		"js":         refused("js"),
		"urlquery":   refused("urlquery"),
		"slice":      refused("slice"),
	}
}

// replace is strings.ReplaceAll(s, old, new) that refuses, before it builds it, a result
// larger than one rendered SyncTarget may be.
func replace(old, replacement, s string) (string, error) {
	if old == "" {
		return "", errors.New("replace: the string to replace is empty")
	}
	if len(replacement) > len(old) {
		grow := strings.Count(s, old) * (len(replacement) - len(old))
		if len(s)+grow > MaxRenderedBytes {
			return "", &boundError{fmt.Sprintf("replace: the result would exceed %d bytes", MaxRenderedBytes)}
		}
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

// str is a parameter's value as a string (a node's own value); a string is not copied.
func str(v any) string {
	switch v := plain(v).(type) {
	case string:
		return v
	default:
		return fmt.Sprint(v)
	}
}

// defaultValue is s, or def when s is empty.
func defaultValue(def, s string) string {
	if s != "" {
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

// compare orders a and b, both strings or both numbers, as the built-in lt does.
func compare(a, b any) (int, error) {
	a, b = plain(a), plain(b)
	if x, ok := a.(string); ok {
		if y, ok := b.(string); ok {
			return strings.Compare(x, y), nil
		}
	}
	x, okA := number(a)
	y, okB := number(b)
	if !okA || !okB {
		return 0, fmt.Errorf("incompatible types for comparison: %T and %T", a, b)
	}
	switch {
	case x < y:
		return -1, nil
	case x > y:
		return 1, nil
	}
	return 0, nil
}

// number is v as a float64 when it is a number (a template's constants are int or float64,
// len's result an int).
func number(v any) (float64, bool) {
	switch v := v.(type) {
	case int:
		return float64(v), true
	case float64:
		return v, true
	}
	return 0, false
}

// renderer renders the strings of one SyncTarget from one parameter set, within the bound
// of one SyncTarget (left) and the budget of the set's render (b).
type renderer struct {
	params Params
	data   node
	left   int
	b      *budget
}

func (b *budget) renderer(p Params) *renderer {
	return &renderer{params: p, data: p.data(), left: MaxRenderedBytes, b: b}
}

// parsedTemplate is a template string parsed, and how many nodes its run walks at most.
type parsedTemplate struct {
	t     *template.Template
	nodes int
	err   error
}

// parse parses s, or returns what it parsed before: a set's template strings are parsed
// once for all its parameter sets (parsing a template costs more than executing it).
func (b *budget) parse(s string) (parsedTemplate, error) {
	if c, ok := b.parsed[s]; ok {
		return c, c.err
	}
	c := parsedTemplate{}
	c.t, c.err = template.New("").Option("missingkey=error").Funcs(b.funcs()).Parse(s)
	if c.err == nil {
		c.nodes, c.err = checkTree(c.t)
	}
	b.parsed[s] = c
	return c, c.err
}

// render executes s as a template. A string without "{{" is returned as is.
func (r *renderer) render(s string) (string, error) {
	if err := r.b.check(); err != nil {
		return "", err
	}
	if !strings.Contains(s, "{{") {
		return s, r.spend(len(s) + 2)
	}
	c, err := r.b.parse(s)
	if err != nil {
		return "", err
	}
	r.b.nodes += c.nodes
	w := &cappedWriter{r: r}
	if err := c.t.Execute(w, r.data); err != nil {
		return "", unwrapExec(err)
	}
	return w.b.String(), r.spend(2)
}

// spend counts n bytes of the SyncTarget against its bound and the set's.
func (r *renderer) spend(n int) error {
	if n > r.left {
		return errTargetTooLarge
	}
	if n > r.b.bytes {
		return errSetTooLarge
	}
	r.left -= n
	r.b.bytes -= n
	return nil
}

// unwrapExec keeps the bounds' errors recognisable, and short, through text/template's
// wrapping.
func unwrapExec(err error) error {
	var bound *boundError
	if errors.As(err, &bound) {
		return bound
	}
	return err
}

// cappedWriter is what a template writes to: it fails as soon as the bounds of the
// SyncTarget or of the set would be passed, or the render's deadline has, before it keeps
// a byte more.
type cappedWriter struct {
	b strings.Builder
	r *renderer
}

func (w *cappedWriter) Write(p []byte) (int, error) {
	if err := w.r.b.check(); err != nil {
		return 0, err
	}
	if err := w.r.spend(len(p)); err != nil {
		return 0, err
	}
	return w.b.Write(p)
}

// checkTree refuses what could make a template's run longer than its text: range loops,
// and template, define and block actions (other templates). The rest (if, with, else,
// pipelines) runs each node at most once: it returns how many nodes there are.
func checkTree(t *template.Template) (int, error) {
	if len(t.Templates()) > 1 {
		return 0, errors.New("define and block are not allowed in a SyncTargetSet template")
	}
	return checkNode(t.Root)
}

func checkNode(n parse.Node) (int, error) {
	switch n := n.(type) {
	case nil:
		return 0, nil
	case *parse.ListNode:
		return checkList(n)
	case *parse.RangeNode:
		return 0, errors.New("range is not allowed in a SyncTargetSet template")
	case *parse.TemplateNode:
		return 0, errors.New("template is not allowed in a SyncTargetSet template")
	case *parse.IfNode:
		return checkBranch(&n.BranchNode)
	case *parse.WithNode:
		return checkBranch(&n.BranchNode)
	case *parse.ActionNode:
		return 1 + pipeNodes(n.Pipe), nil
	}
	return 1, nil
}

func checkList(l *parse.ListNode) (int, error) {
	if l == nil {
		return 0, nil
	}
	total := 1
	for _, c := range l.Nodes {
		n, err := checkNode(c)
		if err != nil {
			return 0, err
		}
		total += n
	}
	return total, nil
}

func checkBranch(b *parse.BranchNode) (int, error) {
	n, err := checkList(b.List)
	if err != nil {
		return 0, err
	}
	m, err := checkList(b.ElseList)
	if err != nil {
		return 0, err
	}
	return 1 + pipeNodes(b.Pipe) + n + m, nil
}

// pipeNodes counts the commands, arguments and field names of a pipeline.
func pipeNodes(p *parse.PipeNode) int {
	if p == nil {
		return 0
	}
	n := 1 + len(p.Decl)
	for _, c := range p.Cmds {
		n++
		for _, arg := range c.Args {
			n += argNodes(arg)
		}
	}
	return n
}

func argNodes(arg parse.Node) int {
	switch a := arg.(type) {
	case *parse.PipeNode:
		return pipeNodes(a)
	case *parse.FieldNode:
		return len(a.Ident)
	case *parse.VariableNode:
		return len(a.Ident)
	case *parse.ChainNode:
		return argNodes(a.Node) + len(a.Field)
	}
	return 1
}
