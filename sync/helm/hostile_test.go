package helm

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

const filesGetTemplate = `apiVersion: v1
kind: ConfigMap
metadata:
  name: files
data:
  got: {{ .Files.Get %q | quote }}
`

func TestLoadChartRefusesSymlinksLeavingTheChart(t *testing.T) {
	cases := map[string]func(t *testing.T, dir string){
		"file to /etc/passwd": func(t *testing.T, dir string) {
			symlink(t, "/etc/passwd", filepath.Join(dir, "passwd"))
		},
		"template to /etc/passwd": func(t *testing.T, dir string) {
			symlink(t, "/etc/passwd", filepath.Join(dir, "templates", "passwd.yaml"))
		},
		"relative, up and out": func(t *testing.T, dir string) {
			symlink(t, "../../../../../../../../etc/passwd", filepath.Join(dir, "files", "passwd"))
		},
		"directory to /etc": func(t *testing.T, dir string) {
			symlink(t, "/etc", filepath.Join(dir, "etc"))
		},
		"directory inside the chart": func(t *testing.T, dir string) {
			symlink(t, "templates", filepath.Join(dir, "loop"))
		},
	}
	for name, setup := range cases {
		t.Run(name, func(t *testing.T) {
			dir := writeChart(t, map[string]string{
				"Chart.yaml":           fmt.Sprintf(chartYAML, "evil"),
				"templates/files.yaml": fmt.Sprintf(filesGetTemplate, "passwd"),
			})
			setup(t, dir)
			_, err := LoadChart(dir)
			if !errors.Is(err, ErrChartRefused) {
				t.Fatalf("LoadChart: %v, want ErrChartRefused", err)
			}
			if !strings.Contains(err.Error(), "symlink") {
				t.Errorf("error %q does not say symlink", err)
			}
		})
	}
}

func TestLoadChartFollowsASymlinkToAFileInsideTheChart(t *testing.T) {
	dir := writeChart(t, map[string]string{
		"Chart.yaml":           fmt.Sprintf(chartYAML, "linked"),
		"files/real.txt":       "inside",
		"templates/files.yaml": fmt.Sprintf(filesGetTemplate, "link.txt"),
	})
	symlink(t, "files/real.txt", filepath.Join(dir, "link.txt"))
	rel, err := render(t, mustLoad(t, dir), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if got, _, _ := unstructuredString(rel.Objects[0].Object, "data", "got"); got != "inside" {
		t.Errorf(".Files.Get of the link = %q, want the file's content", got)
	}
}

func TestFilesGetCannotLeaveTheChart(t *testing.T) {
	for _, p := range []string{"../../../../../../etc/passwd", "/etc/passwd", "files/../../../../../../../etc/passwd"} {
		dir := writeChart(t, map[string]string{
			"Chart.yaml":           fmt.Sprintf(chartYAML, "escape"),
			"templates/files.yaml": fmt.Sprintf(filesGetTemplate, p),
		})
		rel, err := render(t, mustLoad(t, dir), Options{})
		if err != nil {
			t.Fatal(err)
		}
		if got, _, _ := unstructuredString(rel.Objects[0].Object, "data", "got"); got != "" {
			t.Errorf(".Files.Get %q = %q, want nothing", p, got)
		}
	}
}

func TestRenderStopsRunawayTemplates(t *testing.T) {
	cases := []struct {
		name, tpl string
		timeout   time.Duration
		maxOut    int64
		want      string
	}{
		{name: "include recursion", tpl: `{{ define "x" }}{{ include "x" . }}{{ end }}{{ include "x" . }}`,
			timeout: time.Minute, want: "nested reference name: x"},
		{name: "endless nested loop calling functions", timeout: time.Second, want: "deadline",
			tpl: `{{ range until 1000000 }}{{ range until 1000000 }}{{ range until 1000000 }}{{ "x" | quote }}{{ end }}{{ end }}{{ end }}`},
		{name: "loop writing more than the output bound", timeout: time.Minute, maxOut: 1 << 20, want: "in all",
			tpl: `{{ range until 1000000 }}{{ repeat 1000 "x" }}{{ end }}`},
		{name: "one huge repeat", timeout: time.Minute, want: "repeat",
			tpl: `{{ repeat 1000000000 "xxxxxxxxxx" }}`},
		{name: "huge until", timeout: time.Minute, want: "until",
			tpl: `{{ range until 2000000000 }}x{{ end }}`},
		{name: "huge indent", timeout: time.Minute, maxOut: 1 << 20, want: "nindent",
			tpl: `{{ repeat 1000 "a\n" | nindent 100000 }}`},
		{name: "output bound", timeout: time.Minute, maxOut: 1 << 16, want: "more than 65536",
			tpl: "{{ range .Values.items }}" + strings.Repeat("y", 1000) + "\n{{ end }}"},
	}
	items := make([]any, 100)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := runtime.NumGoroutine()
			dir := writeChart(t, map[string]string{
				"Chart.yaml":         fmt.Sprintf(chartYAML, "runaway"),
				"templates/run.yaml": tc.tpl,
			})
			ctx, cancel := context.WithTimeout(context.Background(), tc.timeout)
			defer cancel()
			_, err := Render(ctx, mustLoad(t, dir), Options{ReleaseName: "r", MaxOutputBytes: tc.maxOut,
				Values: map[string]any{"items": items}})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Render: %v, want an error saying %q", err, tc.want)
			}
			if len(err.Error()) > 2*maxErrorLen {
				t.Errorf("error of %d bytes", len(err.Error()))
			}
			waitGoroutines(t, before)
		})
	}
}

