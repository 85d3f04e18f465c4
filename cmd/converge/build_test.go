package main

import (
	"path/filepath"
	"testing"

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
			{name: "no path", args: []string{"build"}, wantErr: "expected a PATH to render, or --target NAME"},
			{name: "two paths", args: []string{"build", "a", "b"}, wantErr: "expected at most one PATH"},
			{name: "revision without target", args: []string{"build", repo, "--revision", "main"}, wantErr: "--revision needs --target"},
			{name: "target namespace with target", args: []string{"build", "--target", "app", "--target-namespace", "x"}, wantErr: "--target-namespace cannot be used with --target"},
			{name: "target without a cluster", args: []string{"build", "--target", "app"}, wantErr: "kubeconfig"},
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
