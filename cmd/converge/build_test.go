package main

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/gomega"
)

// TestBuild renders without a cluster: no kubeconfig is needed or read.
func TestBuild(t *testing.T) {
	repo := t.TempDir()
	diffWriteFiles(t, repo, map[string]string{
		".git/HEAD":                        "ref: refs/heads/main\n",
		"base/kustomization.yaml":          "resources: [deploy.yaml, cm.yaml]\n",
		"base/cm.yaml":                     "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: settings}\ndata: {mode: blue}\n",
		"base/deploy.yaml":                 "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web}\nspec: {replicas: 1}\n",
		"overlays/prod/kustomization.yaml": "resources: [../../base, ns.yaml]\nnamePrefix: prod-\n",
		"overlays/prod/ns.yaml":            "apiVersion: v1\nkind: Namespace\nmetadata: {name: shop}\n",
		"broken/bad.yaml":                  "kind: [\n",
		"umbrella/Chart.yaml":              "apiVersion: v2\nname: umbrella\nversion: 1.0.0\ndependencies:\n- {name: postgresql, version: 12.x.x, repository: https://charts.example}\n",
		"umbrella/templates/cm.yaml":       "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: umbrella}\n",
	})
	noCluster := []string{"--kubeconfig", filepath.Join(t.TempDir(), "absent")}

	t.Run("an overlay reaching into its work tree, in apply order", func(t *testing.T) {
		g := NewWithT(t)
		out, errOut, code := diffCLI(t, append([]string{"build", filepath.Join(repo, "overlays", "prod"), "--target-namespace", "shop"}, noCluster...)...)
		g.Expect(code).To(Equal(0), errOut)
		g.Expect(out).To(Equal(`apiVersion: v1
kind: Namespace
metadata:
  name: shop
---
apiVersion: v1
data:
  mode: blue
kind: ConfigMap
metadata:
  name: prod-settings
  namespace: shop
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: prod-web
  namespace: shop
spec:
  replicas: 1
`))
	})

	t.Run("a single file", func(t *testing.T) {
		g := NewWithT(t)
		out, errOut, code := diffCLI(t, append([]string{"build", filepath.Join(repo, "base", "cm.yaml")}, noCluster...)...)
		g.Expect(code).To(Equal(0), errOut)
		g.Expect(out).To(Equal("apiVersion: v1\ndata:\n  mode: blue\nkind: ConfigMap\nmetadata:\n  name: settings\n"))
	})

	t.Run("errors exit 2", func(t *testing.T) {
		tests := []struct {
			name    string
			args    []string
			wantErr string
		}{
			{name: "missing path", args: []string{"build", filepath.Join(repo, "nope")}, wantErr: "does not exist"},
			{name: "malformed YAML", args: []string{"build", filepath.Join(repo, "broken")}, wantErr: "render broken/bad.yaml"},
			{name: "no path", args: []string{"build"}, wantErr: "expected a PATH to render, --chart-repository URL --chart NAME, or --target NAME"},
			{name: "two paths", args: []string{"build", "a", "b"}, wantErr: "expected at most one PATH"},
			{name: "revision without target", args: []string{"build", repo, "--revision", "main"}, wantErr: "--revision needs --target"},
			{name: "target namespace with target", args: []string{"build", "--target", "app", "--target-namespace", "x"}, wantErr: "--target-namespace cannot be used with --target"},
			{name: "target without a cluster", args: []string{"build", "--target", "app"}, wantErr: "kubeconfig"},
			{name: "a chart's dependency not vendored", args: []string{"build", filepath.Join(repo, "umbrella")},
				wantErr: `dependency "postgresql" is not vendored under charts/ (run helm dependency build`},
			{name: "chart flags on no chart", args: []string{"build", filepath.Join(repo, "base"), "--set", "a=b"},
				wantErr: "--set is for a chart directory, and base holds no Chart.yaml"},
			{name: "chart flags with target", args: []string{"build", "--target", "app", "-f", "values.yaml"},
				wantErr: "--values cannot be used with --target: the SyncTarget's spec.helm"},
			{name: "a bad --set", args: []string{"build", filepath.Join(repo, "umbrella"), "--set", "novalue"}, wantErr: "--set novalue: key \"novalue\" has no value"},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				g := NewWithT(t)
				out, errOut, code := diffCLI(t, append(tt.args, noCluster...)...)
				g.Expect(code).To(Equal(2), "stdout: %s\nstderr: %s", out, errOut)
				g.Expect(out).To(BeEmpty())
				g.Expect(errOut).To(ContainSubstring(tt.wantErr))
			})
		}
	})
}

