package helm

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestBuildValuesLayersInOrderAndInlineWins(t *testing.T) {
	layers := []ValuesSource{
		{Name: "values.yaml", Data: []byte("a: 1\nm:\n  b: file1\n  c: file1\nlist: [1, 2]\n")},
		{Name: "values-prod.yaml", Data: []byte("m:\n  c: file2\n  d: file2\nlist: [3]\n---\nsecondDoc: true\n")},
		{Name: "ConfigMap/c[extra]", Data: []byte("a: 2\n")},
	}
	got, err := BuildValues(layers, []byte(`{"a": 3, "m": {"d": "inline"}}`))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]any{
		"a":         float64(3),
		"m":         map[string]any{"b": "file1", "c": "file2", "d": "inline"},
		"list":      []any{float64(3)},
		"secondDoc": true,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

func TestBuildValuesTargetPathSetsAStringLikeSetString(t *testing.T) {
	layers := []ValuesSource{
		{Name: "values.yaml", Data: []byte("db:\n  hosts:\n  - name: a\n    port: 5432\n")},
		{Name: "Secret/db[password]", TargetPath: "db.hosts[0].password", Data: []byte("p,a=ss\\w0rd"), Sensitive: true},
		{Name: "ConfigMap/c[port]", TargetPath: "db.hosts[0].port", Data: []byte("6543")},
		{Name: "ConfigMap/c[dotted]", TargetPath: `annotations.example\.com/team`, Data: []byte("true")},
		{Name: "ConfigMap/c[new]", TargetPath: "extra[1].x", Data: []byte("y")},
	}
	got, err := BuildValues(layers, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]any{
		"db": map[string]any{"hosts": []any{map[string]any{
			"name": "a", "port": "6543", "password": "p,a=ss\\w0rd",
		}}},
		"annotations": map[string]any{"example.com/team": "true"},
		"extra":       []any{nil, map[string]any{"x": "y"}},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

func TestBuildValuesErrorsNameTheLayerAndHideSensitiveContent(t *testing.T) {
	secret := "hunter2-very-secret"
	cases := []struct {
		layer   ValuesSource
		inline  string
		want    string
		private string
	}{
		{layer: ValuesSource{Name: "Secret/db[values.yaml]", Sensitive: true, Data: []byte("password: " + secret + "\n  bad: [" + secret)},
			want: "values Secret/db[values.yaml]", private: secret},
		{layer: ValuesSource{Name: "Secret/db[list]", Sensitive: true, Data: []byte("- " + secret + "\n")},
			want: "values Secret/db[list]", private: secret},
		{layer: ValuesSource{Name: "Secret/db[path]", Sensitive: true, TargetPath: "a[-1]", Data: []byte(secret)},
			want: "values Secret/db[path]", private: secret},
		{layer: ValuesSource{Name: "values-prod.yaml", Data: []byte("a: [1\n")}, want: "values values-prod.yaml"},
		{inline: `[1]`, want: "spec.helm.values"},
	}
	for _, tc := range cases {
		var layers []ValuesSource
		if tc.layer.Name != "" {
			layers = append(layers, tc.layer)
		}
		_, err := BuildValues(layers, []byte(tc.inline))
		if err == nil {
			t.Fatalf("%s: no error", tc.want)
		}
		if !strings.Contains(err.Error(), tc.want) {
			t.Errorf("error %q does not name %q", err, tc.want)
		}
		if tc.private != "" && strings.Contains(err.Error(), tc.private) {
			t.Errorf("error %q leaks the sensitive layer", err)
		}
	}
}
