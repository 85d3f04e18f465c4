package render

import (
	"fmt"
	"sort"
	"strconv"
	"strings"

	yaml "go.yaml.in/yaml/v3"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	syaml "sigs.k8s.io/yaml"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
)

// Substitution is the variable substitution of spec.postBuild: after the render, ${var}
// in the string values of every object is replaced by the variable's value.
//
// The syntax follows Flux's post-build substitution for what it shares with it:
//
//   - ${var} is the value of var;
//   - ${var:=default} and ${var:-default} are default when var is unset or empty,
//     ${var=default} and ${var-default} when it is unset; the default may itself hold
//     references (${a:=${b}}), evaluated only when it is used;
//   - $${ is a literal ${ (so $${var} gives ${var}); unlike Flux, any other $$ is left
//     alone, and $var without braces is never touched;
//   - any other ${ (${1}, ${var^^}, an unterminated ${) is an error naming the object and
//     field, not a silent pass-through: escape it as $${, or annotate the object
//     converge.dev/substitute: disabled, which leaves it alone altogether.
//
// Unlike Flux, which substitutes the serialized YAML of an object and parses it again,
// only string values of the parsed object are substituted, in place: a value can never
// add keys, items or documents, or change an object's apiVersion or kind (never
// substituted). Map keys are not substituted either. The owner labels and the target
// namespace are set after substitution and win over it. A value is inserted as is:
// references in values are not expanded again.
//
// A value is typed as Flux types it, though: Flux parses the substituted text with
// sigs.k8s.io/yaml (YAML 1.1 scalars), so `replicas: ${n}` with n=3 is the number 3. The
// same holds here for a plain (unquoted, untagged) scalar that is exactly one reference,
// ${n} or ${n:=5}: when its value is one line that sigs.k8s.io/yaml reads as a number, a
// boolean or null (3, 0x1F, 1e3, 08, yes, on, ~, the empty string), it becomes that;
// anything else (a: b, [1, 2], text) stays the string it is. A quoted "${n}", a block
// scalar, a reference inside longer text (app:${tag}) and a scalar that is merged in
// through a YAML merge key (<<) stay strings. What was quoted is learnt from the YAML
// nodes the objects were decoded from (for kustomize, its output's nodes, which keep
// the style of its inputs).
type Substitution struct {
	// Vars are the variables by name.
	Vars map[string]string
	// Strict makes an unset variable without a default an error naming every such
	// variable (sorted); otherwise it is replaced by the empty string.
	Strict bool
	// Sensitive are the values read from Secrets: an object named after one is named
	// "[redacted]" in errors, and callers redact them from every message.
	Sensitive []string
}

// substitute runs s over the items in place, within the render's byte budget. Error
// messages name objects, fields and variables, never a value.
func substitute(items []item, s Substitution, limits Limits, display string) error {
	x := &expander{vars: s.Vars, strict: s.Strict, missing: map[string]bool{}, budget: limits.MaxTotalBytes}
	users := []string{}
	for _, it := range items {
		if it.obj.GetAnnotations()[convergev1.SubstituteAnnotation] == convergev1.DisabledValue {
			continue
		}
		x.newMissing = false
		x.plain = plainReferences(it.node)
		for k, v := range it.obj.Object {
			if k == "apiVersion" || k == "kind" {
				continue
			}
			out, err := x.walk(v, x.field(k))
			if err != nil {
				return it.err(fmt.Errorf("%s: %w", redact(idOf(it.obj).String(), s.Sensitive), err))
			}
			it.obj.Object[k] = out
		}
		if x.newMissing {
			users = append(users, redact(idOf(it.obj).String(), s.Sensitive))
		}
	}
	if len(x.missing) == 0 {
		return nil
	}
	names := make([]string, 0, len(x.missing))
	for n := range x.missing {
		names = append(names, n)
	}
	sort.Strings(names)
	if len(users) > 3 {
		users = append(users[:3], fmt.Sprintf("%d more", len(users)-3))
	}
	return &Error{File: display, Err: classErr(ErrSubstitution, "variables not set (strict): %s; used by %s",
		strings.Join(names, ", "), strings.Join(users, ", "))}
}

// expander substitutes the strings of one render.
type expander struct {
	vars   map[string]string
	strict bool
	// missing holds the unset variables without default met so far (strict mode);
	// newMissing says the current object used one, even one seen before.
	missing    map[string]bool
	newMissing bool
	// budget is what substituted strings may still grow by, in bytes.
	budget int64
	// depth is how deep in defaults the expansion is.
	depth int
	// plain holds the keys (see field) of the current object's plain scalars that are
	// one reference: their values are typed.
	plain map[string]bool
}

