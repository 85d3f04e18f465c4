package render

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
)

// FuzzRender builds a small file tree — files, directories and symlinks, some
// pointing outside the root, some looping, some naming a loopback URL — from the
// fuzz input, renders it in both modes, and checks that Render never panics,
// always fails with a *Error, never returns or quotes anything read from outside
// the root, and never sends a request.
//
//	go test ./sync/render -run '^$' -fuzz FuzzRender -fuzztime 20s
func FuzzRender(f *testing.F) {
	var requests atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		requests.Add(1)
		_, _ = w.Write([]byte(cm("fetched", outsideMarker)))
	}))
	f.Cleanup(srv.Close)

	// Seeds: op byte, then operands (see applyOps).
	f.Add([]byte{0, 0, 0, 1, 1, 0})                             // a.yaml = cm; b.yml -> /etc/passwd
	f.Add([]byte{0, 3, 3, 1, 0, 2})                             // kustomization resources: [../outside]
	f.Add([]byte{2, 4, 0, 7, 0, 1, 10, 6, 0, 0, 1})             // d/kustomization resources: [.]; link -> .
	f.Add([]byte{0, 3, 9, 1, 9, 4})                             // cmg file through link -> outside abs
	f.Add([]byte{1, 14, 15, 1, 15, 14, 0, 0, 12})               // loop <-> loop2, billion laughs
	f.Add([]byte{3, 0, 'a', 'p', 'i', ':', ' ', '&', 'x', '['}) // raw bytes
	f.Add([]byte{2, 5, 1, 12, 7, 0, 3, 4, 0, 7, 1})             // e/g.yaml -> ../d, d/k: resources [d]
	f.Add([]byte{0, 3, 20, 0, 4, 18, 0, 6, 19})                 // generators: [d]; d patches its ConfigMapGenerator to files: [@url]
	f.Add([]byte{0, 3, 22, 0, 0, 21, 0, 2, 0})                  // transformers: [a.yaml], a PatchTransformer with PATH: @url
	f.Add([]byte{0, 3, 23, 0, 4, 24, 0, 6, 25, 0, 0, 0})        // transformers: [d]; d patches a PatchTransformer's path to @url

	f.Fuzz(func(t *testing.T, data []byte) {
		tmp := t.TempDir()
		root := filepath.Join(tmp, "repo")
		outside := filepath.Join(tmp, "outside")
		mustMkdir(t, root)
		mustMkdir(t, outside)
		mustWrite(t, filepath.Join(outside, "cm.yaml"), cm("outside", outsideMarker))
		mustWrite(t, filepath.Join(outside, "kustomization.yaml"), "resources: [cm.yaml]\n")
		applyOps(t, root, outside, srv.URL, data)

		for _, p := range []string{".", "d"} {
			res, err := render(Options{Root: root, Path: p, TargetNamespace: "ns", OwnerName: "o", OwnerNamespace: "n",
				Limits: Limits{MaxFiles: 200, MaxDocuments: 200, MaxTotalBytes: 1 << 20}})
			if err != nil {
				var re *Error
				if !errors.As(err, &re) {
					t.Fatalf("error %T is not a *render.Error: %v", err, err)
				}
				if res != nil {
					t.Fatalf("result returned with error %v", err)
				}
				if strings.Contains(err.Error(), outsideMarker) {
					t.Fatalf("error quotes a file outside the root: %v", err)
				}
				if n := requests.Load(); n > 0 {
					t.Fatalf("the render sent %d requests (%v)", n, err)
				}
				continue
			}
			if n := requests.Load(); n > 0 {
				t.Fatalf("the render sent %d requests", n)
			}
			for _, o := range res.Objects {
				b, err := o.MarshalJSON()
				if err != nil {
					t.Fatalf("object does not marshal: %v", err)
				}
				if strings.Contains(string(b), outsideMarker) {
					t.Fatalf("object read from outside the root: %s", b)
				}
				if o.GetLabels()["converge.dev/name"] != "o" {
					t.Fatalf("owner label missing on %s", b)
				}
			}
		}
	})
}

