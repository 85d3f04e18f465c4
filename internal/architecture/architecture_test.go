package architecture

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/converge-gitops/converge"

// anyMayImport is the package every package may import without saying so.
const anyMayImport = "api/v1alpha1"

// TestPackageTableMatchesImports reads the package tables of docs/architecture.md and
// the imports of every package of the module (go list, test files aside), and fails on a
// package without a row, a row naming no package, an import the table does not list, and
// a listed import the code no longer makes.
func TestPackageTableMatchesImports(t *testing.T) {
	root := moduleRoot(t)
	doc, err := os.ReadFile(filepath.Join(root, "docs", "architecture.md"))
	if err != nil {
		t.Fatal(err)
	}
	declared, err := packageTable(doc)
	if err != nil {
		t.Fatal(err)
	}
	imports := moduleImports(t, root)
	for _, p := range slices.Sorted(maps.Keys(imports)) {
		deps, ok := declared[p]
		if !ok {
			t.Errorf("%s has no row in docs/architecture.md", p)
			continue
		}
		for _, d := range imports[p] {
			if d != anyMayImport && !deps[d] {
				t.Errorf("%s imports %s: docs/architecture.md does not list it", p, d)
			}
		}
		for _, d := range slices.Sorted(maps.Keys(deps)) {
			if !slices.Contains(imports[p], d) {
				t.Errorf("docs/architecture.md says %s depends on %s: it imports it no more", p, d)
			}
		}
	}
	for _, p := range slices.Sorted(maps.Keys(declared)) {
		if _, ok := imports[p]; !ok {
			t.Errorf("docs/architecture.md has a row for %s, which is not a package of the module", p)
		}
	}
}

// TestPackageTableParses: the parser reads what the tables say, and refuses what it
// cannot read, so that the check above cannot pass on a table it misread.
func TestPackageTableParses(t *testing.T) {
	doc := "# x\n\n| package | what it holds | depends on |\n|---|---|---|\n" +
		"| `a` | it | — |\n| `b/c` | it, with a \\| pipe | a, `d` |\n\nprose\n\n" +
		"| package | what it holds | depends on |\n|---|---|---|\n| `d` | it | b/c |\n"
	got, err := packageTable([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]map[string]bool{"a": {}, "b/c": {"a": true, "d": true}, "d": {"b/c": true}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for _, bad := range []string{
		"| package | what it holds | depends on |\n|---|---|---|\n| `a` | two columns |\n",
		"| package | what it holds | depends on |\n|---|---|---|\n| `a` | it | — |\n| `a` | again | — |\n",
		"| package | what it holds | depends on |\n|---|---|---|\n| `a` | it | everything above |\n",
		"no table at all\n",
	} {
		if _, err := packageTable([]byte(bad)); err == nil {
			t.Errorf("%q: want an error", bad)
		}
	}
}

// packageTable reads every table whose header is "package | what it holds | depends
// on": package → the packages it may import. A dependency is a package path, with or
// without backticks; "—" is none.
func packageTable(doc []byte) (map[string]map[string]bool, error) {
	out := map[string]map[string]bool{}
	in := false
	sc := bufio.NewScanner(bytes.NewReader(doc))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if !strings.HasPrefix(line, "|") {
			in = false
			continue
		}
		cells := splitRow(line)
		switch {
		case len(cells) == 3 && cells[0] == "package" && cells[2] == "depends on":
			in = true
			continue
		case !in || strings.HasPrefix(cells[0], "---"):
			continue
		case len(cells) != 3:
			return nil, fmt.Errorf("row %q: want 3 columns, got %d", line, len(cells))
		}
		pkg := strings.Trim(cells[0], "`")
		if _, dup := out[pkg]; dup {
			return nil, fmt.Errorf("%s has two rows", pkg)
		}
		deps := map[string]bool{}
		if cells[2] != "—" {
			for _, d := range strings.Split(cells[2], ",") {
				d = strings.Trim(strings.TrimSpace(d), "`")
				if d == "" || strings.Contains(d, " ") {
					return nil, fmt.Errorf("%s: %q is not a package path", pkg, d)
				}
				deps[d] = true
			}
		}
		out[pkg] = deps
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no package table found")
	}
	return out, sc.Err()
}

// splitRow splits a markdown table row into its trimmed cells; "\|" is a pipe inside a
// cell.
func splitRow(line string) []string {
	line = strings.TrimSuffix(strings.TrimPrefix(line, "|"), "|")
	line = strings.ReplaceAll(line, `\|`, "\x00")
	var cells []string
	for _, c := range strings.Split(line, "|") {
		cells = append(cells, strings.TrimSpace(strings.ReplaceAll(c, "\x00", "|")))
	}
	return cells
}

// moduleImports lists every package of the module (relative to it) with the packages of
// the module its non-test files import.
func moduleImports(t *testing.T, root string) map[string][]string {
	t.Helper()
	cmd := exec.Command("go", "list", "-json=ImportPath,Imports", "./...")
	cmd.Dir = root
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	raw, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.String())
	}
	out := map[string][]string{}
	dec := json.NewDecoder(bytes.NewReader(raw))
	for {
		var p struct {
			ImportPath string
			Imports    []string
		}
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		rel := strings.TrimPrefix(p.ImportPath, module+"/")
		if rel == "internal/architecture" {
			continue // this test
		}
		deps := []string{}
		for _, i := range p.Imports {
			if d, ok := strings.CutPrefix(i, module+"/"); ok {
				deps = append(deps, d)
			}
		}
		out[rel] = deps
	}
	return out
}

// moduleRoot is the directory of go.mod above this package.
func moduleRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(dir, "..", "..")
}
