package remote

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
)

var errNotAPI = errors.New("not API objects")

// readChecked reads body through a kindCheck, whole and a byte at a time, and returns
// what was read, or the error.
func readChecked(t *testing.T, body string, watch bool) (string, error) {
	t.Helper()
	var out string
	var errs [2]error
	for i, r := range []func(io.Reader) io.Reader{func(r io.Reader) io.Reader { return r }, iotest.OneByteReader} {
		k := &kindCheck{body: io.NopCloser(r(strings.NewReader(body))), watch: watch, notAPI: errNotAPI}
		got, err := io.ReadAll(k)
		errs[i] = err
		if err == nil {
			out = string(got)
		}
	}
	if (errs[0] == nil) != (errs[1] == nil) {
		t.Fatalf("whole: %v, byte by byte: %v", errs[0], errs[1])
	}
	return out, errs[0]
}

func encode(t *testing.T, obj runtime.Object) string {
	t.Helper()
	var buf bytes.Buffer
	if err := clientgoscheme.Codecs.LegacyCodec(corev1.SchemeGroupVersion, metav1.SchemeGroupVersion).Encode(obj, &buf); err != nil {
		t.Fatal(err)
	}
	return buf.String()
}

// TestKindCheckPassesAPIObjects: what an API server answers passes through unchanged.
func TestKindCheckPassesAPIObjects(t *testing.T) {
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cm", Namespace: "team"},
		Data: map[string]string{"kind": "x", "quote\"d": "a \\\"kind\\\": {", "apiVersion": "[]"}}
	cr := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "example.com/v1", "kind": "Widget", "aaa": []any{"x"}, "Data": map[string]any{"kind": 1},
		"metadata": map[string]any{"name": "w"}, "spec": map[string]any{"kind": map[string]any{}, "apiVersion": nil},
	}}
	crJSON, err := json.Marshal(cr.Object) // sorted keys: "Data" and "aaa" before "apiVersion"
	if err != nil {
		t.Fatal(err)
	}
	event := func(typ, obj string) string { return `{"type":"` + typ + `","object":` + obj + "}\n" }
	for name, tc := range map[string]struct {
		body  string
		watch bool
	}{
		"typed object":  {body: encode(t, cm)},
		"list":          {body: encode(t, &corev1.ConfigMapList{Items: []corev1.ConfigMap{*cm, *cm}})},
		"status":        {body: encode(t, &metav1.Status{Status: metav1.StatusFailure, Message: "no", Code: 404})},
		"custom object": {body: string(crJSON)},
		"discovery":     {body: `{"kind":"APIVersions","versions":["v1"],"serverAddressByClientCIDRs":[{"clientCIDR":"0.0.0.0/0","serverAddress":"10.0.0.1:6443"}]}`},
		"indented":      {body: "\n {\n  \"metadata\" : {\"name\": \"x\"},\n  \"kind\" : \"ConfigMap\" ,\"apiVersion\":\"v1\"}\n"},
		"empty":         {body: ""},
		"watch": {watch: true, body: event("ADDED", encode(t, cm)) + event("BOOKMARK", `{"kind":"ConfigMap","apiVersion":"v1","metadata":{"resourceVersion":"12"}}`) +
			event("ERROR", `{"kind":"Status","apiVersion":"v1","status":"Failure","code":410}`) + event("MODIFIED", string(crJSON))},
	} {
		t.Run(name, func(t *testing.T) {
			got, err := readChecked(t, tc.body, tc.watch)
			if err != nil || got != tc.body {
				t.Fatalf("want the answer passed unchanged, got %q, %v", got, err)
			}
		})
	}
}

