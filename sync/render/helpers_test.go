package render

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// outsideMarker is in every file outside the checkout root; it must never reach a
// rendered object or an error message.
const outsideMarker = "converge-outside-secret-7f3a"

// newRepo makes <tmp>/repo (the checkout root) and <tmp>/outside beside it, holding a
// ConfigMap, a kustomization and a plain file that carry outsideMarker.
func newRepo(t testing.TB) (root, outside string) {
	t.Helper()
	tmp := t.TempDir()
	root = filepath.Join(tmp, "repo")
	outside = filepath.Join(tmp, "outside")
	for _, d := range []string{root, outside} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	write(t, outside, "cm.yaml", cm("outside", outsideMarker))
	write(t, outside, "kustomization.yaml", "resources: [cm.yaml]\n")
	write(t, outside, "passwd", "root:x:0:0:"+outsideMarker+":/root:/bin/sh\n")
	return root, outside
}

// write creates root/rel with content, making parent directories.
func write(t testing.TB, root, rel, content string) {
	t.Helper()
	p := filepath.Join(root, filepath.FromSlash(rel))
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// symlink creates root/rel pointing at target (verbatim: relative or absolute).
func symlink(t testing.TB, root, rel, target string) {
	t.Helper()
	p := filepath.Join(root, filepath.FromSlash(rel))
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, p); err != nil {
		t.Fatal(err)
	}
}

func cm(name, value string) string {
	return fmt.Sprintf("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: %s\ndata:\n  key: %q\n", name, value)
}

func deploy(name string) string {
	return fmt.Sprintf(`apiVersion: apps/v1
kind: Deployment
metadata:
  name: %s
  labels: {app: %s}
spec:
  replicas: 1
  selector:
    matchLabels: {app: %s}
  template:
    metadata:
      labels: {app: %s}
    spec:
      containers:
      - name: app
        image: nginx:1.27
        ports:
        - containerPort: 80
`, name, name, name, name)
}

// ids lists objects as "Kind namespace/name" (or "Kind name" when cluster-scoped).
func ids(objs []*unstructured.Unstructured) []string {
	out := make([]string, 0, len(objs))
	for _, o := range objs {
		if o.GetNamespace() == "" {
			out = append(out, o.GetKind()+" "+o.GetName())
		} else {
			out = append(out, o.GetKind()+" "+o.GetNamespace()+"/"+o.GetName())
		}
	}
	return out
}

// render runs Render with a background context.
func render(opts Options) (*Result, error) {
	return Render(context.Background(), opts)
}

// expectFailure asserts a failed render: no result, an *Error of the given class
// whose message holds want, and nothing from outside the root in the message.
func expectFailure(g Gomega, res *Result, err error, class error, want string) {
	g.Expect(err).To(HaveOccurred())
	g.Expect(res).To(BeNil(), "nothing partial is returned")
	var re *Error
	g.Expect(errors.As(err, &re)).To(BeTrue(), "error %T is a *render.Error", err)
	g.Expect(errors.Is(err, class)).To(BeTrue(), "error %q is of class %q", err, class)
	if want != "" {
		g.Expect(err.Error()).To(ContainSubstring(want))
	}
	g.Expect(err.Error()).NotTo(ContainSubstring(outsideMarker))
	g.Expect(err.Error()).NotTo(ContainSubstring(mountPoint), "kustomize's view of paths is not leaked")
}
