package helm

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"slices"
	"strconv"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"
	chartv2 "helm.sh/helm/v4/pkg/chart/v2"
)

// validateSchemas checks the coalesced values against values.schema.json of the chart and of
// each subchart (with that subchart's values), as Helm's install does, but a schema may not
// load anything: Helm's validator follows $ref to local files and over HTTP, this one refuses
// both (a urn: reference is permissive, as Helm's is when unresolved).
func validateSchemas(ch *chartv2.Chart, values map[string]any) error {
	var sb strings.Builder
	if len(ch.Schema) > 0 {
		if err := validateSchema(ch.Schema, values); err != nil {
			fmt.Fprintf(&sb, "%s:\n%s\n", ch.Name(), err)
		}
	}
	for _, sub := range ch.Dependencies() {
		raw, ok := values[sub.Name()]
		if !ok || raw == nil {
			continue
		}
		subValues, ok := raw.(map[string]any)
		if !ok {
			fmt.Fprintf(&sb, "%s:\ninvalid type for values: expected object (map), got %T\n", sub.Name(), raw)
			continue
		}
		if err := validateSchemas(sub, subValues); err != nil {
			sb.WriteString(err.Error())
		}
	}
	if sb.Len() > 0 {
		return errors.New(sb.String())
	}
	return nil
}

const schemaURL = "file:///values.schema.json"

func validateSchema(schemaJSON []byte, values map[string]any) error {
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(schemaJSON))
	if err != nil {
		return fmt.Errorf("values.schema.json: %w", err)
	}
	c := jsonschema.NewCompiler()
	c.UseLoader(noLoader{})
	if err := c.AddResource(schemaURL, doc); err != nil {
		return err
	}
	schema, err := c.Compile(schemaURL)
	if err != nil {
		return err
	}
	if err := schema.Validate(values); err != nil {
		var verr *jsonschema.ValidationError
		if !errors.As(err, &verr) {
			return errors.New("the values do not validate against values.schema.json")
		}
		return errors.New(describeFailure(verr))
	}
	return nil
}

// describeFailure lists the failures of a validation, one a line, each with the JSON
// pointer of the value and the constraint it fails, never the value itself: values come
// from spec.helm.valuesFrom Secrets too, and jsonschema's own messages quote them in a
// form ('it\'s') that redaction does not recognise. Sibling failures are sorted, so that
// the same values give the same message.
func describeFailure(verr *jsonschema.ValidationError) string {
	var lines []string
	var walk func(e *jsonschema.ValidationError, depth int)
	walk = func(e *jsonschema.ValidationError, depth int) {
		// The root (the whole schema) and a $ref with its one cause say nothing of their own.
		_, top := e.ErrorKind.(*kind.Schema)
		_, ref := e.ErrorKind.(*kind.Reference)
		if silent := top || ref && len(e.Causes) == 1; !silent {
			lines = append(lines, strings.Repeat("  ", depth)+"- at "+pointer(e.InstanceLocation)+": "+constraint(e.ErrorKind))
			depth++
		}
		causes := slices.Clone(e.Causes)
		slices.SortStableFunc(causes, func(a, b *jsonschema.ValidationError) int {
			return cmp.Or(slices.Compare(a.InstanceLocation, b.InstanceLocation),
				slices.Compare(a.ErrorKind.KeywordPath(), b.ErrorKind.KeywordPath()))
		})
		for _, c := range causes {
			walk(c, depth)
		}
	}
	walk(verr, 0)
	return strings.Join(lines, "\n")
}

// pointer is the JSON pointer of a location in the values, Go-quoted when a key holds
// what would be escaped.
func pointer(loc []string) string {
	if len(loc) == 0 {
		return "the top level"
	}
	var sb strings.Builder
	for _, tok := range loc {
		sb.WriteString("/" + strings.ReplaceAll(strings.ReplaceAll(tok, "~", "~0"), "/", "~1"))
	}
	if q := strconv.Quote(sb.String()); q[1:len(q)-1] != sb.String() {
		return q
	}
	return sb.String()
}