// waitGoroutines waits until the render's goroutine has ended: a stopped render must not keep
// running (and allocating) in the background.
func waitGoroutines(t *testing.T, before int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for runtime.NumGoroutine() > before {
		if time.Now().After(deadline) {
			t.Fatalf("%d goroutines, %d before the render: the template still runs", runtime.NumGoroutine(), before)
		}
		runtime.Gosched()
		time.Sleep(10 * time.Millisecond)
	}
}

func TestLoadChartRefusesHostileArchives(t *testing.T) {
	sub := fmt.Sprintf(chartYAML, "sub")
	many := []tarEntry{{name: "sub/Chart.yaml", content: sub}}
	for i := range MaxChartFiles + 1 {
		many = append(many, tarEntry{name: fmt.Sprintf("sub/files/f%d", i), content: "x"})
	}
	cases := []struct {
		name    string
		entries []tarEntry
		want    string
	}{
		{name: "parent path", want: "leaves the archive", entries: []tarEntry{
			{name: "sub/Chart.yaml", content: sub}, {name: "sub/../../../etc/evil", content: "x"}}},
		{name: "absolute path", want: "absolute", entries: []tarEntry{
			{name: "sub/Chart.yaml", content: sub}, {name: "sub//etc/evil", content: "x"}}},
		{name: "symlink entry", want: "not a regular file", entries: []tarEntry{
			{name: "sub/Chart.yaml", content: sub}, {name: "sub/templates/passwd.yaml", typ: tar.TypeSymlink, link: "/etc/passwd"}}},
		{name: "hard link entry", want: "not a regular file", entries: []tarEntry{
			{name: "sub/Chart.yaml", content: sub}, {name: "sub/values.yaml", typ: tar.TypeLink, link: "/etc/passwd"}}},
		{name: "decompression bomb", want: "larger than", entries: []tarEntry{
			{name: "sub/Chart.yaml", content: sub}, {name: "sub/files/zeros", size: 200 << 20}}},
		{name: "too many files", want: "more than 10000 files", entries: many},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := writeChart(t, map[string]string{"Chart.yaml": fmt.Sprintf(chartYAML, "parent")})
			writeTgz(t, filepath.Join(dir, "charts", "sub-0.1.0.tgz"), tc.entries)
			if fi, err := os.Stat(filepath.Join(dir, "charts", "sub-0.1.0.tgz")); err != nil || fi.Size() > 1<<20 {
				t.Fatalf("archive: %v, %d bytes: should be small", err, fi.Size())
			}
			_, err := LoadChart(dir)
			if !errors.Is(err, ErrChartRefused) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("LoadChart: %v, want ErrChartRefused saying %q", err, tc.want)
			}
			if !strings.Contains(err.Error(), "charts/sub-0.1.0.tgz") {
				t.Errorf("error %q does not name the archive", err)
			}
		})
	}
}

