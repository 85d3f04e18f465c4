package apply

import (
	"encoding/base64"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// redactedError is an error whose message has the values of Secrets removed; it unwraps to
// the original, whose message must not be shown.
type redactedError struct {
	msg string
	err error
}

func (e *redactedError) Error() string { return e.msg }
func (e *redactedError) Unwrap() error { return e.err }

// RedactSecretValues removes from err's message the values of the Secrets among objects:
// the API server quotes an invalid value in its error (".stringData.password: expected
// string, got ...<value>"), and that message ends up in the status, the events and the logs.
func RedactSecretValues(err error, objects []*unstructured.Unstructured) error {
	if err == nil {
		return nil
	}
	var values []string
	var collect func(v any)
	collect = func(v any) {
		switch x := v.(type) {
		case map[string]any:
			for _, e := range x {
				collect(e)
			}
		case []any:
			for _, e := range x {
				collect(e)
			}
		case string:
			values = append(values, x)
			if b, derr := base64.StdEncoding.DecodeString(x); derr == nil {
				values = append(values, string(b))
			}
		case nil:
		default:
			values = append(values, fmt.Sprint(x))
		}
	}
	for _, o := range objects {
		if o.GetKind() == "Secret" && o.GroupVersionKind().Group == "" {
			collect(o.Object["data"])
			collect(o.Object["stringData"])
		}
	}
	return RedactValues(err, values)
}

// RedactValues removes values from err's message (see RedactString); err itself when
// none occurs in it, else an error that unwraps to err.
func RedactValues(err error, values []string) error {
	if err == nil {
		return nil
	}
	msg := err.Error()
	redacted := RedactString(msg, values)
	if redacted == msg {
		return err
	}
	return &redactedError{msg: redacted, err: err}
}

// RedactString replaces every value of four characters or more in msg, and its quoted
// form, by "[redacted]".
func RedactString(msg string, values []string) string {
	values = slices.Clone(values)
	// Longest first, so that a value containing another is removed whole. Very short values
	// would blank out ordinary words of the message.
	sort.Slice(values, func(i, j int) bool { return len(values[i]) > len(values[j]) })
	for _, v := range values {
		if len(v) < 4 {
			continue
		}
		msg = strings.ReplaceAll(msg, v, "[redacted]")
		if q := strconv.Quote(v); q[1:len(q)-1] != v {
			msg = strings.ReplaceAll(msg, q[1:len(q)-1], "[redacted]")
		}
	}
	return msg
}
