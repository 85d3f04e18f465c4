package reconciler_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/converge-gitops/converge/sync/reconciler"
)

// blockingReconciler holds every reconcile until its request is released.
type blockingReconciler struct {
	mu      sync.Mutex
	running map[types.NamespacedName]chan struct{}
	calls   []types.NamespacedName
}

func newBlockingReconciler() *blockingReconciler {
	return &blockingReconciler{running: map[types.NamespacedName]chan struct{}{}}
}

func (b *blockingReconciler) Reconcile(_ context.Context, req reconcile.Request) (reconcile.Result, error) {
	release := make(chan struct{})
	b.mu.Lock()
	b.running[req.NamespacedName] = release
	b.calls = append(b.calls, req.NamespacedName)
	b.mu.Unlock()
	<-release
	b.mu.Lock()
	delete(b.running, req.NamespacedName)
	b.mu.Unlock()
	if req.Name == "fails" {
		return reconcile.Result{}, errors.New("boom")
	}
	return reconcile.Result{RequeueAfter: time.Hour}, nil
}

func (b *blockingReconciler) release(nn types.NamespacedName) {
	b.mu.Lock()
	defer b.mu.Unlock()
	close(b.running[nn])
}

func (b *blockingReconciler) inFlight() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.running)
}

func (b *blockingReconciler) called(nn types.NamespacedName) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, c := range b.calls {
		if c == nn {
			return true
		}
	}
	return false
}

type limiterOutcome struct {
	req reconcile.Request
	res reconcile.Result
	err error
}

// TestNamespaceLimiter: with a limit of 2, a tenant's third and later concurrent
// reconciles are turned away at once with a short RequeueAfter — their workers do
// not wait — while another namespace still gets through; a finished reconcile (even
// a failed one) frees its slot, and results and errors pass through unchanged.
func TestNamespaceLimiter(t *testing.T) {
	g := NewWithT(t)
	inner := newBlockingReconciler()
	l := &reconciler.NamespaceLimiter{Inner: inner, Max: 2, RetryAfter: 3 * time.Second}
	done := make(chan limiterOutcome, 16)
	run := func(ns, name string) reconcile.Request {
		req := reconcile.Request{NamespacedName: types.NamespacedName{Namespace: ns, Name: name}}
		go func() {
			res, err := l.Reconcile(context.Background(), req)
			done <- limiterOutcome{req, res, err}
		}()
		return req
	}

	a1, a2 := run("tenant-a", "fails"), run("tenant-a", "two")
	g.Eventually(inner.inFlight).Should(Equal(2))
	g.Expect(l.Running("tenant-a")).To(Equal(2))

	// Over the limit: answered without running, while the first two still run.
	var turnedAway []reconcile.Request
	for i := range 3 {
		turnedAway = append(turnedAway, run("tenant-a", fmt.Sprintf("more-%d", i)))
	}
	for range turnedAway {
		var out limiterOutcome
		g.Eventually(done).Should(Receive(&out))
		g.Expect(out.err).NotTo(HaveOccurred())
		g.Expect(out.res).To(Equal(reconcile.Result{RequeueAfter: 3 * time.Second}))
		g.Expect(turnedAway).To(ContainElement(out.req))
		g.Expect(inner.called(out.req.NamespacedName)).To(BeFalse(), "a turned-away request is not run")
	}
	g.Expect(inner.inFlight()).To(Equal(2), "the first two are still running")

	// Another tenant is not held up by tenant-a.
	b := run("tenant-b", "one")
	g.Eventually(func() bool { return inner.called(b.NamespacedName) }).Should(BeTrue())
	g.Expect(l.Running("tenant-b")).To(Equal(1))

	// A failed reconcile returns its error and frees its slot.
	inner.release(a1.NamespacedName)
	var out limiterOutcome
	g.Eventually(done).Should(Receive(&out))
	g.Expect(out.req).To(Equal(a1))
	g.Expect(out.err).To(MatchError("boom"))
	g.Expect(l.Running("tenant-a")).To(Equal(1))

	a3 := run("tenant-a", "three")
	g.Eventually(func() bool { return inner.called(a3.NamespacedName) }).Should(BeTrue(), "the freed slot is taken")

	for _, req := range []reconcile.Request{a2, a3, b} {
		inner.release(req.NamespacedName)
		g.Eventually(done).Should(Receive(&out))
		g.Expect(out.err).NotTo(HaveOccurred())
		g.Expect(out.res).To(Equal(reconcile.Result{RequeueAfter: time.Hour}), "the inner result passes through")
	}
	g.Expect(l.Running("tenant-a")).To(BeZero())
	g.Expect(l.Running("tenant-b")).To(BeZero())
}

// panickingReconciler panics, as a buggy reconcile might (controller-runtime
// recovers it).
type panickingReconciler struct{}

func (panickingReconciler) Reconcile(context.Context, reconcile.Request) (reconcile.Result, error) {
	panic("bug")
}

// TestNamespaceLimiterPanicFreesSlot: a panicking reconcile does not keep its slot,
// and the defaults apply: a limit below 1 is 1, RetryAfter defaults to 2s.
func TestNamespaceLimiterPanicFreesSlot(t *testing.T) {
	g := NewWithT(t)
	l := reconciler.NewNamespaceLimiter(panickingReconciler{}, 0)
	req := reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "a", Name: "x"}}
	for range 2 {
		g.Expect(func() { _, _ = l.Reconcile(context.Background(), req) }).To(PanicWith("bug"))
		g.Expect(l.Running("a")).To(BeZero())
	}

	inner := newBlockingReconciler()
	l = reconciler.NewNamespaceLimiter(inner, 0)
	go func() { _, _ = l.Reconcile(context.Background(), req) }()
	g.Eventually(inner.inFlight).Should(Equal(1))
	res, err := l.Reconcile(context.Background(), reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "a", Name: "y"}})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(res.RequeueAfter).To(Equal(reconciler.DefaultNamespaceRetryAfter))
	inner.release(req.NamespacedName)
	g.Eventually(func() int { return l.Running("a") }).Should(BeZero())
}