// field is where a value is: its path for messages, and its unambiguous key, computed
// only when the object has plain references: the map keys on the way, each quoted
// (strconv.Quote), and the list indexes in brackets, run together.
type field struct{ path, key string }

// field is the top-level field k.
func (x *expander) field(k string) field {
	f := field{path: k}
	if len(x.plain) > 0 {
		f.key = strconv.Quote(k)
	}
	return f
}

// child is the field k of the map at f.
func (x *expander) child(f field, k string) field {
	c := field{path: f.path + "." + k}
	if len(x.plain) > 0 {
		c.key = f.key + strconv.Quote(k)
	}
	return c
}

// item is the item i of the list at f.
func (x *expander) item(f field, i int) field {
	c := field{path: fmt.Sprintf("%s[%d]", f.path, i)}
	if len(x.plain) > 0 {
		c.key = fmt.Sprintf("%s[%d]", f.key, i)
	}
	return c
}

// walk substitutes the strings under v, at field f.
func (x *expander) walk(v any, f field) (any, error) {
	switch t := v.(type) {
	case string:
		out, err := x.expandField(t, f.path)
		if err != nil || !x.plain[f.key] {
			return out, err
		}
		return typedScalar(out), nil
	case map[string]any:
		for k, e := range t {
			out, err := x.walk(e, x.child(f, k))
			if err != nil {
				return nil, err
			}
			t[k] = out
		}
	case []any:
		for i, e := range t {
			out, err := x.walk(e, x.item(f, i))
			if err != nil {
				return nil, err
			}
			t[i] = out
		}
	}
	return v, nil
}

// expandField substitutes one string value.
func (x *expander) expandField(s, path string) (string, error) {
	if !strings.Contains(s, "${") {
		return s, nil
	}
	out, err := x.expand(s)
	if err != nil {
		return "", fmt.Errorf("%s: %w", path, err)
	}
	return out, nil
}

// maxNesting bounds how deep defaults may nest references (${a:=${b:=${c}}} is 3), so
// that a hostile string cannot make substitution recurse or rescan without end.
const maxNesting = 8

// expand substitutes the references of s.
func (x *expander) expand(s string) (string, error) {
	var b strings.Builder
	i := 0
	for {
		j := strings.Index(s[i:], "${")
		if j < 0 {
			b.WriteString(s[i:])
			return b.String(), nil
		}
		j += i
		if j > i && s[j-1] == '$' { // $${ is a literal ${
			b.WriteString(s[i : j-1])
			b.WriteString("${")
			i = j + 2
			continue
		}
		b.WriteString(s[i:j])
		ref, end, err := parseReference(s, j)
		if err != nil {
			return "", err
		}
		val, err := x.value(ref)
		if err != nil {
			return "", err
		}
		// What a string grows by is charged as it grows, before it is built.
		if grow := int64(len(val) - (end - j)); grow > 0 {
			if x.budget -= grow; x.budget < 0 {
				return "", classErr(ErrLimitExceeded, "substituted values exceed the render's byte budget")
			}
		}
		b.WriteString(val)
		i = end
	}
}

// value is what a reference stands for.
func (x *expander) value(r reference) (string, error) {
	v, set := x.vars[r.name]
	switch {
	case r.op == "" && set:
		return v, nil
	case r.op == "":
		if x.strict {
			x.missing[r.name], x.newMissing = true, true
		}
		return "", nil
	case set && (v != "" || (r.op != ":=" && r.op != ":-")):
		return v, nil
	case x.depth >= maxNesting:
		return "", classErr(ErrSubstitution, "defaults nest deeper than %d references", maxNesting)
	}
	x.depth++
	defer func() { x.depth-- }()
	return x.expand(r.def)
}

// reference is one ${name}, ${name<op>default}.
type reference struct {
	name, op, def string
}

// parseReference reads the reference starting at s[start] ("${") and returns it with
// the index just after its closing brace.
func parseReference(s string, start int) (reference, int, error) {
	i := start + 2
	n := i
	for n < len(s) && isNameByte(s[n], n == i) {
		n++
	}
	if n == i {
		return reference{}, 0, classErr(ErrSubstitution, "%s", badReference("${ not followed by a variable name"))
	}
	r := reference{name: s[i:n]}
	if n < len(s) && s[n] == '}' {
		return r, n + 1, nil
	}
	for _, op := range []string{":=", ":-", "=", "-"} {
		if strings.HasPrefix(s[n:], op) {
			r.op = op
			break
		}
	}
	if r.op == "" {
		return reference{}, 0, classErr(ErrSubstitution, "%s", badReference("unsupported expression in ${"+r.name+"…}"))
	}
	body := n + len(r.op)
	depth := 1
	for k := body; k < len(s); k++ {
		switch {
		case strings.HasPrefix(s[k:], "${"):
			depth++
			k++
		case s[k] == '}':
			if depth--; depth == 0 {
				r.def = s[body:k]
				return r, k + 1, nil
			}
		}
	}
	return reference{}, 0, classErr(ErrSubstitution, "%s", badReference("unterminated ${"+r.name))
}

