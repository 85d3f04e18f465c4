package helm

import (
	"fmt"
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

// TestShownValuesMaskWhatSecretsGave: the values shown of a render keep every key, show
// what files, ConfigMaps and inline values gave, and mask each value a Secret gave —
// whole documents and targetPath strings alike — unless a later layer set it again;
// computed adds the chart's own values, masked the same.
func TestShownValuesMaskWhatSecretsGave(t *testing.T) {
	dir := writeChart(t, map[string]string{
		"Chart.yaml":  "apiVersion: v2\nname: shop\nversion: 1.0.0\n",
		"values.yaml": "image: {tag: \"1.0\"}\ndb: {host: localhost, password: \"\"}\n",
	})
	layers := []ValuesSource{
		{Name: "values-prod.yaml", Data: []byte("replicas: 3\n")},
		{Name: "Secret/db[values.yaml]", Data: []byte("db:\n  password: pa55-from-secret\n  ports: [5432, 5433]\nauth: {token: tok-from-secret, user: admin}\n"), Sensitive: true},
		{Name: "Secret/api[key]", TargetPath: "api.key", Data: []byte("key-from-secret"), Sensitive: true},
		{Name: "ConfigMap/c[user]", TargetPath: "auth.user", Data: []byte("operator")},
	}
	supplied, computed, err := ShownValues(mustLoad(t, dir), layers, []byte(`{"image":{"tag":"2.0"}}`))
	if err != nil {
		t.Fatal(err)
	}
	db := "*** (from Secret/db[values.yaml])"
	want := map[string]any{
		"replicas": float64(3),
		"db":       map[string]any{"password": db, "ports": []any{db, db}},
		"auth":     map[string]any{"token": db, "user": "operator"},
		"api":      map[string]any{"key": "*** (from Secret/api[key])"},
		"image":    map[string]any{"tag": "2.0"},
	}
	if diff := cmp.Diff(want, supplied); diff != "" {
		t.Errorf("supplied (-want +got):\n%s", diff)
	}
	if got := computed["db"].(map[string]any)["host"]; got != "localhost" {
		t.Errorf("computed db.host = %v, want the chart's own localhost", got)
	}
	if got := computed["db"].(map[string]any)["password"]; got != db {
		t.Errorf("computed db.password = %v, want it masked", got)
	}
	for _, side := range []map[string]any{supplied, computed} {
		text := fmt.Sprint(side)
		for _, secret := range []string{"pa55-from-secret", "tok-from-secret", "key-from-secret", "5432"} {
			if strings.Contains(text, secret) {
				t.Errorf("%q shown: %s", secret, text)
			}
		}
	}
	if _, _, err := ShownValues(nil, []ValuesSource{{Name: "Secret/x[v]", Data: []byte("a: [unclosed: s3cret-text"), Sensitive: true}}, nil); err == nil ||
		strings.Contains(err.Error(), "s3cret-text") {
		t.Errorf("a broken Secret layer: %v, want an error without its text", err)
	}
}