var (
	fuzzNames = []string{
		"a.yaml", "b.yml", "c.json", "kustomization.yaml", "d/kustomization.yaml", "e/g.yaml",
		"d/f.yaml", "d", "e", "link", "d/link", ".hidden/x.yaml", "Kustomization", "d/sub/h.yaml",
		"loop", "loop2",
	}
	fuzzTargets = []string{
		"/etc/passwd", "../outside", "../outside/cm.yaml", "../../outside/cm.yaml", "@outside", "@outside/cm.yaml",
		".", "..", "a.yaml", "d", "link", "d/link", "../d", "../repo/a.yaml", "loop", "loop2", "d/../../outside",
	}
	fuzzContents = []string{
		cm("inside", "1"),
		deploy("web"),
		"---\n" + cm("two", "2") + "---\n" + cm("three", "3"),
		"resources: [../outside]\n",
		"resources: [d]\n",
		"resources: [../../outside]\n",
		"resources: [.]\n",
		"resources: [link]\nnamePrefix: p-\n",
		"resources: [a.yaml, d/f.yaml]\n",
		"configMapGenerator: [{name: x, files: [link]}]\n",
		"resources: [http://127.0.0.1:1/x.yaml]\n",
		"patches: [{path: link}]\nresources: [a.yaml]\n",
		billionLaughs(),
		"a: &a [*a]\n",
		"{",
		`{"apiVersion":"v1","kind":"List","items":[` + `{"apiVersion":"v1","kind":"Secret","metadata":{"name":"s"}}]}`,
		"generators: [link]\n",
		"resources: [../e]\n",
		// 18-25: plugin configs and generators/transformers directories naming @url,
		// the loopback tripwire.
		"resources: [f.yaml]\npatches:\n- patch: |\n    apiVersion: builtin\n    kind: ConfigMapGenerator\n    metadata: {name: g}\n    files: [loot=@url/x]\n",
		"apiVersion: builtin\nkind: ConfigMapGenerator\nmetadata: {name: g}\nliterals: [a=b]\n",
		"generators: [d]\n",
		"apiVersion: builtin\nkind: PatchTransformer\nmetadata: {name: p}\nPATH: @url/p.yaml\n",
		"transformers: [a.yaml]\nresources: [c.json]\n",
		"resources: [a.yaml]\ntransformers: [d]\n",
		"resources: [f.yaml]\npatches:\n- patch: |\n    apiVersion: builtin\n    kind: PatchTransformer\n    metadata: {name: p}\n    patch: null\n    path: @url/p.yaml\n",
		"apiVersion: builtin\nkind: PatchTransformer\nmetadata: {name: p}\npatch: '{}'\ntarget: {kind: ConfigMap}\n",
	}
)

// applyOps interprets data as a list of operations:
//
//	0 name content   write fuzzContents[content] to fuzzNames[name] (@url: the tripwire)
//	1 name target    symlink fuzzNames[name] -> fuzzTargets[target]
//	2 name           mkdir fuzzNames[name]
//	3 name n bytes…  write the next n (≤ 64) raw bytes to fuzzNames[name]
//
// Operations that fail (existing names, files in place of directories) are skipped.
func applyOps(t *testing.T, root, outside, url string, data []byte) {
	for ops := 0; len(data) > 0 && ops < 24; ops++ {
		op := data[0] % 4
		data = data[1:]
		arg := func() int {
			if len(data) == 0 {
				return 0
			}
			v := int(data[0])
			data = data[1:]
			return v
		}
		name := filepath.Join(root, fuzzNames[arg()%len(fuzzNames)])
		_ = os.MkdirAll(filepath.Dir(name), 0o755)
		switch op {
		case 0:
			_ = os.WriteFile(name, []byte(strings.ReplaceAll(fuzzContents[arg()%len(fuzzContents)], "@url", url)), 0o644)
		case 1:
			target := fuzzTargets[arg()%len(fuzzTargets)]
			target = strings.Replace(target, "@outside", outside, 1)
			_ = os.Symlink(target, name)
		case 2:
			_ = os.MkdirAll(name, 0o755)
		case 3:
			n := min(arg()%65, len(data))
			_ = os.WriteFile(name, data[:n], 0o644)
			data = data[n:]
		}
	}
}

func mustMkdir(t *testing.T, p string) {
	t.Helper()
	if err := os.MkdirAll(p, 0o755); err != nil {
		t.Fatal(err)
	}
}

func mustWrite(t *testing.T, p, content string) {
	t.Helper()
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}
