package tarpath

import (
	"strings"
	"testing"
)

func TestClean(t *testing.T) {
	for _, tc := range []struct{ raw, want, refused string }{
		{raw: "chart/Chart.yaml", want: "chart/Chart.yaml"},
		{raw: "chart/./templates/a.yaml", want: "chart/templates/a.yaml"},
		{raw: "chart//etc/passwd", refused: "absolute or non-portable"},
		{raw: "chart/", want: "chart"},
		{raw: "", refused: "absolute or non-portable"},
		{raw: "/etc/passwd", refused: "absolute or non-portable"},
		{raw: `chart\..\..\etc`, refused: "absolute or non-portable"},
		{raw: "C:/Windows/x", refused: "absolute or non-portable"},
		{raw: "c:x", refused: "absolute or non-portable"},
		{raw: "chart/a\x00b", refused: "NUL"},
		{raw: "chart/../../etc/passwd", refused: "leaves the archive's directory"},
		{raw: "..", refused: "leaves the archive's directory"},
		{raw: "chart/..", refused: "leaves the archive's directory"},
		{raw: "chart/..x", want: "chart/..x"},
	} {
		got, err := Clean(tc.raw)
		switch {
		case tc.refused != "" && (err == nil || !strings.Contains(err.Error(), tc.refused)):
			t.Errorf("Clean(%q) = %q, %v; want refused: %s", tc.raw, got, err, tc.refused)
		case tc.refused == "" && (err != nil || got != tc.want):
			t.Errorf("Clean(%q) = %q, %v; want %q", tc.raw, got, err, tc.want)
		}
	}
}

func FuzzClean(f *testing.F) {
	for _, s := range []string{"chart/Chart.yaml", "../x", "/x", `a\b`, "a/./b/../c"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		got, err := Clean(raw)
		if err != nil {
			return
		}
		if got == ".." || strings.HasPrefix(got, "../") || strings.HasPrefix(got, "/") || strings.Contains(got, `\`) {
			t.Fatalf("Clean(%q) = %q: leaves the directory", raw, got)
		}
	})
}
