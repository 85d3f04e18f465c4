package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
	"github.com/converge-gitops/converge/internal/diff"
	"github.com/converge-gitops/converge/internal/gittest"
	"github.com/converge-gitops/converge/internal/localcluster"
	"github.com/converge-gitops/converge/internal/localcluster/clustertest"
	syncapply "github.com/converge-gitops/converge/sync/apply"
)

// The -update flag rewrites golden files; other tests of the package may declare it too.
func init() {
	if flag.Lookup("update") == nil {
		flag.Bool("update", false, "rewrite the golden files in testdata")
	}
}

// diffGolden compares got with testdata/diff/name, or rewrites it with -update.
func diffGolden(t *testing.T, name string, got string) {
	t.Helper()
	path := filepath.Join("testdata", "diff", name)
	if f := flag.Lookup("update"); f != nil && f.Value.String() == "true" {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if got != string(want) {
		t.Errorf("%s differs (run with -update to accept):\n--- want\n%s\n--- got\n%s", path, want, got)
	}
}

// diffCLI runs converge in-process as main does and returns stdout, stderr and the exit code.
func diffCLI(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	root := newRootCommand()
	var out, errOut bytes.Buffer
	root.SetArgs(args)
	root.SetOut(&out)
	root.SetErr(&errOut)
	if err := root.ExecuteContext(context.Background()); err != nil {
		if msg := err.Error(); msg != "" {
			errOut.WriteString("converge: " + msg + "\n")
		}
		return out.String(), errOut.String(), exitCode(err)
	}
	return out.String(), errOut.String(), 0
}

// diffWriteFiles writes files (slash path → content) under dir.
func diffWriteFiles(t *testing.T, dir string, files map[string]string) {
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

func diffB64(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }

// The repository of the SyncTarget team-diff/app, before (main) and after (feature) a change.
var (
	diffMainFiles = map[string]string{
		"deploy/settings.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: settings}\ndata: {mode: blue, size: \"3\"}\n",
		"deploy/legacy.yaml":   "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: legacy}\ndata: {mode: old}\n",
		"deploy/db.yaml":       "apiVersion: v1\nkind: Secret\nmetadata: {name: db}\nstringData: {user: admin-user, password: old-hunter2}\n",
	}
	diffFeatureFiles = map[string]string{
		"deploy/settings.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: settings}\ndata: {mode: green, size: \"3\"}\n",
		"deploy/db.yaml":       "apiVersion: v1\nkind: Secret\nmetadata: {name: db}\nstringData: {user: admin-user, password: new-hunter2}\n",
		"deploy/extra.yaml":    "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: extra}\ndata: {added: \"yes\"}\n",
	}
	// Values that must never be printed: the Secret's, and the git password.
	diffSecretValues = []string{"admin-user", "old-hunter2", "new-hunter2", "git-pa55word"}
)

// TestDiffAgainstCluster runs `converge diff` (and `converge build --target`) against one
// real API server and a real git server: exit codes, masking, pruning, SyncTarget settings.
func TestDiffAgainstCluster(t *testing.T) {
	t.Parallel()
	cluster := clustertest.Start(t, localcluster.Options{CRDDirectoryPaths: []string{clustertest.CRDDir()}})
	ctx := context.Background()
	c, err := client.New(cluster.Config, client.Options{Scheme: cliScheme()})
	if err != nil {
		t.Fatal(err)
	}
	kc := []string{"--kubeconfig", cluster.Kubeconfig}
	for _, ns := range []string{"team-diff", "shop-diff", "plain-diff"} {
		if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			t.Fatal(err)
		}
	}
	apply := func(objs ...*unstructured.Unstructured) {
		t.Helper()
		for _, o := range objs {
			err := c.Apply(ctx, client.ApplyConfigurationFromUnstructured(o.DeepCopy()),
				client.ForceOwnership, client.FieldOwner(syncapply.FieldManager))
			if err != nil {
				t.Fatal(err)
			}
		}
	}

	// The git server, with basic auth: the credentials come from the SyncTarget's secretRef.
	gitRoot := t.TempDir()
	repo := gittest.NewRepo(t, gitRoot, "app")
	srv := gittest.NewHTTPServer(t, gitRoot, gittest.HTTPOptions{Username: "git", Password: "git-pa55word"})
	repo.Commit(t, "main", diffMainFiles)
	featureSHA := repo.CommitChanges(t, "feature", append(gittest.Files(diffFeatureFiles),
		gittest.Change{Path: "deploy/legacy.yaml", Delete: true})...)
	if err := c.Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "git-auth", Namespace: "team-diff"},
		Data:       map[string][]byte{"username": []byte("git"), "password": []byte("git-pa55word")},
	}); err != nil {
		t.Fatal(err)
	}
	st := &convergev1.SyncTarget{
		ObjectMeta: metav1.ObjectMeta{Name: "app", Namespace: "team-diff"},
		Spec: convergev1.SyncTargetSpec{
			Source: convergev1.GitSource{URL: srv.RepoURL(repo), Ref: convergev1.GitRef{Branch: "main"},
				SecretRef: &convergev1.LocalObjectReference{Name: "git-auth"}},
			Path: "deploy", TargetNamespace: "shop-diff", Prune: true,
		},
	}
	if err := c.Create(ctx, st); err != nil {
		t.Fatal(err)
	}

	// What the daemon did for main: applied its objects, recorded them in the inventory.
	// The inventory also holds two objects of an older revision that a prune must leave: one
	// now labelled for another SyncTarget, one that opts out of pruning.
	mainDir := t.TempDir()
	diffWriteFiles(t, mainDir, diffMainFiles)
	applied, err := diff.Render(ctx, c.RESTMapper(), diff.RenderOptions{
		Root: mainDir, Path: "deploy", TargetNamespace: "shop-diff", OwnerName: "app", OwnerNamespace: "team-diff",
	})
	if err != nil {
		t.Fatal(err)
	}
	apply(applied...)
	for _, cm := range []*corev1.ConfigMap{
		{ObjectMeta: metav1.ObjectMeta{Name: "not-mine", Namespace: "shop-diff",
			Labels: map[string]string{convergev1.NameLabel: "other", convergev1.NamespaceLabel: "team-diff"}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "keep-me", Namespace: "shop-diff",
			Labels:      map[string]string{convergev1.NameLabel: "app", convergev1.NamespaceLabel: "team-diff"},
			Annotations: map[string]string{convergev1.PruneAnnotation: convergev1.DisabledValue}}},
	} {
		if err := c.Create(ctx, cm); err != nil {
			t.Fatal(err)
		}
	}
	inv := syncapply.NewInventory(applied)
	inv.Entries = append(inv.Entries,
		convergev1.InventoryEntry{ID: "shop-diff_not-mine__ConfigMap", Version: "v1"},
		convergev1.InventoryEntry{ID: "shop-diff_keep-me__ConfigMap", Version: "v1"})
	st.Status.Inventory = inv
	if err := c.Status().Update(ctx, st); err != nil {
		t.Fatal(err)
	}

	noSecrets := func(t *testing.T, out string) {
		t.Helper()
		for _, v := range diffSecretValues {
			if strings.Contains(out, v) || strings.Contains(out, diffB64(v)) {
				t.Errorf("the output shows the secret value %q:\n%s", v, out)
			}
		}
	}
	target := append([]string{"diff", "--target", "app", "-n", "team-diff"}, kc...)

	t.Run("target at its ref has no changes", func(t *testing.T) {
		g := NewWithT(t)
		out, errOut, code := diffCLI(t, target...)
		g.Expect(code).To(Equal(0), errOut)
		g.Expect(out).To(Equal("0 to create, 0 to change, 0 to prune, 3 unchanged\n"))
	})

	var pending string
	t.Run("target at a revision shows the pending change", func(t *testing.T) {
		g := NewWithT(t)
		out, errOut, code := diffCLI(t, append(target, "--revision", "feature")...)
		g.Expect(code).To(Equal(1), errOut)
		g.Expect(errOut).To(BeEmpty())
		g.Expect(out).To(ContainSubstring("~ v1 ConfigMap shop-diff/settings\n"))
		g.Expect(out).To(ContainSubstring("-  mode: blue\n+  mode: green\n"))
		g.Expect(out).To(ContainSubstring("+ v1 ConfigMap shop-diff/extra\n"))
		g.Expect(out).To(ContainSubstring("- v1 ConfigMap shop-diff/legacy\n"))
		g.Expect(out).To(ContainSubstring("~ v1 Secret shop-diff/db\n"))
		g.Expect(out).To(ContainSubstring("-  password: '***'\n+  password: '*** (changed)'\n"))
		g.Expect(out).NotTo(Or(ContainSubstring("not-mine"), ContainSubstring("keep-me")))
		g.Expect(out).NotTo(ContainSubstring("\x1b["), "no colors off a terminal")
		g.Expect(out).To(HaveSuffix("\n1 to create, 2 to change, 1 to prune, 0 unchanged\n"))
		noSecrets(t, out)
		diffGolden(t, "revision.golden", out)
		pending = out
	})

	t.Run("revision by commit SHA", func(t *testing.T) {
		g := NewWithT(t)
		out, errOut, code := diffCLI(t, append(target, "--revision", featureSHA)...)
		g.Expect(code).To(Equal(1), errOut)
		g.Expect(out).To(Equal(pending))
	})

	t.Run("local path in place of the target's", func(t *testing.T) {
		g := NewWithT(t)
		dir := t.TempDir()
		diffWriteFiles(t, dir, diffFeatureFiles)
		out, errOut, code := diffCLI(t, append(target, "--path", filepath.Join(dir, "deploy"))...)
		g.Expect(code).To(Equal(1), errOut)
		g.Expect(out).To(Equal(pending))
		// PATH works as --path with --target.
		out2, _, code := diffCLI(t, append(target, filepath.Join(dir, "deploy"))...)
		g.Expect(code).To(Equal(1))
		g.Expect(out2).To(Equal(pending))
	})

	t.Run("markdown", func(t *testing.T) {
		g := NewWithT(t)
		out, errOut, code := diffCLI(t, append(target, "--revision", "feature", "--markdown")...)
		g.Expect(code).To(Equal(1), errOut)
		g.Expect(out).To(ContainSubstring("`team-diff/app` at `feature@sha1:" + featureSHA + "`"))
		g.Expect(out).To(ContainSubstring("| `-` prune | `v1 ConfigMap shop-diff/legacy` |"))
		g.Expect(out).To(ContainSubstring("```diff\n"))
		noSecrets(t, out)
		diffGolden(t, "revision.md.golden", strings.ReplaceAll(out, featureSHA, "<sha>"))
	})

	t.Run("json", func(t *testing.T) {
		g := NewWithT(t)
		out, errOut, code := diffCLI(t, append(target, "--revision", "feature", "-o", "json")...)
		g.Expect(code).To(Equal(1), errOut)
		noSecrets(t, out)
		var objs []diff.Object
		g.Expect(json.Unmarshal([]byte(out), &objs)).To(Succeed())
		actions := map[string]diff.Action{}
		for _, o := range objs {
			actions[o.Kind+"/"+o.Name] = o.Action
			g.Expect(o.APIVersion).To(Equal("v1"))
			g.Expect(o.Namespace).To(Equal("shop-diff"))
		}
		g.Expect(actions).To(Equal(map[string]diff.Action{
			"ConfigMap/settings": diff.Change, "ConfigMap/extra": diff.Create,
			"ConfigMap/legacy": diff.Prune, "Secret/db": diff.Change,
		}))
		for _, o := range objs {
			if o.Kind == "Secret" {
				g.Expect(o.Diff).To(ContainSubstring("*** (changed)"))
			}
		}
	})

	t.Run("yaml", func(t *testing.T) {
		g := NewWithT(t)
		out, _, code := diffCLI(t, append(target, "--revision", "feature", "-o", "yaml")...)
		g.Expect(code).To(Equal(1))
		g.Expect(out).To(ContainSubstring("- action: prune\n"))
		noSecrets(t, out)
	})

	t.Run("two revisions compared with each other", func(t *testing.T) {
		g := NewWithT(t)
		out, errOut, code := diffCLI(t, append(target, "--from", "main", "--revision", "feature")...)
		g.Expect(code).To(Equal(1), errOut)
		// The live objects the inventory lists and the cluster play no part: not-mine and
		// keep-me are nowhere, legacy is pruned because feature no longer renders it.
		g.Expect(out).To(ContainSubstring("~ v1 ConfigMap shop-diff/settings\n"))
		g.Expect(out).To(ContainSubstring("--- before\n+++ after\n"))
		g.Expect(out).To(ContainSubstring("-  mode: blue\n+  mode: green\n"))
		g.Expect(out).To(ContainSubstring("+ v1 ConfigMap shop-diff/extra\n"))
		g.Expect(out).To(ContainSubstring("- v1 ConfigMap shop-diff/legacy\n"))
		g.Expect(out).To(ContainSubstring("-  password: '***'\n+  password: '*** (changed)'\n"))
		g.Expect(out).To(HaveSuffix("\n1 to create, 2 to change, 1 to prune, 0 unchanged\n"))
		noSecrets(t, out)
		same, errOut, code := diffCLI(t, append(target, "--from", "main")...)
		g.Expect(code).To(Equal(0), errOut)
		g.Expect(same).To(Equal("0 to create, 0 to change, 0 to prune, 3 unchanged\n"))
		md, _, _ := diffCLI(t, append(target, "--from", "main", "--revision", featureSHA, "--markdown")...)
		g.Expect(md).To(ContainSubstring("SyncTarget `team-diff/app` from `main@sha1:"))
		g.Expect(md).To(ContainSubstring("` to `sha1:" + featureSHA + "`"))
	})

	t.Run("unknown revision", func(t *testing.T) {
		g := NewWithT(t)
		_, errOut, code := diffCLI(t, append(target, "--revision", "no-such-branch")...)
		g.Expect(code).To(Equal(2))
		g.Expect(errOut).To(ContainSubstring(`revision "no-such-branch" is no branch or tag`))
		noSecrets(t, errOut)
	})

	t.Run("unknown target", func(t *testing.T) {
		g := NewWithT(t)
		_, errOut, code := diffCLI(t, append([]string{"diff", "--target", "nope", "-n", "team-diff"}, kc...)...)
		g.Expect(code).To(Equal(2))
		g.Expect(errOut).To(Equal("converge: SyncTarget team-diff/nope not found\n"))
	})

	t.Run("plain path: exit 0 without changes, 1 with", func(t *testing.T) {
		g := NewWithT(t)
		dir := t.TempDir()
		diffWriteFiles(t, dir, map[string]string{"cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: plain}\ndata: {a: \"1\"}\n"})
		objs, err := diff.Render(ctx, c.RESTMapper(), diff.RenderOptions{Root: dir, TargetNamespace: "plain-diff"})
		g.Expect(err).NotTo(HaveOccurred())
		apply(objs...)
		args := append([]string{"diff", dir, "--target-namespace", "plain-diff"}, kc...)

		out, errOut, code := diffCLI(t, args...)
		g.Expect(code).To(Equal(0), errOut)
		g.Expect(out).To(Equal("0 to create, 0 to change, 0 to prune, 1 unchanged\n"))

		diffWriteFiles(t, dir, map[string]string{"cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: plain}\ndata: {a: \"2\"}\n"})
		out, errOut, code = diffCLI(t, args...)
		g.Expect(code).To(Equal(1), errOut)
		g.Expect(out).To(ContainSubstring("~ v1 ConfigMap plain-diff/plain\n"))
		g.Expect(out).To(ContainSubstring("-  a: \"1\"\n+  a: \"2\"\n"))
		g.Expect(out).NotTo(ContainSubstring("converge.dev/name"), "no owner labels without --target")
	})

	t.Run("new namespace with contents, CRD and CR", func(t *testing.T) {
		g := NewWithT(t)
		dir := t.TempDir()
		diffWriteFiles(t, dir, map[string]string{
			"ns.yaml": "apiVersion: v1\nkind: Namespace\nmetadata: {name: fresh-diff}\n",
			"cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: inside, namespace: fresh-diff}\n",
			"crd.yaml": `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: gadgets.diff.example.com}
spec:
  group: diff.example.com
  scope: Namespaced
  names: {kind: Gadget, plural: gadgets, singular: gadget, listKind: GadgetList}
  versions:
  - name: v1
    served: true
    storage: true
    schema: {openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}}
`,
			"gadget.yaml": "apiVersion: diff.example.com/v1\nkind: Gadget\nmetadata: {name: g1, namespace: fresh-diff}\nspec: {size: 1}\n",
		})
		out, errOut, code := diffCLI(t, append([]string{"diff", dir}, kc...)...)
		g.Expect(code).To(Equal(1), errOut)
		// Namespaces and CRDs are of one stage (see apply.Stage), by group within it.
		g.Expect(out).To(MatchRegexp(`(?s)^\+ v1 Namespace fresh-diff\n.*` +
			`\n\+ apiextensions.k8s.io/v1 CustomResourceDefinition gadgets.diff.example.com\n.*` +
			`\n\+ v1 ConfigMap fresh-diff/inside\n  \(not dry-run: its namespace is created by this change\)\n.*` +
			`\n\+ diff.example.com/v1 Gadget fresh-diff/g1\n  \(not dry-run: its kind is defined by a CustomResourceDefinition of this change\)\n`))
		g.Expect(out).To(HaveSuffix("4 to create, 0 to change, 0 to prune, 0 unchanged\n"))
	})

	t.Run("errors exit 2", func(t *testing.T) {
		malformed := t.TempDir()
		diffWriteFiles(t, malformed, map[string]string{"bad.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: [oops\n"})
		tests := []struct {
			name    string
			args    []string
			wantErr string
		}{
			{name: "missing path", args: []string{"diff", filepath.Join(t.TempDir(), "nope")}, wantErr: "does not exist"},
			{name: "malformed YAML", args: []string{"diff", malformed}, wantErr: "render bad.yaml"},
			{name: "no path, no target", args: []string{"diff"}, wantErr: "expected a PATH to render, --chart-repository URL --chart NAME, or --target NAME"},
			{name: "revision without target", args: []string{"diff", ".", "--revision", "main"}, wantErr: "--revision needs --target"},
			{name: "path and revision", args: []string{"diff", "--target", "app", "--path", ".", "--revision", "main"}, wantErr: "exclude each other"},
			{name: "from without target", args: []string{"diff", ".", "--from", "main"}, wantErr: "--from needs --target"},
			{name: "from with path", args: []string{"diff", "--target", "app", "--path", ".", "--from", "main"}, wantErr: "--from needs --target"},
			{name: "bad output", args: []string{"diff", ".", "-o", "xml"}, wantErr: "--output must be table, yaml or json"},
			{name: "unknown flag", args: []string{"diff", ".", "--frobnicate"}, wantErr: "unknown flag"},
			{name: "unreachable cluster", args: []string{"diff", ".", "--kubeconfig", filepath.Join(t.TempDir(), "none")}, wantErr: "kubeconfig"},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				g := NewWithT(t)
				args := tt.args
				if tt.name != "unreachable cluster" {
					args = append(args, kc...)
				}
				out, errOut, code := diffCLI(t, args...)
				g.Expect(code).To(Equal(2), "stdout: %s\nstderr: %s", out, errOut)
				g.Expect(errOut).To(ContainSubstring(tt.wantErr))
				g.Expect(strings.Count(errOut, "\n")).To(Equal(1), "one line on stderr")
			})
		}
	})

	t.Run("build with the target's settings", func(t *testing.T) {
		g := NewWithT(t)
		out, errOut, code := diffCLI(t, append([]string{"build", "--target", "app", "-n", "team-diff", "--revision", "feature"}, kc...)...)
		g.Expect(code).To(Equal(0), errOut)
		docs := strings.Split(out, "---\n")
		g.Expect(docs).To(HaveLen(3))
		for _, d := range docs {
			g.Expect(d).To(ContainSubstring("    converge.dev/name: app\n    converge.dev/namespace: team-diff\n"))
			g.Expect(d).To(ContainSubstring("  namespace: shop-diff\n"))
		}
		g.Expect(out).To(ContainSubstring("mode: green"))
		g.Expect(out).NotTo(ContainSubstring("name: legacy"))

		dir := t.TempDir()
		diffWriteFiles(t, dir, diffMainFiles)
		local, errOut, code := diffCLI(t, append([]string{"build", "--target", "app", "-n", "team-diff", filepath.Join(dir, "deploy")}, kc...)...)
		g.Expect(code).To(Equal(0), errOut)
		g.Expect(local).To(ContainSubstring("name: legacy"))
		g.Expect(local).To(ContainSubstring("    converge.dev/name: app\n"))
	})

	t.Run("build and diff substitute the target's variables", func(t *testing.T) {
		testPostBuildCLI(t, c, kc, srv.RepoURL(repo))
	})

	t.Run("a chart target is built with its cluster's capabilities", func(t *testing.T) {
		testChartCapabilitiesCLI(t, c, cluster.Config, kc, srv.RepoURL(repo))
	})
}

