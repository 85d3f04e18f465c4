package render

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	. "github.com/onsi/gomega"
)

// billionLaughs is the classic exponential-entity document: ten aliases per level,
// nine levels, a billion strings once expanded.
func billionLaughs() string {
	var b strings.Builder
	b.WriteString("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: lol}\ndata:\n  a0: &a0 [\"lol\"]\n")
	for i := 1; i <= 9; i++ {
		fmt.Fprintf(&b, "  a%d: &a%d [", i, i)
		for j := 0; j < 10; j++ {
			if j > 0 {
				b.WriteString(",")
			}
			fmt.Fprintf(&b, "*a%d", i-1)
		}
		b.WriteString("]\n")
	}
	return b.String()
}

// deepYAML nests n flow sequences under data.
func deepYAML(n int) string {
	return "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: deep}\ndata:\n  x: " +
		strings.Repeat("[", n) + strings.Repeat("]", n) + "\n"
}

// TestHostileRepositories covers the repository-content cases of the hardening
// issue: each must fail with a clear *Error of the right class, return nothing,
// never read outside the root, and never hang.
func TestHostileRepositories(t *testing.T) {
	tests := []struct {
		name   string
		setup  func(t *testing.T, root, outside string)
		path   string
		limits Limits
		class  error
		want   string // substring of the error
		file   string // expected Error.File, when set
		doc    int    // expected Error.Document, when set
	}{
		// --- confinement, plain YAML ---
		{
			name:  "symlink x.yaml -> /etc/passwd (absolute)",
			setup: func(t *testing.T, root, _ string) { symlink(t, root, "x.yaml", "/etc/passwd") },
			class: ErrOutsideRoot, want: "symlink x.yaml -> /etc/passwd points to an absolute path", file: "x.yaml",
		},
		{
			name: "symlink x.yaml -> ../outside/passwd (relative)",
			setup: func(t *testing.T, root, _ string) {
				symlink(t, root, "app/x.yaml", "../../outside/passwd")
			},
			path:  "app",
			class: ErrOutsideRoot, want: "symlink app/x.yaml -> ../../outside/passwd", file: "app/x.yaml",
		},
		{
			name: "symlink to an absolute path inside the checkout is refused too",
			setup: func(t *testing.T, root, _ string) {
				write(t, root, "real.yaml", cm("real", "1"))
				symlink(t, root, "link.yaml", filepath.Join(root, "real.yaml"))
			},
			class: ErrOutsideRoot, want: "absolute path",
		},
		{
			name: "symlinked directory leading outside, through a chain of relative links",
			setup: func(t *testing.T, root, _ string) {
				symlink(t, root, "a/hop1", "../b/hop2")
				symlink(t, root, "b/hop2", "../..")
				write(t, root, "a/ok.yaml", cm("ok", "1"))
			},
			class: ErrOutsideRoot, want: "b/hop2 -> ../..",
		},
		{
			name: "symlink loop between two files",
			setup: func(t *testing.T, root, _ string) {
				symlink(t, root, "a.yaml", "b.yaml")
				symlink(t, root, "b.yaml", "a.yaml")
			},
			class: ErrSymlinkLoop, want: "too many levels of symbolic links",
		},
		{
			name: "symlinked directory pointing at its own parent",
			setup: func(t *testing.T, root, _ string) {
				write(t, root, "app/cm.yaml", cm("cm", "1"))
				symlink(t, root, "app/sub/again", "..")
			},
			path:  "app",
			class: ErrSymlinkLoop, want: "directory app/sub/again leads back to app",
		},
		{
			name:  "path ../outside",
			path:  "../outside",
			class: ErrOutsideRoot, want: "../outside", file: "../outside",
		},
		{
			name:  "path that is a symlink to a directory outside",
			setup: func(t *testing.T, root, outside string) { symlink(t, root, "deploy", outside) },
			path:  "deploy",
			class: ErrOutsideRoot, want: "absolute path",
		},
		{
			name:  "absolute path",
			path:  "/etc",
			class: ErrOutsideRoot, want: "/etc is an absolute path",
		},
		{
			name: "a FIFO named like a manifest (would block a naive reader)",
			setup: func(t *testing.T, root, _ string) {
				if err := syscall.Mkfifo(filepath.Join(root, "pipe.yaml"), 0o644); err != nil {
					t.Skip("mkfifo:", err)
				}
			},
			class: ErrInvalidDocument, want: "render pipe.yaml: invalid document: not a regular file",
		},
		// --- caps, plain YAML ---
		{
			name: "a 1 GiB file (sparse) is refused before it is read",
			setup: func(t *testing.T, root, _ string) {
				f, err := os.Create(filepath.Join(root, "huge.yaml"))
				if err != nil {
					t.Fatal(err)
				}
				defer func() { _ = f.Close() }()
				if err := f.Truncate(1 << 30); err != nil {
					t.Fatal(err)
				}
			},
			class: ErrLimitExceeded, want: "render huge.yaml: limit exceeded: 1073741824 bytes, more than the 8388608-byte file size limit",
		},
		{
			name:   "total bytes over the cap",
			setup:  func(t *testing.T, root, _ string) { manyFiles(t, root, 20) },
			limits: Limits{MaxTotalBytes: 1000},
			class:  ErrLimitExceeded, want: "more than 1000 bytes in total",
		},
		{
			name:   "file-count bomb",
			setup:  func(t *testing.T, root, _ string) { manyFiles(t, root, 300) },
			limits: Limits{MaxFiles: 200},
			class:  ErrLimitExceeded, want: "more than 200",
		},
		{
			name: "document-count bomb",
			setup: func(t *testing.T, root, _ string) {
				write(t, root, "many.yaml", strings.Repeat("---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n", 101))
			},
			limits: Limits{MaxDocuments: 100},
			class:  ErrLimitExceeded, want: "more than 100 documents",
		},
		{
			name:  "deeply nested YAML",
			setup: func(t *testing.T, root, _ string) { write(t, root, "deep.yaml", deepYAML(5000)) },
			class: ErrLimitExceeded, want: "nests deeper than 128 levels", file: "deep.yaml", doc: 1,
		},
		{
			name:  "YAML nested beyond the parser's own limit",
			setup: func(t *testing.T, root, _ string) { write(t, root, "deeper.yaml", deepYAML(20000)) },
			class: ErrInvalidDocument, want: "exceeded max depth", file: "deeper.yaml", doc: 1,
		},
		{
			name:  "billion laughs",
			setup: func(t *testing.T, root, _ string) { write(t, root, "lol.yaml", billionLaughs()) },
			class: ErrLimitExceeded, want: "YAML aliases expand to more than 10000 nodes", file: "lol.yaml", doc: 1,
		},
		// --- objects, plain YAML ---
		{
			name: "duplicate object IDs in two files",
			setup: func(t *testing.T, root, _ string) {
				write(t, root, "a.yaml", cm("same", "1"))
				write(t, root, "b.yaml", cm("other", "1")+"---\n"+cm("same", "2"))
			},
			class: ErrDuplicateObject, want: "ConfigMap target/same is also defined by a.yaml document 1", file: "b.yaml", doc: 2,
		},
		{
			name: "duplicate IDs across API versions of one kind",
			setup: func(t *testing.T, root, _ string) {
				write(t, root, "a.yaml", "apiVersion: autoscaling/v1\nkind: HorizontalPodAutoscaler\nmetadata: {name: h}\n---\n"+
					"apiVersion: autoscaling/v2\nkind: HorizontalPodAutoscaler\nmetadata: {name: h}\n")
			},
			class: ErrDuplicateObject, want: "HorizontalPodAutoscaler.autoscaling target/h",
		},
		{
			name: "duplicates created by targetNamespace",
			setup: func(t *testing.T, root, _ string) {
				write(t, root, "a.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c, namespace: one}\n---\n"+
					"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c, namespace: two}\n")
			},
			class: ErrDuplicateObject, want: "ConfigMap target/c",
		},
		{
			name:  "missing kind",
			setup: func(t *testing.T, root, _ string) { write(t, root, "a.yaml", "apiVersion: v1\nmetadata: {name: x}\n") },
			class: ErrInvalidObject, want: "missing kind", file: "a.yaml", doc: 1,
		},
		{
			name: "missing name",
			setup: func(t *testing.T, root, _ string) {
				write(t, root, "a.yaml", cm("ok", "1")+"---\napiVersion: v1\nkind: ConfigMap\nmetadata: {generateName: x-}\n")
			},
			class: ErrInvalidObject, want: "ConfigMap: missing metadata.name", file: "a.yaml", doc: 2,
		},
		{
			name: "a List item without a name",
			setup: func(t *testing.T, root, _ string) {
				write(t, root, "l.yaml", "apiVersion: v1\nkind: List\nitems:\n- "+strings.ReplaceAll(cm("ok", "1"), "\n", "\n  ")+
					"\n- {apiVersion: v1, kind: ConfigMap, metadata: {}}\n")
			},
			class: ErrInvalidObject, want: "render l.yaml: document 1: item 2 of the List: invalid object: ConfigMap: missing metadata.name",
		},
		{
			name:  "missing apiVersion",
			setup: func(t *testing.T, root, _ string) { write(t, root, "a.yaml", "kind: ConfigMap\nmetadata: {name: x}\n") },
			class: ErrInvalidObject, want: "missing apiVersion",
		},
		{
			name:  "a document that is not a mapping",
			setup: func(t *testing.T, root, _ string) { write(t, root, "a.yaml", "- just\n- a list\n") },
			class: ErrInvalidObject, want: "document is not a mapping",
		},
		{
			name: "labels that are not strings",
			setup: func(t *testing.T, root, _ string) {
				write(t, root, "a.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\n  labels: {n: 1}\n")
			},
			class: ErrInvalidObject, want: `metadata.labels["n"] is not a string`,
		},
		{
			name: "a name that would address another API path",
			setup: func(t *testing.T, root, _ string) {
				write(t, root, "a.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: ../../x}\n")
			},
			class: ErrInvalidObject, want: "invalid metadata.name",
		},
		{
			name: "unparseable document, named by file and index",
			setup: func(t *testing.T, root, _ string) {
				write(t, root, "dir/bad.yaml", cm("fine", "1")+"---\nkey: [unclosed\n")
			},
			class: ErrInvalidDocument, want: "render dir/bad.yaml: document 2:", file: "dir/bad.yaml", doc: 2,
		},
		{
			name: "a key defined twice",
			setup: func(t *testing.T, root, _ string) {
				write(t, root, "a.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\ndata: {k: a}\ndata: {k: b}\n")
			},
			class: ErrInvalidDocument, want: `key "data" is defined twice`,
		},
		{
			name: "a kustomization below a plain directory",
			setup: func(t *testing.T, root, _ string) {
				write(t, root, "apps/a/kustomization.yaml", "resources: []\n")
			},
			path:  "apps",
			class: ErrInvalidObject, want: "point the path at its directory",
		},
		// --- kustomize ---
		{
			name: "kustomization resources: [../../outside]",
			setup: func(t *testing.T, root, _ string) {
				write(t, root, "app/kustomization.yaml", "resources: [../../outside]\n")
			},
			path:  "app",
			class: ErrOutsideRoot, want: `resources: "../../outside" leaves the repository`, file: "app/kustomization.yaml",
		},
		{
			name:  "kustomization resources: [/etc/passwd]",
			setup: func(t *testing.T, root, _ string) { write(t, root, "kustomization.yaml", "resources: [/etc/passwd]\n") },
			class: ErrOutsideRoot, want: "is an absolute path",
		},
		{
			name: "kustomization resource that is a symlink to a directory outside",
			setup: func(t *testing.T, root, outside string) {
				symlink(t, root, "base", outside)
				write(t, root, "app/kustomization.yaml", "resources: [../base]\n")
			},
			path:  "app",
			class: ErrOutsideRoot, want: "points to an absolute path",
		},
		{
			name: "kustomization resource that is a relative symlink to a file outside",
			setup: func(t *testing.T, root, _ string) {
				symlink(t, root, "cm.yaml", "../outside/cm.yaml")
				write(t, root, "kustomization.yaml", "resources: [cm.yaml]\n")
			},
			class: ErrOutsideRoot, want: "symlink cm.yaml -> ../outside/cm.yaml",
		},
		{
			name: "configMapGenerator reading /etc/passwd",
			setup: func(t *testing.T, root, _ string) {
				write(t, root, "kustomization.yaml", "configMapGenerator:\n- name: x\n  files: [/etc/passwd]\n")
			},
			class: ErrOutsideRoot, want: `configMapGenerator: "/etc/passwd" is an absolute path`,
		},
		{
			name: "configMapGenerator reading ../outside/passwd",
			setup: func(t *testing.T, root, _ string) {
				write(t, root, "app/kustomization.yaml", "configMapGenerator:\n- name: x\n  files: [pw=../../outside/passwd]\n")
			},
			path:  "app",
			class: ErrOutsideRoot, want: `configMapGenerator: "../../outside/passwd" leaves the repository`, file: "app/kustomization.yaml",
		},
		{
			name: "patch file outside the repository",
			setup: func(t *testing.T, root, _ string) {
				write(t, root, "kustomization.yaml", "resources: [cm.yaml]\npatches: [{path: ../outside/cm.yaml}]\n")
				write(t, root, "cm.yaml", cm("outside", "1"))
			},
			class: ErrOutsideRoot, want: `patches: "../outside/cm.yaml" leaves the repository`,
		},
		{
			name: "configMapGenerator file that is a symlink to /etc/passwd (only the file system sees it)",
			setup: func(t *testing.T, root, _ string) {
				write(t, root, "kustomization.yaml", "configMapGenerator:\n- name: x\n  files: [pw]\n")
				symlink(t, root, "pw", "/etc/passwd")
			},
			class: ErrOutsideRoot, want: "symlink pw -> /etc/passwd points to an absolute path",
		},
		{
			name:  "kustomization including itself",
			setup: func(t *testing.T, root, _ string) { write(t, root, "app/kustomization.yaml", "resources: [.]\n") },
			path:  "app",
			class: ErrKustomize, want: "kustomization includes itself: app -> app",
		},
		{
			name: "two kustomizations including each other",
			setup: func(t *testing.T, root, _ string) {
				write(t, root, "a/kustomization.yaml", "resources: [../b]\n")
				write(t, root, "b/kustomization.yaml", "resources: [../a]\n")
			},
			path:  "a",
			class: ErrKustomize, want: "kustomization includes itself: a -> b -> a",
		},
		{
			name: "a kustomization including itself through a symlinked directory",
			setup: func(t *testing.T, root, _ string) {
				symlink(t, root, "app/self", ".")
				write(t, root, "app/kustomization.yaml", "resources: [self]\n")
			},
			path:  "app",
			class: ErrKustomize, want: "kustomization includes itself: app -> app",
		},
		{
			name: "symlink loop as a kustomization resource",
			setup: func(t *testing.T, root, _ string) {
				symlink(t, root, "loop.yaml", "loop.yaml")
				write(t, root, "kustomization.yaml", "resources: [loop.yaml]\n")
			},
			class: ErrSymlinkLoop,
		},
		{
			name:  "bases that expand exponentially (diamond bomb)",
			setup: func(t *testing.T, root, _ string) { diamondBomb(t, root, 16) },
			path:  "l0a",
			class: ErrLimitExceeded, want: "expands to more than 20000 resources",
		},
		{
			name: "generator plugin",
			setup: func(t *testing.T, root, _ string) {
				write(t, root, "kustomization.yaml", "generators: [gen.yaml]\n")
				write(t, root, "gen.yaml", "apiVersion: someteam.example.com/v1\nkind: SecretsFromVault\nmetadata: {name: x}\n")
			},
			class: ErrPluginDisabled, want: "someteam.example.com/v1/SecretsFromVault is an external plugin",
		},
		{
			name: "transformer plugin (inline)",
			setup: func(t *testing.T, root, _ string) {
				write(t, root, "kustomization.yaml", "transformers:\n- |\n  apiVersion: example.com/v1\n  kind: Rewrite\n  metadata: {name: x}\n")
			},
			class: ErrPluginDisabled, want: "example.com/v1/Rewrite is an external plugin",
		},
		{
			name: "container KRM function",
			setup: func(t *testing.T, root, _ string) {
				write(t, root, "kustomization.yaml", "transformers: [fn.yaml]\n")
				write(t, root, "fn.yaml", `apiVersion: example.com/v1
kind: Fn
metadata:
  name: fn
  annotations:
    config.kubernetes.io/function: |
      container:
        image: example.com/fn:latest
`)
			},
			class: ErrPluginDisabled, want: "KRM function",
		},
		{
			name: "helm chart",
			setup: func(t *testing.T, root, _ string) {
				write(t, root, "kustomization.yaml", "helmCharts:\n- name: x\n  repo: https://127.0.0.1:1/charts\n")
			},
			class: ErrPluginDisabled, want: "helm is not supported",
		},
		{
			name: "custom OpenAPI schema (process-wide in kustomize)",
			setup: func(t *testing.T, root, _ string) {
				write(t, root, "kustomization.yaml", "openapi: {path: schema.json}\nresources: [cm.yaml]\n")
				write(t, root, "schema.json", "{not json")
				write(t, root, "cm.yaml", cm("x", "1"))
			},
			class: ErrPluginDisabled, want: "openapi",
		},
		{
			name: "oversized resource file",
			setup: func(t *testing.T, root, _ string) {
				write(t, root, "kustomization.yaml", "resources: [big.yaml]\n")
				write(t, root, "big.yaml", cm("big", strings.Repeat("x", 4096)))
			},
			limits: Limits{MaxFileSize: 1024},
			class:  ErrLimitExceeded, want: "big.yaml",
		},
		{
			name: "billion laughs in a kustomize resource",
			setup: func(t *testing.T, root, _ string) {
				write(t, root, "kustomization.yaml", "resources: [lol.yaml]\n")
				write(t, root, "lol.yaml", billionLaughs())
			},
			class: ErrLimitExceeded, want: "YAML aliases expand",
		},
		{
			name: "billion laughs inside an inline patch",
			setup: func(t *testing.T, root, _ string) {
				patch := strings.ReplaceAll(billionLaughs(), "\n", "\n    ")
				write(t, root, "kustomization.yaml", "resources: [cm.yaml]\npatches:\n- patch: |\n    "+patch+"\n")
				write(t, root, "cm.yaml", cm("lol", "1"))
			},
			class: ErrLimitExceeded, want: "YAML aliases expand",
		},
		{
			name: "deeply nested YAML through kustomize",
			setup: func(t *testing.T, root, _ string) {
				write(t, root, "kustomization.yaml", "resources: [deep.yaml]\n")
				write(t, root, "deep.yaml", deepYAML(2000))
			},
			class: ErrLimitExceeded, want: "nests deeper than 128 levels",
		},
		// --- SOPS ---
		{
			name:  "a SOPS file whose sops metadata was removed",
			setup: func(t *testing.T, root, _ string) { write(t, root, "secret.yaml", stripSOPS(t, "secret.yaml", false)) },
			class: ErrCiphertext, want: "stringData.username (line 9) holds a SOPS-encrypted value", file: "secret.yaml",
		},
		{
			name: "a SOPS file whose mac was removed, through kustomize",
			setup: func(t *testing.T, root, _ string) {
				write(t, root, "kustomization.yaml", "resources: [secret.yaml]\n")
				write(t, root, "secret.yaml", stripSOPS(t, "secret.yaml", true))
			},
			class: ErrCiphertext, want: "stringData.username (line 9) holds a SOPS-encrypted value", file: "secret.yaml",
		},
		{
			name: "duplicate IDs through kustomize (kustomize refuses them itself)",
			setup: func(t *testing.T, root, _ string) {
				write(t, root, "kustomization.yaml", "resources: [a.yaml, b.yaml]\n")
				write(t, root, "a.yaml", cm("same", "1"))
				write(t, root, "b.yaml", cm("same", "2"))
			},
			class: ErrKustomize, want: "already registered id",
		},
		{
			name: "duplicate IDs across versions through kustomize (ours)",
			setup: func(t *testing.T, root, _ string) {
				write(t, root, "kustomization.yaml", "resources: [a.yaml]\n")
				write(t, root, "a.yaml", "apiVersion: autoscaling/v1\nkind: HorizontalPodAutoscaler\nmetadata: {name: h}\n---\n"+
					"apiVersion: autoscaling/v2\nkind: HorizontalPodAutoscaler\nmetadata: {name: h}\n")
			},
			class: ErrDuplicateObject, want: "object 2 of the kustomize output",
		},
		{
			name: "missing kind through kustomize",
			setup: func(t *testing.T, root, _ string) {
				write(t, root, "kustomization.yaml", "resources: [a.yaml]\n")
				write(t, root, "a.yaml", "apiVersion: v1\nmetadata: {name: x}\n")
			},
			class: ErrKustomize, want: "missing kind",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			root, outside := newRepo(t)
			if tt.setup != nil {
				tt.setup(t, root, outside)
			}
			var before runtime.MemStats
			runtime.ReadMemStats(&before)
			start := time.Now()
			res, err := render(Options{Root: root, Path: tt.path, Limits: tt.limits, TargetNamespace: "target"})
			elapsed := time.Since(start)
			var after runtime.MemStats
			runtime.ReadMemStats(&after)

			expectFailure(g, res, err, tt.class, tt.want)
			var re *Error
			g.Expect(errors.As(err, &re)).To(BeTrue())
			if tt.file != "" {
				g.Expect(re.File).To(Equal(tt.file))
			}
			if tt.doc != 0 {
				g.Expect(re.Document).To(Equal(tt.doc))
			}
			g.Expect(elapsed).To(BeNumerically("<", 5*time.Second), "fails fast")
			g.Expect(after.TotalAlloc-before.TotalAlloc).To(BeNumerically("<", 256<<20), "bounded memory")
			t.Logf("error: %v (%s, %d KiB allocated)", err, elapsed.Round(time.Millisecond), (after.TotalAlloc-before.TotalAlloc)>>10)
		})
	}
}

