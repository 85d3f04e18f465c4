package main

import (
	"context"
	"path/filepath"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
)

// testPostBuildCLI (a part of TestDiffAgainstCluster, on its cluster): `converge build
// --target` and `converge diff --target` substitute the SyncTarget's spec.postBuild
// variables as the daemon does, and fail like it on a missing referent or unset variable.
func testPostBuildCLI(t *testing.T, c client.Client, kc []string, url string) {
	ctx := context.Background()
	g := NewWithT(t)
	const ns = "team-diff"
	g.Expect(c.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "vars", Namespace: ns},
		Data: map[string]string{"greeting": "hello", "color": "red"}})).To(Succeed())
	g.Expect(c.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "vars", Namespace: ns},
		StringData: map[string]string{"color": "blue"}})).To(Succeed())
	target := func(name string, refs ...convergev1.SubstituteReference) {
		g.Expect(c.Create(ctx, &convergev1.SyncTarget{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Spec: convergev1.SyncTargetSpec{Source: convergev1.GitSource{URL: url, Ref: convergev1.GitRef{Branch: "main"}},
				Path: "deploy", TargetNamespace: "shop-diff",
				PostBuild: &convergev1.PostBuildSpec{SubstituteFrom: refs, Substitute: map[string]string{"inline": "yes"}}},
		})).To(Succeed())
	}
	target("vars", convergev1.SubstituteReference{Kind: "ConfigMap", Name: "vars"},
		convergev1.SubstituteReference{Kind: "Secret", Name: "vars"},
		convergev1.SubstituteReference{Kind: "ConfigMap", Name: "absent", Optional: true})
	target("vars-missing", convergev1.SubstituteReference{Kind: "ConfigMap", Name: "absent"})

	dir := t.TempDir()
	diffWriteFiles(t, dir, map[string]string{
		"ok/cm.yaml":    "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: greeting}\ndata: {text: '${greeting} ${color} ${inline} ${zone:=a}'}\n",
		"unset/cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: greeting}\ndata: {text: '${nope} ${greeting} ${other}'}\n",
	})
	run := func(args ...string) (string, string, int) {
		return diffCLI(t, append(append(args, "-n", ns), kc...)...)
	}

	out, errOut, code := run("build", "--target", "vars", filepath.Join(dir, "ok"))
	g.Expect(code).To(Equal(0), errOut)
	g.Expect(out).To(ContainSubstring("  text: hello blue yes a\n"), "the Secret wins over the ConfigMap before it")

	out, errOut, code = run("diff", "--target", "vars", filepath.Join(dir, "ok"))
	g.Expect(code).To(Equal(1), errOut)
	g.Expect(out).To(ContainSubstring("+  text: hello blue yes a"))

	for _, tc := range []struct{ target, path, want string }{
		{"vars-missing", "ok", "spec.postBuild.substituteFrom[0]: ConfigMap team-diff/absent not found"},
		{"vars", "unset", "variables not set (strict): nope, other; used by ConfigMap greeting"},
	} {
		for _, verb := range []string{"build", "diff"} {
			out, errOut, code = run(verb, "--target", tc.target, filepath.Join(dir, tc.path))
			g.Expect(code).To(Equal(2), "%s: %s", verb, out)
			g.Expect(errOut).To(ContainSubstring(tc.want))
		}
	}
}
