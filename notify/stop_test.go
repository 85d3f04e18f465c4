package notify

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
	ctrl "sigs.k8s.io/controller-runtime"
)

// TestStopWaitsForAWorkerAtMostStopTimeout: deleting a Notifier, and the daemon stopping,
// wait for a worker that does not end at most StopTimeout (10s) on the fake clock; a
// worker that ends is not waited for longer.
func TestStopWaitsForAWorkerAtMostStopTimeout(t *testing.T) {
	g := NewWithT(t)
	clk := clocktesting.NewFakeClock(t0)
	r, _ := unitReconciler(clk, Options{})
	stuck := func(name string) *worker { // a worker that never ends
		w := &worker{r: r, key: types.NamespacedName{Namespace: "shop", Name: name}, done: make(chan struct{}), stop: func() {}}
		r.workers[w.key] = w
		return w
	}

	ends := &worker{r: r, key: types.NamespacedName{Namespace: "shop", Name: "ends"}, done: make(chan struct{})}
	ends.stop = func() { close(ends.done) }
	r.workers[ends.key] = ends
	_, err := r.Reconcile(context.Background(), ctrl.Request{NamespacedName: ends.key}) // not found: deleted
	g.Expect(err).NotTo(HaveOccurred())

	w := stuck("deleted")
	deleted := make(chan struct{})
	go func() {
		_, _ = r.Reconcile(context.Background(), ctrl.Request{NamespacedName: w.key})
		close(deleted)
	}()
	g.Eventually(clk.HasWaiters).Should(BeTrue())
	clk.Step(10 * time.Second)
	g.Eventually(deleted).Should(BeClosed(), "the deletion waited for ever")

	stuck("a")
	stuck("b")
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan struct{})
	go func() {
		_ = r.Start(ctx)
		close(stopped)
	}()
	cancel()
	g.Eventually(clk.HasWaiters).Should(BeTrue())
	clk.Step(10 * time.Second)
	g.Eventually(stopped).Should(BeClosed(), "the shutdown waited for ever")
}
