package render

import (
	"fmt"
	"sort"
	"strings"

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
// add keys, items or documents, turn a string into a number, or change an object's
// apiVersion or kind (never substituted). Map keys are not substituted either. The
// owner labels and the target namespace are set after substitution and win over it.
// A value is inserted as is: references in values are not expanded again.
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
		for k, v := range it.obj.Object {
			if k == "apiVersion" || k == "kind" {
				continue
			}
			out, err := x.walk(v, k)
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
}

// walk substitutes the strings under v, at the field path (for errors).
func (x *expander) walk(v any, path string) (any, error) {
	switch t := v.(type) {
	case string:
		return x.expandField(t, path)
	case map[string]any:
		for k, e := range t {
			out, err := x.walk(e, path+"."+k)
			if err != nil {
				return nil, err
			}
			t[k] = out
		}
	case []any:
		for i, e := range t {
			out, err := x.walk(e, fmt.Sprintf("%s[%d]", path, i))
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
