package health

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	clienttesting "k8s.io/client-go/testing"
	clocktesting "k8s.io/utils/clock/testing"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
)

// fakeAPI serves Widgets through a fake dynamic client whose lists and watches the test
// scripts, with a fake clock for the timeout and the retry back-off.
type fakeAPI struct {
	client  *dynamicfake.FakeDynamicClient
	clock   *clocktesting.FakeClock
	checker *Checker
	lists   atomic.Int32
	watches atomic.Int32
}

func newFakeAPI(list func(n int32) (runtime.Object, error), watchFor func(n int32) watch.Interface) *fakeAPI {
	f := &fakeAPI{
		client: dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
			map[schema.GroupVersionResource]string{widgetGVR: "WidgetList"}),
		clock: clocktesting.NewFakeClock(time.Now()),
	}
	f.client.PrependReactor("list", "widgets", func(clienttesting.Action) (bool, runtime.Object, error) {
		obj, err := list(f.lists.Add(1))
		return true, obj, err
	})
	f.client.PrependWatchReactor("widgets", func(clienttesting.Action) (bool, watch.Interface, error) {
		return true, watchFor(f.watches.Add(1)), nil
	})
	mapper := meta.NewDefaultRESTMapper(nil)
	mapper.Add(widgetGVK, meta.RESTScopeNamespace)
	f.checker = NewForClients(f.client, nil, mapper, WithClock(f.clock))
	return f
}

func fakeWidget(name, phase, rv string) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "test.converge.dev/v1", "kind": "Widget",
		"metadata": map[string]any{"name": name, "namespace": "ns", "resourceVersion": rv},
		"status":   map[string]any{"phase": phase},
	}}
}

func widgetList(rv string, items ...*unstructured.Unstructured) *unstructured.UnstructuredList {
	l := &unstructured.UnstructuredList{}
	l.SetResourceVersion(rv)
	for _, u := range items {
		l.Items = append(l.Items, *u)
	}
	return l
}

// pendingWidgetAPI serves the Widget w as Pending in every list, and w as every watch.
func pendingWidgetAPI(w watch.Interface) *fakeAPI {
	return newFakeAPI(
		func(int32) (runtime.Object, error) {
			return widgetList("10", fakeWidget("w", "Pending", "10")), nil
		},
		func(int32) watch.Interface { return w },
	)
}

func (f *fakeAPI) wait(ctx context.Context, timeout time.Duration) <-chan waitResult {
	return f.waitWith(ctx, Options{Timeout: timeout})
}

// waitWith waits for the Widget w with opts and the Widget health rule.
func (f *fakeAPI) waitWith(ctx context.Context, opts Options) <-chan waitResult {
	opts.Exprs = []convergev1.CustomHealthCheck{widgetCheck()}
	ch := make(chan waitResult, 1)
	go func() {
		r, err := f.checker.Wait(ctx, []ObjectRef{{GVK: widgetGVK, Namespace: "ns", Name: "w"}}, opts)
		ch <- waitResult{report: r, err: err}
	}()
	return ch
}