// TestKindCheckRefuses: an answer that client-go's decoders would quote fails its read.
func TestKindCheckRefuses(t *testing.T) {
	for name, tc := range map[string]struct {
		body  string
		watch bool
	}{
		"no kind":              {body: `{"credentials":"s3cr3t"}`},
		"empty kind":           {body: `{"kind":"","credentials":"s3cr3t"}`},
		"kind not a string":    {body: `{"kind":1,"credentials":"s3cr3t"}`},
		"kind of odd letters":  {body: `{"kind":"s3cr3t value with spaces"}`},
		"kind too long":        {body: `{"kind":"` + strings.Repeat("k", 64) + `"}`},
		"escaped kind":         {body: `{"kind":"Config\u004dap"}`},
		"kind in another case": {body: `{"kind":"ConfigMap","Kind":""}`},
		"kind escaped":         {body: `{"kind":"ConfigMap","\u006bind":""}`},
		"kelvin kind":          {body: "{\"kind\":\"ConfigMap\",\"\u212aind\":\"\"}"},
		"odd apiVersion":       {body: `{"kind":"ConfigMap","apiVersion":"s3cr3t value"}`},
		"kind in a later one":  {body: `{"kind":"ConfigMap"}{"credentials":"s3cr3t"}`},
		"an array":             {body: `["s3cr3t"]`},
		"a string":             {body: `"s3cr3t"`},
		"a number":             {body: `12345`},
		"unbalanced":           {body: `{"kind":"ConfigMap"}}`},
		"too deep":             {body: `{"kind":"A","x":` + strings.Repeat("[", maxDepth+1)},
		"watch, no kind":       {watch: true, body: `{"type":"ADDED","object":{"apiVersion":"v1","credentials":"s3cr3t"}}`},
		"watch, no apiVersion": {watch: true, body: `{"type":"ADDED","object":{"kind":"ConfigMap","credentials":"s3cr3t"}}`},
		"watch, odd type":      {watch: true, body: `{"type":"s3cr3t","object":{"kind":"ConfigMap","apiVersion":"v1"}}`},
		"watch, odd object":    {watch: true, body: `{"type":"ADDED","object":"s3cr3t"}`},
		"watch, kind of event": {watch: true, body: `{"kind":"s3cr3t","type":"ADDED","object":{"kind":"ConfigMap","apiVersion":"v1"}}`},
		"watch, escaped key":   {watch: true, body: `{"\u0074ype":"s3cr3t","type":"ADDED","object":{"kind":"ConfigMap","apiVersion":"v1"}}`},
		"watch, second event":  {watch: true, body: `{"type":"ADDED","object":{"kind":"ConfigMap","apiVersion":"v1"}}` + "\n" + `{"type":"ADDED","object":{"credentials":"s3cr3t"}}`},
	} {
		t.Run(name, func(t *testing.T) {
			got, err := readChecked(t, tc.body, tc.watch)
			if !errors.Is(err, errNotAPI) {
				t.Fatalf("want the answer refused, got %q, %v", got, err)
			}
		})
	}
}

// TestKindCheckNeverHandsOverTheOffendingObject: the chunk an answer is refused in is not
// passed on, so a decoder reading a watch event by event never has the offending one whole.
func TestKindCheckNeverHandsOverTheOffendingObject(t *testing.T) {
	good := `{"type":"ADDED","object":{"kind":"ConfigMap","apiVersion":"v1"}}` + "\n"
	bad := `{"type":"ADDED","object":{"credentials":"s3cr3t"}}` + "\n"
	for _, r := range []func(io.Reader) io.Reader{func(r io.Reader) io.Reader { return r }, iotest.OneByteReader} {
		k := &kindCheck{body: io.NopCloser(r(strings.NewReader(good + bad))), watch: true, notAPI: errNotAPI}
		got, err := io.ReadAll(k)
		if !errors.Is(err, errNotAPI) {
			t.Fatalf("want the answer refused, got %v", err)
		}
		dec := json.NewDecoder(bytes.NewReader(got))
		var ev map[string]any
		for dec.Decode(&ev) == nil {
			if _, ok := ev["object"].(map[string]any)["kind"]; !ok {
				t.Fatalf("a decoder got the object without a kind whole: %v", ev)
			}
		}
	}
}