// TestBuildNeverReachesTheNetwork runs the real binary on a repository whose
// generators directory patches its ConfigMapGenerator to read a URL on loopback
// (files: [loot=http://…]), and a transformers directory patching a
// PatchTransformer's path to one. The server never answers (a render that fetched
// would hang) and counts requests; a fake git first on PATH leaves a marker. The
// build must exit 2 at once with a clear error, with no request and no git.
func TestBuildNeverReachesTheNetwork(t *testing.T) {
	var requests atomic.Int64
	stop := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		select { // accept and never answer
		case <-stop:
		case <-r.Context().Done():
		}
	}))
	defer srv.Close()
	defer close(stop)
	bin := t.TempDir()
	marker := filepath.Join(t.TempDir(), "git-ran")
	if err := os.WriteFile(filepath.Join(bin, "git"), []byte("#!/bin/sh\ntouch "+marker+"\nexit 1\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	patched := func(kind, patch string) string {
		return "resources: [config.yaml]\npatches:\n- patch: |\n    apiVersion: builtin\n    kind: " + kind + "\n    metadata: {name: p}\n    " + patch + "\n"
	}
	tests := []struct {
		name  string
		files map[string]string
		want  string
	}{
		{name: "generator directory: ConfigMapGenerator files", want: `generators: gen (as built) ConfigMapGenerator files: "loot=` + srv.URL, files: map[string]string{
			"kustomization.yaml":     "generators: [gen]\n",
			"gen/kustomization.yaml": patched("ConfigMapGenerator", "files: [loot="+srv.URL+"/x]"),
			"gen/config.yaml":        "apiVersion: builtin\nkind: ConfigMapGenerator\nmetadata: {name: p}\nliterals: [a=b]\n",
		}},
		{name: "transformer directory: PatchTransformer path", want: `transformers: t (as built) PatchTransformer path: "` + srv.URL, files: map[string]string{
			"kustomization.yaml":   "resources: [cm.yaml]\ntransformers: [t]\n",
			"cm.yaml":              "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\n",
			"t/kustomization.yaml": patched("PatchTransformer", "patch: null\n    path: "+srv.URL+"/p.yaml"),
			"t/config.yaml":        "apiVersion: builtin\nkind: PatchTransformer\nmetadata: {name: p}\npatch: '{}'\ntarget: {kind: ConfigMap}\n",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			repo := t.TempDir()
			diffWriteFiles(t, repo, tt.files)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, binary, "build", repo, "--kubeconfig", filepath.Join(t.TempDir(), "absent"))
			cmd.Env = append(os.Environ(), "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"), "TMPDIR="+t.TempDir())
			var out, errOut bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &errOut
			err := cmd.Run()
			g.Expect(ctx.Err()).NotTo(HaveOccurred(), "converge build did not hang")
			var ee *exec.ExitError
			g.Expect(errors.As(err, &ee)).To(BeTrue(), "converge build failed: %v", err)
			g.Expect(ee.ExitCode()).To(Equal(2), errOut.String())
			g.Expect(out.String()).To(BeEmpty(), "nothing is printed")
			g.Expect(errOut.String()).To(ContainSubstring("remote kustomize resources are not allowed"))
			g.Expect(errOut.String()).To(ContainSubstring(tt.want))
			g.Expect(requests.Load()).To(BeZero(), "the loopback server got no request")
			g.Expect(marker).NotTo(BeAnExistingFile(), "git was not run")
		})
	}
}
