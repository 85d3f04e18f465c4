package render

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	. "github.com/onsi/gomega"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/api/types"
	"sigs.k8s.io/kustomize/kyaml/filesys"
)

// tripwires detect network and exec: a loopback HTTP server that counts requests
// (and serves a valid manifest, so a fetch would make the build succeed), and a fake
// `git` first on PATH that leaves a marker file when run.
type tripwires struct {
	url      string // http://127.0.0.1:port
	hostPort string
	requests *atomic.Int64
	marker   string
}

func newTripwires(t *testing.T) *tripwires {
	t.Helper()
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		n.Add(1)
		_, _ = w.Write([]byte(cm("fetched-remotely", "remote")))
	}))
	t.Cleanup(srv.Close)
	bin := t.TempDir()
	marker := filepath.Join(t.TempDir(), "executed")
	script := "#!/bin/sh\necho \"$0 $*\" >> " + marker + "\nexit 1\n"
	for _, name := range []string{"git", "helm", "kustomize"} {
		if err := os.WriteFile(filepath.Join(bin, name), []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("PATH", bin+string(os.PathListSeparator)+os.Getenv("PATH"))
	return &tripwires{url: srv.URL, hostPort: strings.TrimPrefix(srv.URL, "http://"), requests: &n, marker: marker}
}

func (tw *tripwires) expectUntouched(g Gomega) {
	g.Expect(tw.requests.Load()).To(BeZero(), "no HTTP request reached the loopback server")
	_, err := os.Stat(tw.marker)
	g.Expect(os.IsNotExist(err)).To(BeTrue(), "no git/helm was executed")
}

// TestNoRemoteAccess: every way a kustomization can name a URL is refused before
// kustomize runs, so no request is sent and no git is executed.
func TestNoRemoteAccess(t *testing.T) {
	tw := newTripwires(t)
	u, hp := tw.url, tw.hostPort
	tests := []struct {
		name  string
		files map[string]string
		want  string
	}{
		{name: "http resource file", want: `resources: "` + u + `/cm.yaml"`, files: map[string]string{
			"kustomization.yaml": "resources: [" + u + "/cm.yaml]\n"}},
		{name: "https resource file", files: map[string]string{
			"kustomization.yaml": "resources: [https://" + hp + "/cm.yaml]\n"}},
		{name: "git base over http with a ref", files: map[string]string{
			"kustomization.yaml": "resources:\n- " + u + "/org/repo//base?ref=main\n"}},
		{name: "git:: forced protocol", files: map[string]string{
			"kustomization.yaml": "resources: [git::" + u + "/org/repo.git]\n"}},
		{name: "ssh URL", files: map[string]string{
			"kustomization.yaml": "resources: [ssh://git@" + hp + "/org/repo]\n"}},
		{name: "scp-style URL", files: map[string]string{
			"kustomization.yaml": "resources: [git@127.0.0.1:org/repo.git]\n"}},
		{name: "github shorthand (git is the fake on PATH)", files: map[string]string{
			"kustomization.yaml": "resources:\n- github.com/org/repo//deploy?ref=v1\n"}},
		{name: "file:// git URL", files: map[string]string{
			"kustomization.yaml": "resources: [file:///etc]\n"}},
		{name: "upper-case scheme", files: map[string]string{
			"kustomization.yaml": "resources: [HTTP://" + hp + "/cm.yaml]\n"}},
		{name: "deprecated bases field", files: map[string]string{
			"kustomization.yaml": "bases: [" + u + "/org/repo]\n"}},
		{name: "remote base inside a local base", want: "render base/kustomization.yaml", files: map[string]string{
			"kustomization.yaml":      "resources: [base]\n",
			"base/kustomization.yaml": "resources: [" + u + "/cm.yaml]\n"}},
		{name: "component", files: map[string]string{
			"kustomization.yaml": "components: [" + u + "/org/repo//comp]\n"}},
		{name: "configMapGenerator file", want: "configMapGenerator", files: map[string]string{
			"kustomization.yaml": "configMapGenerator:\n- name: x\n  files: [k=" + u + "/f]\n"}},
		{name: "secretGenerator env file", want: "secretGenerator", files: map[string]string{
			"kustomization.yaml": "secretGenerator:\n- name: x\n  envs: [" + u + "/env]\n"}},
		{name: "patch path", want: "patches", files: map[string]string{
			"kustomization.yaml": "resources: [cm.yaml]\npatches: [{path: " + u + "/p.yaml}]\n", "cm.yaml": cm("c", "1")}},
		{name: "patchesStrategicMerge path", want: "patchesStrategicMerge", files: map[string]string{
			"kustomization.yaml": "resources: [cm.yaml]\npatchesStrategicMerge: [" + u + "/p.yaml]\n", "cm.yaml": cm("c", "1")}},
		{name: "patchesJson6902 path", want: "patches", files: map[string]string{
			"kustomization.yaml": "resources: [cm.yaml]\npatchesJson6902: [{target: {version: v1, kind: ConfigMap, name: c}, path: " + u + "/p.json}]\n", "cm.yaml": cm("c", "1")}},
		{name: "crds", want: "crds", files: map[string]string{
			"kustomization.yaml": "crds: [" + u + "/crd.json]\n"}},
		{name: "configurations", want: "configurations", files: map[string]string{
			"kustomization.yaml": "configurations: [" + u + "/conf.yaml]\n"}},
		{name: "replacements path", want: "replacements", files: map[string]string{
			"kustomization.yaml": "replacements: [{path: " + u + "/r.yaml}]\n"}},
		{name: "generator config by URL", want: "generators", files: map[string]string{
			"kustomization.yaml": "generators: [" + u + "/gen.yaml]\n"}},
		{name: "built-in PatchTransformer config loading a URL", want: "PatchTransformer path", files: map[string]string{
			"kustomization.yaml": "resources: [cm.yaml]\ntransformers: [t.yaml]\n", "cm.yaml": cm("c", "1"),
			"t.yaml": "apiVersion: builtin\nkind: PatchTransformer\nmetadata: {name: p}\npath: " + u + "/p.yaml\n"}},
		{name: "built-in ConfigMapGenerator config (inline) loading a URL", want: "ConfigMapGenerator files", files: map[string]string{
			"kustomization.yaml": "generators:\n- |\n  apiVersion: builtin\n  kind: ConfigMapGenerator\n  metadata: {name: g}\n  files: [" + u + "/f]\n"}},
		{name: "built-in ReplacementTransformer in a transformer directory", want: "ReplacementTransformer path", files: map[string]string{
			"kustomization.yaml": "resources: [cm.yaml]\ntransformers: [tdir]\n", "cm.yaml": cm("c", "1"),
			"tdir/kustomization.yaml": "resources: [r.yaml]\n",
			"tdir/r.yaml":             "apiVersion: builtin\nkind: ReplacementTransformer\nmetadata: {name: r}\nreplacements: [{path: " + u + "/r.yaml}]\n"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			root, _ := newRepo(t)
			for p, c := range tt.files {
				write(t, root, p, c)
			}
			res, err := render(Options{Root: root})
			expectFailure(g, res, err, ErrRemoteDisabled, tt.want)
			tw.expectUntouched(g)
			t.Logf("error: %v", err)
		})
	}
}

// TestTripwiresWork runs kustomize directly on the confined file system, without
// the preflight, to show the tripwires of TestNoRemoteAccess do catch a fetch and a
// git exec — so their silence there means something.
func TestTripwiresWork(t *testing.T) {
	tw := newTripwires(t)
	tests := []struct {
		name     string
		resource string
		fetched  bool // else: git executed
	}{
		{name: "http resource is fetched", resource: tw.url + "/cm.yaml", fetched: true},
		{name: "git URL execs git", resource: "git@127.0.0.1:org/repo.git"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			root, _ := newRepo(t)
			write(t, root, "kustomization.yaml", "resources: ["+tt.resource+"]\n")
			cfs, done := openConfined(t, root)
			defer done()
			before := tw.requests.Load()
			_, _ = krusty.MakeKustomizer(kustomizeOptions()).Run(cfs, mountPoint)
			if tt.fetched {
				g.Expect(tw.requests.Load()).To(Equal(before + 1))
			} else {
				g.Expect(tw.marker).To(BeAnExistingFile())
				b, _ := os.ReadFile(tw.marker)
				g.Expect(string(b)).To(ContainSubstring("git"))
				g.Expect(os.Remove(tw.marker)).To(Succeed())
			}
		})
	}
}

