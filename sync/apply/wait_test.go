package apply

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/yaml"

	"github.com/converge-gitops/converge/health"
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

var crdGVK = schema.GroupVersionKind{Group: "apiextensions.k8s.io", Version: "v1", Kind: "CustomResourceDefinition"}

// widgetCRD is the CRD of example.com/v1 Widget as rendered, without status: as the API
// server answers its creation, before it is Established.
func widgetCRD(t *testing.T) *unstructured.Unstructured {
	return parse(t, `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.example.com
  labels: {converge.dev/name: app, converge.dev/namespace: team}
spec:
  group: example.com
  names: {kind: Widget, plural: widgets}
  scope: Namespaced
  versions:
  - {name: v1, served: true, storage: true}
`)
}

// withConditions returns u with these status conditions.
func withConditions(t *testing.T, u *unstructured.Unstructured, conds ...map[string]any) *unstructured.Unstructured {
	u = u.DeepCopy()
	list := make([]any, len(conds))
	for i, c := range conds {
		list[i] = c
	}
	if err := unstructured.SetNestedSlice(u.Object, list, "status", "conditions"); err != nil {
		t.Fatal(err)
	}
	return u
}

// stageClient is a fake API server holding live, serving CRDs, Namespaces and Widgets,
// counting the lists and watches sent to it.
type stageClient struct {
	client.WithWatch
	lists, watches atomic.Int32
}

func newStageClient(live ...client.Object) *stageClient {
	mapper := meta.NewDefaultRESTMapper(nil)
	mapper.Add(crdGVK, meta.RESTScopeRoot)
	mapper.Add(schema.GroupVersionKind{Version: "v1", Kind: "Namespace"}, meta.RESTScopeRoot)
	mapper.Add(schema.GroupVersionKind{Group: "example.com", Version: "v1", Kind: "Widget"}, meta.RESTScopeNamespace)
	s := &stageClient{}
	s.WithWatch = interceptor.NewClient(fake.NewClientBuilder().WithRESTMapper(mapper).WithObjects(live...).Build(), interceptor.Funcs{
		List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
			s.lists.Add(1)
			return c.List(ctx, list, opts...)
		},
		Watch: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) (watch.Interface, error) {
			w, err := c.Watch(ctx, list, opts...)
			s.watches.Add(1)
			return w, err
		},
	})
	return s
}

// A stage's wait goes through the health engine: a CRD the apply's answer shows
// Installing is watched until Established, one never Established times out with the
// engine's error naming it, one whose names are refused fails at once, and what the
// answer shows ready already costs no request.
func TestStageWaitGoesThroughTheHealthEngine(t *testing.T) {
	established := map[string]any{"type": "Established", "status": "True", "reason": "InitialNamesAccepted"}

	t.Run("a new CRD is waited for until Established", func(t *testing.T) {
		g := NewWithT(t)
		crd := widgetCRD(t)
		c := newStageClient(crd.DeepCopy())
		done := make(chan error, 1)
		go func() {
			done <- waitForStage(t.Context(), c, DefinitionStage, []*unstructured.Unstructured{crd}, []*unstructured.Unstructured{crd}, time.Minute)
		}()
		g.Eventually(c.watches.Load).Should(BeEquivalentTo(1), "the CRD is watched")
		g.Consistently(done, 100*time.Millisecond).ShouldNot(Receive(), "not Established yet")

		live := widgetCRD(t)
		g.Expect(c.Get(t.Context(), client.ObjectKeyFromObject(live), live)).To(Succeed())
		g.Expect(c.Status().Update(t.Context(), withConditions(t, live, established))).To(Succeed())
		g.Eventually(done).Should(Receive(BeNil()))
		g.Expect(c.lists.Load()).To(BeEquivalentTo(1), "listed once, then watched")
	})

	t.Run("a CRD never Established times out, named", func(t *testing.T) {
		g := NewWithT(t)
		crd := widgetCRD(t)
		c := newStageClient(crd.DeepCopy())
		err := waitForStage(t.Context(), c, DefinitionStage, []*unstructured.Unstructured{crd}, []*unstructured.Unstructured{crd}, 300*time.Millisecond)
		g.Expect(err).To(MatchError(health.ErrTimeout))
		var notReady *health.Error
		g.Expect(errors.As(err, &notReady)).To(BeTrue())
		g.Expect(notReady.NotReady).To(HaveLen(1))
		g.Expect(notReady.NotReady[0].Ref).To(Equal(health.RefForObject(crd)))
		g.Expect(err.Error()).To(Equal("CRDs, Namespaces and ClusterRoles not ready for the next stage: " +
			"health check timed out after 300ms: 1 of 1 object not ready: " +
			"apiextensions.k8s.io/v1 CustomResourceDefinition widgets.example.com (InProgress): Install in progress (Installing)"))
	})

	t.Run("a CRD whose names are refused fails at once", func(t *testing.T) {
		g := NewWithT(t)
		crd := widgetCRD(t)
		refused := withConditions(t, crd, map[string]any{"type": "NamesAccepted", "status": "False", "reason": "KindConflict",
			"message": `"Widget" is already in use`})
		c := newStageClient(refused)
		start := time.Now()
		err := waitForStage(t.Context(), c, DefinitionStage, []*unstructured.Unstructured{crd}, []*unstructured.Unstructured{crd}, time.Minute)
		g.Expect(err).To(MatchError(health.ErrFailed))
		g.Expect(err).To(MatchError(ContainSubstring(`CustomResourceDefinition widgets.example.com (Failed): "Widget" is already in use`)))
		g.Expect(time.Since(start)).To(BeNumerically("<", 10*time.Second))
	})

	t.Run("objects the apply's answer shows ready cost no request", func(t *testing.T) {
		g := NewWithT(t)
		crd := withConditions(t, widgetCRD(t), established)
		ns := parse(t, `{apiVersion: v1, kind: Namespace, metadata: {name: shop}, status: {phase: Active}}`)
		c := newStageClient()
		objects := []*unstructured.Unstructured{widgetCRD(t), ns}
		g.Expect(waitForStage(t.Context(), c, DefinitionStage, objects, []*unstructured.Unstructured{crd, ns}, time.Minute)).To(Succeed())
		g.Expect(c.lists.Load()).To(BeZero())
		g.Expect(c.watches.Load()).To(BeZero())
	})
}