func TestLoadChartRefusesTooManyOrTooLargeFiles(t *testing.T) {
	dir := writeChart(t, map[string]string{"Chart.yaml": fmt.Sprintf(chartYAML, "big")})
	if err := os.WriteFile(filepath.Join(dir, "big.bin"), make([]byte, MaxChartFileSize+1), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadChart(dir); !errors.Is(err, ErrChartRefused) || !strings.Contains(err.Error(), "big.bin") {
		t.Errorf("LoadChart of a too large file: %v", err)
	}
	dir = writeChart(t, map[string]string{"Chart.yaml": fmt.Sprintf(chartYAML, "many")})
	for i := range MaxChartFiles {
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("f%d", i)), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := LoadChart(dir); !errors.Is(err, ErrChartRefused) || !strings.Contains(err.Error(), "more than 10000 files") {
		t.Errorf("LoadChart of too many files: %v", err)
	}
}

func TestLoadChartRefusesAMissingLockedDependency(t *testing.T) {
	dir := writeChart(t, map[string]string{
		"Chart.yaml": fmt.Sprintf(chartYAML, "app") +
			"dependencies:\n- name: postgresql\n  version: 16.0.0\n  repository: oci://registry-1.docker.io/bitnamicharts\n",
		"Chart.lock": "dependencies:\n- name: postgresql\n  version: 16.0.0\n  repository: oci://registry-1.docker.io/bitnamicharts\ndigest: sha256:0\ngenerated: \"2026-01-01T00:00:00Z\"\n",
	})
	_, err := LoadChart(dir)
	if !errors.Is(err, ErrChartRefused) || !strings.Contains(err.Error(), `"postgresql"`) || !strings.Contains(err.Error(), "charts/") {
		t.Fatalf("LoadChart: %v, want an error naming postgresql and charts/", err)
	}
}

func TestLookupGoesThroughOptionsLookupAndIsBounded(t *testing.T) {
	dir := writeChart(t, map[string]string{
		"Chart.yaml": fmt.Sprintf(chartYAML, "lookups"),
		"templates/cm.yaml": `{{- $s := lookup "v1" "Secret" .Release.Namespace "db" }}
{{- $all := lookup "v1" "ConfigMap" "" "" }}
{{- range until (int .Values.extra) }}{{ $_ := lookup "v1" "Pod" "x" "y" }}{{ end }}
apiVersion: v1
kind: ConfigMap
metadata:
  name: seen
data:
  user: {{ dig "data" "user" "none" $s | quote }}
  count: {{ len (dig "items" (list) $all) | quote }}
`,
	})
	c := mustLoad(t, dir)
	var calls []string
	fake := func(_ context.Context, apiVersion, kind, namespace, name string) (map[string]any, error) {
		calls = append(calls, strings.Join([]string{apiVersion, kind, namespace, name}, " "))
		if name == "" {
			return map[string]any{"items": []any{map[string]any{}, map[string]any{}}}, nil
		}
		return map[string]any{"data": map[string]any{"user": "alice"}}, nil
	}
	rel, err := render(t, c, Options{Namespace: "apps", Lookup: fake, Values: map[string]any{"extra": 0}})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"v1 Secret apps db", "v1 ConfigMap  "}
	if strings.Join(calls, "|") != strings.Join(want, "|") {
		t.Errorf("lookup calls %q, want %q", calls, want)
	}
	if u, _, _ := unstructuredString(rel.Objects[0].Object, "data", "user"); u != "alice" {
		t.Errorf("lookup result not used: %q", u)
	}
	if n, _, _ := unstructuredString(rel.Objects[0].Object, "data", "count"); n != "2" {
		t.Errorf("list lookup: %q items", n)
	}
	_, err = render(t, c, Options{Lookup: fake, MaxLookups: 5, Values: map[string]any{"extra": 4}})
	if !errors.Is(err, ErrRenderBound) || !strings.Contains(err.Error(), "more than 5 lookup calls") {
		t.Fatalf("Render with 6 lookups, MaxLookups 5: %v", err)
	}
	if _, err := render(t, c, Options{Values: map[string]any{"extra": 0}}); err != nil {
		t.Errorf("no Lookup (empty answers, as helm template): %v", err)
	}
}

func TestLookupErrorFailsTheRender(t *testing.T) {
	dir := writeChart(t, map[string]string{
		"Chart.yaml":        fmt.Sprintf(chartYAML, "lookups"),
		"templates/cm.yaml": `{{ $s := lookup "v1" "Secret" "ns" "db" }}`,
	})
	failing := func(context.Context, string, string, string, string) (map[string]any, error) {
		return nil, errors.New("forbidden: cannot get secrets")
	}
	_, err := render(t, mustLoad(t, dir), Options{Lookup: failing})
	if err == nil || !strings.Contains(err.Error(), "forbidden") {
		t.Fatalf("Render: %v, want the lookup's error", err)
	}
}