// A list that fails leaves the object Unknown with the reason and is retried after a
// back-off; a watch whose resource version expired is followed by a fresh list and watch;
// the change seen on that watch ends the wait, and the watch is stopped.
func TestStreamRecovers(t *testing.T) {
	g := NewWithT(t)
	expiredWatch := watch.NewFakeWithChanSize(1, false)
	expiredWatch.Error(&metav1.Status{Status: metav1.StatusFailure, Code: 410, Reason: metav1.StatusReasonExpired, Message: "too old resource version"})
	liveWatch := watch.NewFakeWithChanSize(1, false)
	f := newFakeAPI(
		func(n int32) (runtime.Object, error) {
			if n == 1 {
				return nil, apierrors.NewForbidden(widgetGVR.GroupResource(), "", errors.New("RBAC says no"))
			}
			return widgetList("10", fakeWidget("w", "Pending", "10")), nil
		},
		func(n int32) watch.Interface {
			if n == 1 {
				return expiredWatch
			}
			return liveWatch
		},
	)
	forbidden := signalWhen(f.checker, func(r Report) bool {
		return r.Objects[0].Status == Unknown && r.Objects[0].Message == `cannot list widgets: widgets.test.converge.dev is forbidden: RBAC says no`
	})
	done := f.wait(t.Context(), time.Minute)

	g.Eventually(forbidden).Should(BeClosed())
	g.Eventually(f.clock.Waiters).Should(Equal(2), "the timeout and the back-off")
	g.Expect(f.lists.Load()).To(BeEquivalentTo(1))
	f.clock.Step(initialBackoff)

	g.Eventually(f.watches.Load).Should(BeEquivalentTo(2))
	g.Expect(f.lists.Load()).To(BeEquivalentTo(3), "listed again at once after the expired watch")
	g.Expect(expiredWatch.IsStopped()).To(BeTrue())
	g.Consistently(done).ShouldNot(Receive(), "the Widget is still Pending")

	liveWatch.Modify(fakeWidget("w", "Ready", "11"))
	var res waitResult
	g.Eventually(done).Should(Receive(&res))
	g.Expect(res.err).NotTo(HaveOccurred())
	g.Expect(res.report.Objects[0].Status).To(Equal(Current))
	g.Expect(liveWatch.IsStopped()).To(BeTrue(), "the watch is stopped when Wait returns")
}

// A deletion seen on the watch makes the object NotFound until it is created again.
func TestStreamSeesDeletionAndRecreation(t *testing.T) {
	g := NewWithT(t)
	w := watch.NewFakeWithChanSize(1, false)
	f := pendingWidgetAPI(w)
	deleted := signalWhen(f.checker, func(r Report) bool {
		return r.Objects[0].Status == NotFound && r.Objects[0].Message == "deleted"
	})
	done := f.wait(t.Context(), time.Minute)
	g.Eventually(f.watches.Load).Should(BeEquivalentTo(1))
	w.Delete(fakeWidget("w", "Pending", "11"))
	g.Eventually(deleted).Should(BeClosed())
	w.Add(fakeWidget("w", "Ready", "12"))
	var res waitResult
	g.Eventually(done).Should(Receive(&res))
	g.Expect(res.err).NotTo(HaveOccurred())
	g.Expect(f.lists.Load()).To(BeEquivalentTo(1))
}

// The timeout is the Checker's clock: when it expires the error names the object with
// the last status seen, and the watch is stopped.
func TestWaitTimesOutOnTheClock(t *testing.T) {
	g := NewWithT(t)
	w := watch.NewFakeWithChanSize(1, false)
	f := pendingWidgetAPI(w)
	done := f.wait(t.Context(), 90*time.Second)
	g.Eventually(f.watches.Load).Should(BeEquivalentTo(1))
	g.Expect(f.clock.Waiters()).To(Equal(1), "only the timeout")
	f.clock.Step(90 * time.Second)
	var res waitResult
	g.Eventually(done).Should(Receive(&res))
	g.Expect(errors.Is(res.err, ErrTimeout)).To(BeTrue(), "%v", res.err)
	g.Expect(res.err.Error()).To(Equal(`health check timed out after 1m30s: 1 of 1 object not ready: ` +
		`test.converge.dev/v1 Widget ns/w (InProgress): inProgress expression holds: has(self.status) && self.status.phase == "Pending"`))
	g.Expect(res.report.Elapsed).To(Equal(90 * time.Second))
	g.Expect(w.IsStopped()).To(BeTrue())
}

