package health

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
)

var crdGVK = schema.GroupVersionKind{Group: "apiextensions.k8s.io", Version: "v1", Kind: "CustomResourceDefinition"}

// runtimeAPI is a controller-runtime fake client holding one CRD without status, counting
// the lists and watches a Checker made through NewForClient sends it.
type runtimeAPI struct {
	client  client.WithWatch
	clock   *clocktesting.FakeClock
	lists   atomic.Int32
	watches atomic.Int32
	// listed are the types of the lists sent.
	listed chan client.ObjectList
}

func newRuntimeAPI(objs ...client.Object) *runtimeAPI {
	mapper := meta.NewDefaultRESTMapper(nil)
	mapper.Add(crdGVK, meta.RESTScopeRoot)
	mapper.Add(schema.GroupVersionKind{Version: "v1", Kind: "Secret"}, meta.RESTScopeNamespace)
	a := &runtimeAPI{clock: clocktesting.NewFakeClock(time.Now()), listed: make(chan client.ObjectList, 100)}
	a.client = interceptor.NewClient(fake.NewClientBuilder().WithRESTMapper(mapper).WithObjects(objs...).Build(), interceptor.Funcs{
		List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
			a.lists.Add(1)
			a.listed <- list
			return c.List(ctx, list, opts...)
		},
		Watch: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) (watch.Interface, error) {
			w, err := c.Watch(ctx, list, opts...)
			a.watches.Add(1)
			return w, err
		},
	})
	return a
}

func installingCRD() *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{
		"metadata": map[string]any{"name": "widgets.example.com"},
		"spec":     map[string]any{"group": "example.com"},
	}}
	u.SetGroupVersionKind(crdGVK)
	return u
}

// establish sets the CRD's Established condition through c.
func establish(g Gomega, c client.Client) {
	u := installingCRD()
	g.Expect(c.Get(context.Background(), client.ObjectKeyFromObject(u), u)).To(Succeed())
	g.Expect(unstructured.SetNestedSlice(u.Object, []any{
		map[string]any{"type": "Established", "status": "True", "reason": "InitialNamesAccepted"},
	}, "status", "conditions")).To(Succeed())
	g.Expect(c.Status().Update(context.Background(), u)).To(Succeed())
}

func waitForCRD(c *Checker) <-chan waitResult {
	ch := make(chan waitResult, 1)
	go func() {
		r, err := c.Wait(context.Background(), []ObjectRef{RefForObject(installingCRD())}, Options{Timeout: time.Minute})
		ch <- waitResult{report: r, err: err}
	}()
	return ch
}

// Through a controller-runtime client that can watch, NewForClient lists once and then
// watches: the CRD Established on the watch ends the wait.
func TestNewForClientWatches(t *testing.T) {
	g := NewWithT(t)
	a := newRuntimeAPI(installingCRD())
	checker := NewForClient(a.client, WithClock(a.clock))
	installing := signalWhen(checker, func(r Report) bool { return r.Objects[0].Status == InProgress })
	done := waitForCRD(checker)

	g.Eventually(installing).Should(BeClosed())
	g.Eventually(a.watches.Load).Should(BeEquivalentTo(1))
	g.Expect(<-a.listed).To(BeAssignableToTypeOf(&unstructured.UnstructuredList{}))
	establish(g, a.client)
	var res waitResult
	g.Eventually(done).Should(Receive(&res))
	g.Expect(res.err).NotTo(HaveOccurred())
	g.Expect(res.report.Objects[0]).To(Equal(ObjectStatus{Ref: RefForObject(installingCRD()), Status: Current, Message: "CRD is established"}))
	g.Expect(a.lists.Load()).To(BeEquivalentTo(1), "watched, not listed again")
}

// Through a client that cannot watch, the objects are listed again every pollInterval on
// the Checker's clock, with the same statuses and timeout.
func TestNewForClientPollsAClientThatCannotWatch(t *testing.T) {
	g := NewWithT(t)
	a := newRuntimeAPI(installingCRD())
	checker := NewForClient(struct{ client.Client }{a.client}, WithClock(a.clock))
	done := waitForCRD(checker)

	g.Eventually(a.clock.Waiters).Should(Equal(2), "the timeout and the pause before the next list")
	g.Expect(a.lists.Load()).To(BeEquivalentTo(1))
	a.clock.Step(pollInterval)
	g.Eventually(a.lists.Load).Should(BeEquivalentTo(2))
	g.Consistently(done, 50*time.Millisecond).ShouldNot(Receive(), "still Installing")

	establish(g, a.client)
	g.Eventually(a.clock.Waiters).Should(Equal(2))
	a.clock.Step(pollInterval)
	var res waitResult
	g.Eventually(done).Should(Receive(&res))
	g.Expect(res.err).NotTo(HaveOccurred())
	g.Expect(res.report.Objects[0].Status).To(Equal(Current))
	g.Expect(a.watches.Load()).To(BeZero())

	// Never Established: the timeout names it, as through New.
	a2 := newRuntimeAPI(installingCRD())
	done = waitForCRD(NewForClient(struct{ client.Client }{a2.client}, WithClock(a2.clock)))
	g.Eventually(a2.clock.Waiters).Should(Equal(2))
	a2.clock.Step(time.Minute)
	g.Eventually(done).Should(Receive(&res))
	g.Expect(res.err).To(MatchError(ErrTimeout))
	g.Expect(res.err.Error()).To(Equal("health check timed out after 1m0s: 1 of 1 object not ready: " +
		"apiextensions.k8s.io/v1 CustomResourceDefinition widgets.example.com (InProgress): Install in progress (Installing)"))
}

// A kind without status is read as metadata only through a controller-runtime client too.
func TestNewForClientReadsStatuslessKindsAsMetadata(t *testing.T) {
	g := NewWithT(t)
	secret := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1", "kind": "Secret",
		"metadata": map[string]any{"name": "s", "namespace": "shop"},
		"data":     map[string]any{"password": "aHVudGVyMg=="},
	}}
	a := newRuntimeAPI(secret)
	report, err := NewForClient(a.client, WithClock(a.clock)).Wait(t.Context(), []ObjectRef{RefForObject(secret)}, Options{Timeout: time.Minute})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(report.Objects[0].Status).To(Equal(Current))
	var list runtime.Object = <-a.listed
	g.Expect(list).To(BeAssignableToTypeOf(&metav1.PartialObjectMetadataList{}))
}