func TestHelmignoreIsHonouredAndConfined(t *testing.T) {
	dir := writeChart(t, map[string]string{
		"Chart.yaml":           fmt.Sprintf(chartYAML, "ignoring"),
		".helmignore":          "secret.txt\n",
		"secret.txt":           "not for templates",
		"templates/files.yaml": fmt.Sprintf(filesGetTemplate, "secret.txt"),
	})
	rel, err := render(t, mustLoad(t, dir), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if got, _, _ := unstructuredString(rel.Objects[0].Object, "data", "got"); got != "" {
		t.Errorf(".Files.Get of an ignored file = %q", got)
	}
	if err := os.Remove(filepath.Join(dir, ".helmignore")); err != nil {
		t.Fatal(err)
	}
	symlink(t, "/etc/passwd", filepath.Join(dir, ".helmignore"))
	if _, err := LoadChart(dir); !errors.Is(err, ErrChartRefused) || strings.Contains(err.Error(), "root:") {
		t.Errorf("LoadChart with .helmignore linked to /etc/passwd: %v", err)
	}
}

// TestOverdueRendersAreBounded: a loop calling no function runs on after Render returned at
// its deadline; while MaxOverdueRenders such goroutines run, Render refuses to start another.
// The loop here is finite (an empty body, no memory) so that the test ends.
func TestOverdueRendersAreBounded(t *testing.T) {
	if testing.Short() {
		t.Skip("burns CPU for seconds")
	}
	dir := writeChart(t, map[string]string{
		"Chart.yaml":          fmt.Sprintf(chartYAML, "overdue"),
		"templates/spin.yaml": `{{ range 20000 }}{{ range 1000 }}{{ end }}{{ end }}`,
		"templates/ok.yaml":   configMap("ok", "  a: b\n"),
	})
	c := mustLoad(t, dir)
	for range MaxOverdueRenders {
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		_, err := Render(ctx, c, Options{ReleaseName: "r"})
		cancel()
		if !errors.Is(err, ErrRenderBound) || !strings.Contains(err.Error(), "deadline") {
			t.Fatalf("Render: %v, want the deadline", err)
		}
	}
	_, err := render(t, c, Options{})
	if !errors.Is(err, ErrRenderBound) || !strings.Contains(err.Error(), "still running past their deadline") {
		t.Fatalf("Render with %d overdue: %v", OverdueRenders(), err)
	}
	deadline := time.Now().Add(2 * time.Minute)
	for OverdueRenders() > 0 {
		if time.Now().After(deadline) {
			t.Fatal("overdue renders never ended")
		}
		time.Sleep(50 * time.Millisecond)
	}
	ok := mustLoad(t, writeChart(t, map[string]string{
		"Chart.yaml": fmt.Sprintf(chartYAML, "fine"), "templates/ok.yaml": configMap("ok", "  a: b\n")}))
	if _, err := render(t, ok, Options{}); err != nil {
		t.Errorf("Render once the overdue ones ended: %v", err)
	}
}

func TestValuesSchemaIsCheckedWithoutFilesOrNetwork(t *testing.T) {
	schema := `{"$schema": "http://json-schema.org/draft-07/schema#", "type": "object",
  "properties": {"replicas": {"type": "integer", "minimum": 1}%s}}`
	cases := []struct {
		name, extra string
		values      map[string]any
		want        string
	}{
		{name: "valid", values: map[string]any{"replicas": 2}},
		{name: "violation", values: map[string]any{"replicas": 0}, want: "minimum"},
		{name: "ref to a local file", extra: `, "x": {"$ref": "file:///etc/passwd"}`, want: "not loaded"},
		{name: "ref over the network", extra: `, "x": {"$ref": "http://127.0.0.1:1/schema.json"}`, want: "not loaded"},
		{name: "urn ref, permissive as Helm", extra: `, "x": {"$ref": "urn:example:schema"}`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := writeChart(t, map[string]string{
				"Chart.yaml":         fmt.Sprintf(chartYAML, "schema"),
				"values.yaml":        "replicas: 1\n",
				"values.schema.json": fmt.Sprintf(schema, tc.extra),
				"templates/cm.yaml":  configMap("cm", "  replicas: {{ .Values.replicas | quote }}\n"),
			})
			_, err := render(t, mustLoad(t, dir), Options{Values: tc.values})
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "root:") {
				t.Fatalf("Render: %v, want an error saying %q", err, tc.want)
			}
		})
	}
}