// TestNoExec: an exec KRM function is refused and its program never runs; the
// control shows the same kustomization runs the program once plugins are enabled.
func TestNoExec(t *testing.T) {
	g := NewWithT(t)
	root, _ := newRepo(t)
	marker := filepath.Join(t.TempDir(), "fn-ran")
	write(t, root, "fn.sh", "#!/bin/sh\ntouch "+marker+"\ncat\n")
	g.Expect(os.Chmod(filepath.Join(root, "fn.sh"), 0o755)).To(Succeed())
	write(t, root, "cm.yaml", cm("c", "1"))
	write(t, root, "fn.yaml", `apiVersion: example.com/v1
kind: Mutate
metadata:
  name: fn
  annotations:
    config.kubernetes.io/function: |
      exec:
        path: ./fn.sh
`)
	write(t, root, "kustomization.yaml", "resources: [cm.yaml]\ntransformers: [fn.yaml]\n")

	res, err := render(Options{Root: root})
	expectFailure(g, res, err, ErrPluginDisabled, "fn.yaml example.com/v1/Mutate is an external KRM function")
	g.Expect(marker).NotTo(BeAnExistingFile())

	// Control: krusty with exec allowed, straight on the disk, runs fn.sh.
	opts := krusty.MakeDefaultOptions()
	opts.PluginConfig = types.EnabledPluginConfig(types.BploUseStaticallyLinked)
	opts.PluginConfig.FnpLoadingOptions.EnableExec = true
	_, _ = krusty.MakeKustomizer(opts).Run(filesys.MakeFsOnDisk(), root)
	g.Expect(marker).To(BeAnExistingFile(), "the control proves the marker would show an exec")
}

