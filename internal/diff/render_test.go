package diff

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/converge-gitops/converge/internal/testcharts"
	"github.com/converge-gitops/converge/sync/render"
)

// writeTree writes files (slash path → content) under dir.
func writeTree(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for p, content := range files {
		full := filepath.Join(dir, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

const baseFiles = `apiVersion: v1
kind: ConfigMap
metadata: {name: settings}
data: {mode: base}
`

func TestLocalRoot(t *testing.T) {
	repo := t.TempDir()
	writeTree(t, repo, map[string]string{
		".git/HEAD":                        "ref: refs/heads/main\n",
		"base/cm.yaml":                     baseFiles,
		"base/kustomization.yaml":          "resources: [cm.yaml]\n",
		"overlays/prod/kustomization.yaml": "resources: [../../base]\nnamePrefix: prod-\n",
	})
	outside := t.TempDir()
	writeTree(t, outside, map[string]string{"app/cm.yaml": baseFiles})

	tests := []struct {
		name     string
		path     string
		wantRoot string
		wantRel  string
		wantErr  bool
	}{
		{name: "directory in a work tree", path: filepath.Join(repo, "overlays", "prod"), wantRoot: repo, wantRel: "overlays/prod"},
		{name: "the work tree itself", path: repo, wantRoot: repo, wantRel: "."},
		{name: "a file", path: filepath.Join(repo, "base", "cm.yaml"), wantRoot: repo, wantRel: "base/cm.yaml"},
		{name: "no work tree", path: filepath.Join(outside, "app"), wantRoot: filepath.Join(outside, "app"), wantRel: "."},
		{name: "missing", path: filepath.Join(repo, "nope"), wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			root, rel, err := LocalRoot(tt.path)
			if tt.wantErr {
				g.Expect(err).To(MatchError(ContainSubstring("does not exist")))
				return
			}
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(root).To(Equal(tt.wantRoot))
			g.Expect(rel).To(Equal(tt.wantRel))
		})
	}
}

func TestRenderAsTheDaemon(t *testing.T) {
	g := NewWithT(t)
	repo := t.TempDir()
	writeTree(t, repo, map[string]string{
		".git/HEAD":                        "ref: refs/heads/main\n",
		"base/cm.yaml":                     baseFiles,
		"base/kustomization.yaml":          "resources: [cm.yaml]\n",
		"overlays/prod/kustomization.yaml": "resources: [../../base, ns.yaml]\nnamePrefix: prod-\n",
		"overlays/prod/ns.yaml":            "apiVersion: v1\nkind: Namespace\nmetadata: {name: shop}\n",
	})
	root, rel, err := LocalRoot(filepath.Join(repo, "overlays", "prod"))
	g.Expect(err).NotTo(HaveOccurred())
	objs, err := Render(context.Background(), nil, RenderOptions{
		Root: root, Path: rel, TargetNamespace: "shop", OwnerName: "web", OwnerNamespace: "team-a",
	})
	g.Expect(err).NotTo(HaveOccurred())

	var b bytes.Buffer
	g.Expect(WriteManifests(&b, objs)).To(Succeed())
	g.Expect(b.String()).To(Equal(`apiVersion: v1
kind: Namespace
metadata:
  labels:
    converge.dev/name: web
    converge.dev/namespace: team-a
  name: shop
---
apiVersion: v1
data:
  mode: base
kind: ConfigMap
metadata:
  labels:
    converge.dev/name: web
    converge.dev/namespace: team-a
  name: prod-settings
  namespace: shop
`))
}

func TestRenderIsConfinedToTheWorkTree(t *testing.T) {
	g := NewWithT(t)
	parent := t.TempDir()
	writeTree(t, parent, map[string]string{
		"base/cm.yaml":                baseFiles,
		"base/kustomization.yaml":     "resources: [cm.yaml]\n",
		"repo/.git/HEAD":              "ref: refs/heads/main\n",
		"repo/app/kustomization.yaml": "resources: [../../base]\n",
	})
	root, rel, err := LocalRoot(filepath.Join(parent, "repo", "app"))
	g.Expect(err).NotTo(HaveOccurred())
	_, err = Render(context.Background(), nil, RenderOptions{Root: root, Path: rel})
	var rerr *render.Error
	g.Expect(errors.As(err, &rerr)).To(BeTrue(), "got %v", err)
	g.Expect(err).To(MatchError(render.ErrOutsideRoot))
}

// TestRenderOfAHostileChartEndsInItsWorker: converge diff and build render a pull
// request's chart, as hostile as the daemon's, through the same boundary: a recursion that
// would abort a process and a loop that never ends each fail with a clear error, and the
// process that asked goes on.
func TestRenderOfAHostileChartEndsInItsWorker(t *testing.T) {
	if testing.Short() {
		t.Skip("starts render workers that run to their bounds")
	}
	for name, c := range map[string]struct {
		files map[string]string
		want  string
	}{
		// Whichever bound it meets first: the stack's, the memory's or the deadline.
		"tpl recursion": {testcharts.TplRecursion("tpl"), "^render (recursed past its stack bound|used more than 512 MiB of memory|exceeded 3s$)"},
		"endless loop":  {testcharts.NestedRange("spin"), "^render exceeded 3s$"},
	} {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			root := t.TempDir()
			writeTree(t, filepath.Join(root, "chart"), c.files)
			_, err := Render(context.Background(), nil, RenderOptions{Root: root, Path: "chart", Timeout: 3 * time.Second,
				Helm: &render.HelmOptions{ReleaseName: "pr", Namespace: "default"}})
			g.Expect(err).To(HaveOccurred())
			g.Expect(err.Error()).To(MatchRegexp(c.want))
		})
	}
}
