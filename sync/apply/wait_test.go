package apply

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/yaml"
)

// lateMapper knows the kinds of its DefaultRESTMapper only after misses lookups, as
// discovery may lag a CRD that is Established already.
type lateMapper struct {
	meta.RESTMapper
	misses int
}

func (m *lateMapper) RESTMapping(gk schema.GroupKind, versions ...string) (*meta.RESTMapping, error) {
	if m.misses > 0 {
		m.misses--
		return nil, &meta.NoKindMatchError{GroupKind: gk, SearchedVersions: versions}
	}
	return m.RESTMapper.RESTMapping(gk, versions...)
}

func TestWaitForKindsWaitsUntilDiscoveryServesTheCRD(t *testing.T) {
	g := NewWithT(t)
	crd := &unstructured.Unstructured{}
	g.Expect(yaml.Unmarshal([]byte(`apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: widgets.example.com}
spec:
  group: example.com
  names: {kind: Widget, plural: widgets}
  scope: Namespaced
  versions:
  - {name: v1, served: true, storage: true}
  - {name: v0, served: false, storage: false}
`), &crd.Object)).To(Succeed())
	known := meta.NewDefaultRESTMapper(nil)
	known.Add(schema.GroupVersionKind{Group: "example.com", Version: "v1", Kind: "Widget"}, meta.RESTScopeNamespace)

	mapper := &lateMapper{RESTMapper: known, misses: 3}
	g.Expect(waitForKinds(context.Background(), mapper, []*unstructured.Unstructured{crd}, 10*time.Second)).To(Succeed())
	g.Expect(mapper.misses).To(BeZero(), "looked again until the kind was served")

	never := &lateMapper{RESTMapper: meta.NewDefaultRESTMapper(nil)}
	err := waitForKinds(context.Background(), never, []*unstructured.Unstructured{crd}, 300*time.Millisecond)
	g.Expect(err).To(MatchError(ContainSubstring("Widget example.com/v1 is not served yet")))
}