func badReference(what string) string {
	return what + " (write $${ for a literal ${, or annotate the object " +
		convergev1.SubstituteAnnotation + ": " + convergev1.DisabledValue + ")"
}

// isNameByte reports whether c may be in a variable name ([_a-zA-Z][_a-zA-Z0-9]*).
func isNameByte(c byte, first bool) bool {
	switch {
	case c == '_', c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z':
		return true
	case c >= '0' && c <= '9':
		return !first
	}
	return false
}

// maxTyped bounds the values that are read as YAML scalars: numbers, booleans and null
// are short; anything longer stays a string.
const maxTyped = 64

// typedScalar is the value of a plain scalar after substitution, s, as Flux has it: the
// number, boolean or null sigs.k8s.io/yaml reads in s (YAML 1.1 scalars: 0x1F is 31, 010
// is 8, 08 and 1e3 are numbers, yes and on are true, "" and ~ are null), else s itself.
// A value that reads as a string, a map or a list stays the text it is.
func typedScalar(s string) any {
	if len(s) > maxTyped || strings.ContainsAny(s, "\n\r") {
		return s
	}
	j, err := syaml.YAMLToJSON([]byte(s))
	if err != nil {
		return s
	}
	var v any
	if err := utiljson.Unmarshal(j, &v); err != nil {
		return s
	}
	switch v.(type) {
	case nil, bool, int64, float64:
		return v
	}
	return s
}

// plainReferences returns the keys (see field) of the plain scalars under n that are
// exactly one reference (${n}, ${n:=5}): untagged, unquoted, not a block scalar. Aliases
// are followed (the render has bounded what they expand to); merge keys are not.
func plainReferences(n *yaml.Node) map[string]bool {
	var out map[string]bool
	var path []segment // formatted only for a reference
	var visit func(n *yaml.Node)
	visit = func(n *yaml.Node) {
		for n != nil && n.Kind == yaml.AliasNode {
			n = n.Alias
		}
		switch {
		case n == nil:
		case n.Kind == yaml.ScalarNode && n.Style == 0 && n.Tag == "!!str" && oneReference(n.Value):
			if out == nil {
				out = map[string]bool{}
			}
			out[keyOf(path)] = true
		case n.Kind == yaml.SequenceNode:
			for i, ch := range n.Content {
				path = append(path, segment{index: i})
				visit(ch)
				path = path[:len(path)-1]
			}
		case n.Kind == yaml.MappingNode:
			for i := 0; i+1 < len(n.Content); i += 2 {
				if k := n.Content[i]; k.Kind == yaml.ScalarNode && k.ShortTag() != "!!merge" {
					path = append(path, segment{key: k.Value, isKey: true})
					visit(n.Content[i+1])
					path = path[:len(path)-1]
				}
			}
		}
	}
	visit(n)
	return out
}

// segment is one step of a field's path: a map key or a list index.
type segment struct {
	key   string
	index int
	isKey bool
}

// keyOf is the key of a path, as field builds it.
func keyOf(path []segment) string {
	var b strings.Builder
	for _, s := range path {
		if s.isKey {
			b.WriteString(strconv.Quote(s.key))
			continue
		}
		fmt.Fprintf(&b, "[%d]", s.index)
	}
	return b.String()
}

// oneReference reports whether s is exactly one reference, ${name} or ${name<op>default}.
func oneReference(s string) bool {
	if !strings.HasPrefix(s, "${") {
		return false
	}
	_, end, err := parseReference(s, 0)
	return err == nil && end == len(s)
}

// listItemNode is the node of item i of the List document n, nil when not found.
func listItemNode(n *yaml.Node, i int) *yaml.Node {
	for n != nil && n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	if n == nil || n.Kind != yaml.MappingNode {
		return nil
	}
	for k := 0; k+1 < len(n.Content); k += 2 {
		if n.Content[k].Value != "items" {
			continue
		}
		items := n.Content[k+1]
		for items.Kind == yaml.AliasNode {
			items = items.Alias
		}
		if items.Kind == yaml.SequenceNode && i < len(items.Content) {
			return items.Content[i]
		}
	}
	return nil
}
