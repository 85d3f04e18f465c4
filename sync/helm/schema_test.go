package helm

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"
)

// secretValues fail the constraints of schemaWithConstraints, each at its own path; they
// hold what the quotings of an error message escape: quotes, backslashes, control and
// non-ASCII characters, HTML characters (JSON escapes them).
var secretValues = map[string]string{
	"image.tag": `Hunter2'Secret`,
	"mode":      `back\slash"quote`,
	"password":  "tab\there\u2028ünïcödé✓",
	"region":    `<&>html'"\`,
	"token":     "Zm9vYmFy-0123456789",
	"nested":    `O'Brien\n"deep"`,
}

const schemaWithConstraints = `{
  "$schema": "http://json-schema.org/draft-07/schema#",
  "type": "object",
  "properties": {
    "image": {"type": "object", "properties": {"tag": {"type": "string", "pattern": "^v[0-9]+"}}},
    "mode": {"enum": ["fast", "safe"]},
    "password": {"type": "string", "minLength": 64},
    "region": {"const": "eu-west-1"},
    "token": {"type": "integer"},
    "nested": {"type": "array", "items": {"type": "string", "maxLength": 3}},
    "pin": {"type": "integer", "maximum": 9999}
  }
}`

// TestSchemaErrorsDoNotQuoteValues: a value that fails values.schema.json is not in the
// error, in any quoting: the values come from spec.helm.valuesFrom Secrets, and the error
// reaches the status and the events, where only the raw and Go-quoted forms are redacted.
// The error names the path and the constraint, which come from the chart.
func TestSchemaErrorsDoNotQuoteValues(t *testing.T) {
	dir := writeChart(t, map[string]string{
		"Chart.yaml":         fmt.Sprintf(chartYAML, "schema"),
		"values.schema.json": schemaWithConstraints,
		"templates/cm.yaml":  configMap("cm", "  a: b\n"),
	})
	secret := fmt.Sprintf("image:\n  tag: %s\nmode: %s\npassword: %s\nregion: %s\ntoken: %s\nnested: [%s]\npin: 73918264\n",
		strconv.Quote(secretValues["image.tag"]), strconv.Quote(secretValues["mode"]), strconv.Quote(secretValues["password"]),
		strconv.Quote(secretValues["region"]), strconv.Quote(secretValues["token"]), strconv.Quote(secretValues["nested"]))
	vals, err := BuildValues([]ValuesSource{{Name: "Secret/app[values.yaml]", Data: []byte(secret), Sensitive: true}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	chart := mustLoad(t, dir)
	_, err = render(t, chart, Options{Values: vals})
	if err == nil {
		t.Fatal("Render: no error for values that break the schema")
	}
	msg := err.Error()
	rest := msg
	var missing []string
	for _, want := range []string{
		`at /image/tag: does not match pattern "^v[0-9]+"`,
		`at /mode: value must be one of "fast", "safe"`,
		`at /nested/0: longer than 3 characters`,
		`at /password: shorter than 64 characters`,
		`at /pin: greater than the maximum 9999`,
		`at /region: value must be "eu-west-1"`,
		`at /token: got string, want integer`,
	} {
		i := strings.Index(rest, want)
		if i < 0 {
			missing = append(missing, want)
			continue
		}
		rest = rest[i+len(want):] // the next one comes after it
	}
	if len(missing) > 0 {
		t.Errorf("the error does not say, in this order, %q:\n%s", missing, err)
	}
	for path, v := range secretValues {
		for _, q := range quotings(v) {
			if strings.Contains(msg, q) {
				t.Errorf("the error holds the value of %s, as %s:\n%s", path, q, msg)
			}
		}
	}
	for _, pin := range []string{"73918264", "7.3918264", "73,918,264"} {
		if strings.Contains(msg, pin) {
			t.Errorf("the error holds the value of pin, as %s:\n%s", pin, msg)
		}
	}
	for range 3 { // the causes are sorted: the message is the same every time, and the status unchanged
		if _, again := render(t, chart, Options{Values: vals}); again == nil || again.Error() != msg {
			t.Fatalf("another render says:\n%v\nthe first:\n%s", again, msg)
		}
	}
}

// quotings are the forms of v an error message may hold: raw, Go-quoted, JSON-quoted,
// single-quoted with \' (jsonschema's), each with and without its quotes.
func quotings(v string) []string {
	goQ := strconv.Quote(v)
	b, _ := json.Marshal(v)
	jsonQ := string(b)
	single := "'" + strings.ReplaceAll(strings.ReplaceAll(goQ[1:len(goQ)-1], `\"`, `"`), `'`, `\'`) + "'"
	out := []string{v}
	for _, q := range []string{goQ, jsonQ, single} {
		out = append(out, q, q[1:len(q)-1])
	}
	return out
}

// TestSubchartValuesOfTheWrongTypeAreNotQuoted: values that give a subchart's key a
// string or a number (a Secret's, through valuesFrom) are refused naming the subchart and
// the type, without the value Helm's coalescing would quote.
func TestSubchartValuesOfTheWrongTypeAreNotQuoted(t *testing.T) {
	c := mustLoad(t, vendoredChart(t))
	for _, v := range []string{`"Hunter2'Secret3"`, "12345678"} {
		vals, err := BuildValues([]ValuesSource{{Name: "Secret/app[values.yaml]", Data: []byte("dirsub: " + v + "\n"), Sensitive: true}}, nil)
		if err != nil {
			t.Fatal(err)
		}
		_, err = render(t, c, Options{ReleaseName: "r", Values: vals})
		if err == nil {
			t.Fatalf("Render with dirsub: %s: no error", v)
		}
		msg := err.Error()
		if !strings.Contains(msg, "values of subchart dirsub: want a map") {
			t.Errorf("error %q does not name the subchart", msg)
		}
		for _, leak := range []string{"Hunter2", "12345678", "1.2345678e+07"} {
			if strings.Contains(msg, leak) {
				t.Errorf("error %q quotes the value (%s)", msg, leak)
			}
		}
	}
}
