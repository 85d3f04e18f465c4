package render

import (
	"runtime"
	"strings"
	"sync"
	"testing"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/kustomize/kyaml/openapi"
	"sigs.k8s.io/kustomize/kyaml/yaml"
)

// schemaFixture is a kustomization whose build needs kustomize's OpenAPI schema: a
// strategic merge patch of a Deployment's containers (merged by name).
func schemaFixture(t *testing.T) string {
	root, _ := newRepo(t)
	write(t, root, "kustomization.yaml", `resources: [deploy.yaml]
patches:
- patch: |
    apiVersion: apps/v1
    kind: Deployment
    metadata: {name: web}
    spec:
      template:
        spec:
          containers: [{name: app, image: nginx:2}]
`)
	write(t, root, "deploy.yaml", deploy("web"))
	return root
}

func allocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// TestSchemaLoadedOnce: kustomize's built-in OpenAPI schema is parsed on the first
// build of the process and never again. The first build after a reset of kyaml's
// schema cache pays for the parse; every later build costs a small fraction of it.
// Were the schema reloaded per build (as in Flux, 17 % of its CPU), warm builds
// would cost as much as the cold one.
func TestSchemaLoadedOnce(t *testing.T) {
	g := NewWithT(t)
	root := schemaFixture(t)
	build := func() {
		res, err := render(Options{Root: root})
		g.Expect(err).NotTo(HaveOccurred())
		img, _, _ := nestedImage(res)
		g.Expect(img).To(Equal("nginx:2"), "the patch merged the container by name, with the schema")
	}
	openapi.ResetOpenAPI()
	cold := allocated(build)
	var warm uint64
	for i := 0; i < 5; i++ {
		warm = max(warm, allocated(build))
	}
	t.Logf("first build %d KiB, later builds at most %d KiB", cold>>10, warm>>10)
	g.Expect(warm*5).To(BeNumerically("<", cold), "later builds do not parse the schema again")
}

func nestedImage(res *Result) (string, bool, error) {
	for _, o := range res.Objects {
		if o.GetKind() != "Deployment" {
			continue
		}
		cs, _, _ := unstructuredSlice(o.Object, "spec", "template", "spec", "containers")
		if len(cs) == 1 {
			img, _ := cs[0].(map[string]any)["image"].(string)
			return img, true, nil
		}
	}
	return "", false, nil
}

func unstructuredSlice(m map[string]any, fields ...string) ([]any, bool, error) {
	var cur any = m
	for _, f := range fields {
		mm, ok := cur.(map[string]any)
		if !ok {
			return nil, false, nil
		}
		cur = mm[f]
	}
	s, ok := cur.([]any)
	return s, ok, nil
}

// TestClusterScopedTable checks the built-in scope table against kustomize's
// bundled Kubernetes OpenAPI for every type client-go knows.
func TestClusterScopedTable(t *testing.T) {
	g := NewWithT(t)
	checked := 0
	var wrong []string
	for gvk := range scheme.Scheme.AllKnownTypes() {
		if gvk.Version == runtimeInternalVersion || strings.HasSuffix(gvk.Kind, "List") || strings.HasSuffix(gvk.Kind, "Options") ||
			gvk.Kind == "WatchEvent" || gvk.Kind == "Status" {
			continue
		}
		namespaced, found := openapi.IsNamespaceScoped(yaml.TypeMeta{APIVersion: gvk.GroupVersion().String(), Kind: gvk.Kind})
		if !found {
			continue
		}
		checked++
		if clusterScoped[gvk.GroupKind()] == namespaced {
			wrong = append(wrong, gvk.String())
		}
	}
	t.Logf("checked %d built-in kinds", checked)
	g.Expect(checked).To(BeNumerically(">", 60))
	g.Expect(wrong).To(BeEmpty(), "kinds whose scope the table gets wrong")
	g.Expect(IsClusterScopedBuiltin(schema.GroupKind{Group: "rbac.authorization.k8s.io", Kind: "ClusterRole"})).To(BeTrue())
	g.Expect(IsClusterScopedBuiltin(schema.GroupKind{Group: "apps", Kind: "Deployment"})).To(BeFalse())
}

const runtimeInternalVersion = "__internal"

// TestConcurrentRenders: renders of shared checkouts may run in parallel (run
// with -race); each returns the same objects and digest as a lone render.
func TestConcurrentRenders(t *testing.T) {
	g := NewWithT(t)
	kroot := schemaFixture(t)
	proot, _ := newRepo(t)
	write(t, proot, "a.yaml", deploy("web")+"---\n"+cm("c", "1"))
	want := map[string]string{}
	for _, root := range []string{kroot, proot} {
		res, err := render(Options{Root: root, TargetNamespace: "ns"})
		g.Expect(err).NotTo(HaveOccurred())
		want[root] = res.Digest
	}
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	digests := make(chan [2]string, 16)
	for i := 0; i < 8; i++ {
		root := []string{kroot, proot}[i%2]
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := render(Options{Root: root, TargetNamespace: "ns"})
			if err != nil {
				errs <- err
				return
			}
			digests <- [2]string{root, res.Digest}
		}()
	}
	wg.Wait()
	close(errs)
	close(digests)
	for err := range errs {
		g.Expect(err).NotTo(HaveOccurred())
	}
	n := 0
	for d := range digests {
		n++
		g.Expect(d[1]).To(Equal(want[d[0]]))
	}
	g.Expect(n).To(Equal(8))
}