// TestKrustyOnConfinedFSWithoutPreflight: the file system alone, with no preflight,
// keeps kustomize inside the root.
func TestKrustyOnConfinedFSWithoutPreflight(t *testing.T) {
	tests := []struct {
		name  string
		files map[string]string
		links map[string]string
	}{
		{name: "resources ../../outside", files: map[string]string{"app/kustomization.yaml": "resources: [../../outside]\n"}},
		{name: "configMapGenerator /etc/passwd", files: map[string]string{"kustomization.yaml": "configMapGenerator: [{name: x, files: [/etc/passwd]}]\n"}},
		{name: "symlinked file to /etc/passwd", files: map[string]string{"kustomization.yaml": "configMapGenerator: [{name: x, files: [pw]}]\n"},
			links: map[string]string{"pw": "/etc/passwd"}},
		{name: "symlinked base outside, relative", files: map[string]string{"kustomization.yaml": "resources: [b]\n"},
			links: map[string]string{"b": "../outside"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			root, _ := newRepo(t)
			for p, c := range tt.files {
				write(t, root, p, c)
			}
			for p, target := range tt.links {
				symlink(t, root, p, target)
			}
			cfs, done := openConfined(t, root)
			defer done()
			dir := mountPoint
			if _, err := os.Stat(filepath.Join(root, "app")); err == nil {
				dir = mountPoint + "/app"
			}
			rm, err := krusty.MakeKustomizer(kustomizeOptions()).Run(cfs, dir)
			g.Expect(err).To(HaveOccurred())
			g.Expect(rm).To(BeNil())
			g.Expect(cfs.policyErr()).To(MatchError(ErrOutsideRoot))
			g.Expect(err.Error()).NotTo(ContainSubstring(outsideMarker))
		})
	}
}

func openConfined(t *testing.T, root string) (*confinedFS, func()) {
	t.Helper()
	r, err := os.OpenRoot(root)
	if err != nil {
		t.Fatal(err)
	}
	cfs := newConfinedFS(context.Background(), r, Limits{}.withDefaults())
	cfs.guardYAML = true
	return cfs, func() { _ = r.Close() }
}