// Input that cannot be waited for is an error before any request; a kind the API server
// does not serve fails its objects at once.
func TestWaitRejectsWhatCannotBeWaitedFor(t *testing.T) {
	tests := []struct {
		name    string
		refs    []ObjectRef
		wantErr string
		failed  bool
	}{
		{
			name:    "namespaced kind without namespace",
			refs:    []ObjectRef{{GVK: widgetGVK, Name: "w"}},
			wantErr: `invalid object reference "test.converge.dev/v1 Widget w": Widget is namespaced and no namespace is given`,
		},
		{
			name:    "no name",
			refs:    []ObjectRef{{GVK: widgetGVK, Namespace: "ns"}},
			wantErr: "apiVersion, kind and name are required",
		},
		{
			name:    "kind not served",
			refs:    []ObjectRef{{GVK: widgetGVK, Namespace: "ns", Name: "w"}, {GVK: schema.GroupVersionKind{Group: "example.com", Version: "v9", Kind: "Gizmo"}, Namespace: "ns", Name: "g"}},
			wantErr: "health check failed: 1 of 2 objects failed, 1 not ready: example.com/v9 Gizmo ns/g (Failed): the API server does not serve example.com/v9 Gizmo; test.converge.dev/v1 Widget ns/w (Unknown): not observed yet",
			failed:  true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			f := newFakeAPI(
				func(int32) (runtime.Object, error) { return widgetList("1"), nil },
				func(int32) watch.Interface { return watch.NewFake() },
			)
			_, err := f.checker.Wait(t.Context(), tt.refs, Options{})
			g.Expect(err).To(MatchError(ContainSubstring(tt.wantErr)))
			g.Expect(errors.Is(err, ErrFailed)).To(Equal(tt.failed))
			g.Expect(f.lists.Load()).To(BeZero())
			g.Expect(f.watches.Load()).To(BeZero())
		})
	}
}

// A wait cancelled with a cause (a newer revision arrived) says so and still matches
// context.Canceled.
func TestWaitCancelledWithCause(t *testing.T) {
	g := NewWithT(t)
	w := watch.NewFakeWithChanSize(1, false)
	f := pendingWidgetAPI(w)
	ctx, cancel := context.WithCancelCause(t.Context())
	done := f.wait(ctx, time.Minute)
	g.Eventually(f.watches.Load).Should(BeEquivalentTo(1))
	newer := errors.New("revision main@sha1:abc superseded")
	cancel(newer)
	var res waitResult
	g.Eventually(done).Should(Receive(&res))
	g.Expect(res.err).To(MatchError("health check interrupted: context canceled: revision main@sha1:abc superseded"))
	g.Expect(errors.Is(res.err, context.Canceled)).To(BeTrue())
	g.Expect(errors.Is(res.err, newer)).To(BeTrue())
	g.Expect(w.IsStopped()).To(BeTrue())
}

// OnSlow is called once, when the wait outlasts Slow on the Checker's clock, with what is
// known so far; a wait that ends sooner never calls it.
func TestWaitCallsOnSlowOnceWhenSlow(t *testing.T) {
	g := NewWithT(t)
	w := watch.NewFakeWithChanSize(1, false)
	f := pendingWidgetAPI(w)
	var calls atomic.Int32
	var seen Report
	done := f.waitWith(t.Context(), Options{Timeout: time.Minute,
		Slow: 2 * time.Second, OnSlow: func(r Report) { seen = r; calls.Add(1) }})
	g.Eventually(f.watches.Load).Should(BeEquivalentTo(1))
	g.Expect(f.clock.Waiters()).To(Equal(2), "the timeout and the slow notice")
	f.clock.Step(time.Second)
	g.Consistently(calls.Load, 100*time.Millisecond).Should(BeZero(), "not slow yet")
	f.clock.Step(time.Second)
	g.Eventually(calls.Load).Should(BeEquivalentTo(1))
	f.clock.Step(10 * time.Second)
	w.Modify(fakeWidget("w", "Ready", "11"))
	var res waitResult
	g.Eventually(done).Should(Receive(&res))
	g.Expect(res.err).NotTo(HaveOccurred())
	g.Expect(calls.Load()).To(BeEquivalentTo(1), "once")
	g.Expect(seen.Objects).To(HaveLen(1))
	g.Expect(seen.Elapsed).To(Equal(2 * time.Second))

	// A wait that ends before Slow says nothing.
	w2 := watch.NewFakeWithChanSize(1, false)
	f2 := pendingWidgetAPI(w2)
	var calls2 atomic.Int32
	done2 := f2.waitWith(t.Context(), Options{Timeout: time.Minute,
		Slow: 2 * time.Second, OnSlow: func(Report) { calls2.Add(1) }})
	g.Eventually(f2.watches.Load).Should(BeEquivalentTo(1))
	w2.Modify(fakeWidget("w", "Ready", "11"))
	g.Eventually(done2).Should(Receive(&res))
	g.Expect(res.err).NotTo(HaveOccurred())
	g.Expect(calls2.Load()).To(BeZero())
}