// testChartCapabilitiesCLI: `converge build --target` and `converge diff --target` render
// a chart target's chart with the capabilities of its cluster, as the daemon does:
// .Capabilities.KubeVersion is the API server's, and an API a CRD serves there is seen.
func testChartCapabilitiesCLI(t *testing.T, c client.Client, cfg *rest.Config, kc []string, repoURL string) {
	g := NewWithT(t)
	ctx := context.Background()
	crd := &unstructured.Unstructured{}
	g.Expect(yaml.Unmarshal([]byte(`apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: gadgets.diff.example.com}
spec:
  group: diff.example.com
  scope: Namespaced
  names: {plural: gadgets, singular: gadget, kind: Gadget, listKind: GadgetList}
  versions:
  - {name: v1, served: true, storage: true, schema: {openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}}}
`), &crd.Object)).To(Succeed())
	g.Expect(c.Create(ctx, crd)).To(Succeed())
	g.Eventually(func(g Gomega) {
		_, err := c.RESTMapper().RESTMapping(schema.GroupKind{Group: "diff.example.com", Kind: "Gadget"}, "v1")
		g.Expect(err).NotTo(HaveOccurred())
	}).WithTimeout(30 * time.Second).Should(Succeed())
	st := &convergev1.SyncTarget{
		ObjectMeta: metav1.ObjectMeta{Name: "chart-app", Namespace: "team-diff"},
		Spec: convergev1.SyncTargetSpec{Source: convergev1.GitSource{URL: repoURL, Ref: convergev1.GitRef{Branch: "main"}},
			Path: "chart", TargetNamespace: "shop-diff", Helm: &convergev1.HelmSpec{}},
	}
	g.Expect(c.Create(ctx, st)).To(Succeed())
	dir := t.TempDir()
	diffWriteFiles(t, dir, map[string]string{
		"chart/Chart.yaml": "apiVersion: v2\nname: caps\nversion: 1.0.0\n",
		"chart/templates/caps.yaml": `{{- if .Capabilities.APIVersions.Has "diff.example.com/v1/Gadget" }}
apiVersion: diff.example.com/v1
kind: Gadget
metadata: {name: monitor}
---
{{- end }}
apiVersion: v1
kind: ConfigMap
metadata: {name: caps}
data:
  kube: {{ .Capabilities.KubeVersion.Version | quote }}
`,
	})
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	g.Expect(err).NotTo(HaveOccurred())
	v, err := dc.ServerVersion()
	g.Expect(err).NotTo(HaveOccurred())

	out, errOut, code := diffCLI(t, append([]string{"build", "--target", "chart-app", "-n", "team-diff", filepath.Join(dir, "chart")}, kc...)...)
	g.Expect(code).To(Equal(0), errOut)
	g.Expect(out).To(ContainSubstring("kube: " + v.GitVersion + "\n"))
	g.Expect(out).To(ContainSubstring("kind: Gadget"), "the API the cluster serves is seen")
	out, errOut, code = diffCLI(t, append([]string{"diff", "--target", "chart-app", "-n", "team-diff", filepath.Join(dir, "chart")}, kc...)...)
	g.Expect(code).To(Equal(1), "stdout: %s\nstderr: %s", out, errOut)
	g.Expect(out).To(ContainSubstring("Gadget"))
}