// constraint says which constraint of the schema failed. The kinds that carry the value
// (pattern, enum, const, format, lengths, bounds, content) are written here, with what the
// schema wants and without the value; the others are jsonschema's messages, which name
// types, counts and property names only; a kind not known here is named by its keyword.
func constraint(k jsonschema.ErrorKind) string {
	if s, ok := boundOrContent(k); ok {
		return s
	}
	switch k := k.(type) {
	case *kind.Pattern:
		return "does not match pattern " + strconv.Quote(k.Want)
	case *kind.Enum:
		return "value must be " + oneOf(k.Want)
	case *kind.Const:
		return "value must be " + oneOf([]any{k.Want})
	case *kind.Format:
		return "not a valid " + k.Want
	case *kind.Type, *kind.Required, *kind.Dependency, *kind.DependentRequired,
		*kind.AdditionalProperties, *kind.PropertyNames, *kind.MinProperties, *kind.MaxProperties,
		*kind.MinItems, *kind.MaxItems, *kind.AdditionalItems, *kind.UniqueItems, *kind.Contains,
		*kind.MinContains, *kind.MaxContains, *kind.ContentSchema, *kind.Group, *kind.Not,
		*kind.AllOf, *kind.AnyOf, *kind.OneOf, *kind.FalseSchema, *kind.Reference, *kind.RefCycle,
		*kind.InvalidJsonValue, *kind.Schema:
		// jsonschema's message of the kind alone, without the location it would quote.
		return strings.TrimPrefix((&jsonschema.ValidationError{ErrorKind: k}).Error(), "at '': ")
	}
	return fmt.Sprintf("'%s' failed", strings.Join(k.KeywordPath(), "/"))
}

// boundOrContent says which length, numeric bound or content constraint failed.
func boundOrContent(k jsonschema.ErrorKind) (string, bool) {
	switch k := k.(type) {
	case *kind.MinLength:
		return fmt.Sprintf("shorter than %d characters", k.Want), true
	case *kind.MaxLength:
		return fmt.Sprintf("longer than %d characters", k.Want), true
	case *kind.Minimum:
		return "less than the minimum " + number(k.Want), true
	case *kind.Maximum:
		return "greater than the maximum " + number(k.Want), true
	case *kind.ExclusiveMinimum:
		return "not greater than the exclusive minimum " + number(k.Want), true
	case *kind.ExclusiveMaximum:
		return "not less than the exclusive maximum " + number(k.Want), true
	case *kind.MultipleOf:
		return "not a multiple of " + number(k.Want), true
	case *kind.ContentEncoding:
		return "not " + strconv.Quote(k.Want) + " encoded", true
	case *kind.ContentMediaType:
		return "not of media type " + strconv.Quote(k.Want), true
	}
	return "", false
}

// number is a bound of the schema in decimal: 1, 0.5.
func number(r *big.Rat) string {
	if r.IsInt() {
		return r.RatString()
	}
	f, _ := r.Float64()
	return strconv.FormatFloat(f, 'g', -1, 64)
}

// oneOf writes the values of an enum or const of the schema as JSON: "a", or one of "a", "b".
func oneOf(want []any) string {
	items := make([]string, 0, len(want))
	for _, w := range want {
		b, err := json.Marshal(w)
		if err != nil {
			b = []byte("a value of the schema")
		}
		items = append(items, string(b))
	}
	if len(items) == 1 {
		return items[0]
	}
	return "one of " + strings.Join(items, ", ")
}

// noLoader loads no schema from anywhere: no files, no network.
type noLoader struct{}

func (noLoader) Load(url string) (any, error) {
	if strings.HasPrefix(url, "urn:") {
		return true, nil
	}
	return nil, fmt.Errorf("schema reference %s: not loaded (a chart's schema may not read files or the network)", url)
}