// manyFiles writes n small ConfigMaps, one per file.
func manyFiles(t *testing.T, root string, n int) {
	t.Helper()
	for i := 0; i < n; i++ {
		write(t, root, fmt.Sprintf("f/%04d.yaml", i), cm(fmt.Sprintf("c%d", i), "0123456789"))
	}
}

// diamondBomb makes levels l0..l(n-1) of two kustomizations each, both including
// both of the next level: 2^n references to the one ConfigMap at the bottom.
func diamondBomb(t *testing.T, root string, n int) {
	t.Helper()
	for i := 0; i < n; i++ {
		for _, s := range []string{"a", "b"} {
			dir := fmt.Sprintf("l%d%s", i, s)
			if i == n-1 {
				write(t, root, dir+"/kustomization.yaml", "resources: [cm.yaml]\nnamePrefix: "+s+"-\n")
				write(t, root, dir+"/cm.yaml", cm("c", "1"))
				continue
			}
			write(t, root, dir+"/kustomization.yaml",
				fmt.Sprintf("resources: [../l%da, ../l%db]\nnamePrefix: %s-\n", i+1, i+1, s))
		}
	}
}

// TestSecretDataNotEchoed: a Secret that fails to parse or validate must not have
// its data in the error, in either mode.
func TestSecretDataNotEchoed(t *testing.T) {
	const secret = "c3VwZXItc2VjcmV0LXBhc3N3b3Jk" // the value that must not leak
	tests := []struct {
		name  string
		files map[string]string
		class error
	}{
		{name: "unparseable Secret, plain", class: ErrInvalidDocument, files: map[string]string{
			"s.yaml": "apiVersion: v1\nkind: Secret\nmetadata: {name: s}\ndata:\n  password: " + secret + "\n  bad: [" + secret + "\n",
		}},
		{name: "Secret with a tab-indentation error, plain", class: ErrInvalidDocument, files: map[string]string{
			"s.yaml": "apiVersion: v1\nkind: Secret\nmetadata: {name: s}\ndata:\n\tpassword: " + secret + "\n",
		}},
		{name: "Secret without a name, plain", class: ErrInvalidObject, files: map[string]string{
			"s.yaml": "apiVersion: v1\nkind: Secret\nmetadata: {namespace: x}\ndata: {password: " + secret + "}\n",
		}},
		{name: "Secret with a duplicate key, plain", class: ErrInvalidDocument, files: map[string]string{
			"s.yaml": "apiVersion: v1\nkind: Secret\nmetadata: {name: s}\ndata: {password: " + secret + ", password: " + secret + "}\n",
		}},
		{name: "Secret with a non-finite number, plain", class: ErrInvalidDocument, files: map[string]string{
			"s.yaml": "apiVersion: v1\nkind: Secret\nmetadata: {name: s}\ndata: {password: " + secret + ", n: .inf}\n",
		}},
		{name: "unparseable Secret, kustomize", class: ErrKustomize, files: map[string]string{
			"kustomization.yaml": "resources: [s.yaml]\n",
			"s.yaml":             "apiVersion: v1\nkind: Secret\nmetadata: {name: s}\ndata:\n  password: " + secret + "\n  bad: [" + secret + "\n",
		}},
		{name: "secretGenerator env file line that is not UTF-8 (kustomize would print it)", class: ErrInvalidDocument, files: map[string]string{
			"kustomization.yaml": "secretGenerator:\n- name: s\n  envs: [s.env]\n",
			"s.env":              "OK=1\nPASSWORD=" + secret + "\xff\n",
		}},
		{name: "secretGenerator env file line with an invalid name (kustomize would print it)", class: ErrInvalidDocument, files: map[string]string{
			"kustomization.yaml": "secretGenerator:\n- name: s\n  envs: [s.env]\n",
			"s.env":              secret + " oops\n",
		}},
		{name: "secretGenerator literal without = (kustomize would print every literal)", class: ErrInvalidDocument, files: map[string]string{
			"kustomization.yaml": "secretGenerator:\n- name: s\n  literals: [user=" + secret + ", " + secret + "]\n",
		}},
		{name: "a kustomize error quoting a Secret's data is redacted", class: ErrKustomize, files: map[string]string{
			"kustomization.yaml": `resources: [s.yaml]
replacements:
- source: {kind: Secret, fieldPath: data.password}
  targets:
  - select: {kind: Secret}
    fieldPaths: [data.password.x]
`,
			"s.yaml": "apiVersion: v1\nkind: Secret\nmetadata: {name: s}\ndata:\n  password: " + secret + "\n",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			root, _ := newRepo(t)
			for p, c := range tt.files {
				write(t, root, p, c)
			}
			res, err := render(Options{Root: root})
			expectFailure(g, res, err, tt.class, "")
			g.Expect(err.Error()).NotTo(ContainSubstring(secret))
			g.Expect(err.Error()).NotTo(ContainSubstring(secret[:12]))
			t.Logf("error: %v", err)
		})
	}
}
