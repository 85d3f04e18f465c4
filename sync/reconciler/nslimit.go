package reconciler

import (
	"context"
	"sync"
	"time"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// DefaultNamespaceRetryAfter is how soon a reconcile turned away by a
// NamespaceLimiter is tried again. Short: a slot frees as soon as one of the namespace's
// reconciles ends, and a turned-away request costs only a queue operation. (With 2 s, 100
// SyncTargets of one namespace took twice as long to become Ready in the benchmark.)
const DefaultNamespaceRetryAfter = 100 * time.Millisecond

// NamespaceLimiter wraps a reconciler so that one namespace — one tenant — cannot
// occupy every worker, with many SyncTargets or with renders that run to their
// deadline: at most Max reconciles of one namespace run at once. A request over the
// limit is not run and does not wait: it is answered at once with RequeueAfter
// (and no error, so no backoff builds up), and its worker moves on to other
// namespaces' requests.
type NamespaceLimiter struct {
	// Inner is the reconciler that does the work.
	Inner reconcile.Reconciler
	// Max is the number of reconciles of one namespace that may run at once;
	// below 1 it is taken as 1.
	Max int
	// RetryAfter is the RequeueAfter of a request turned away;
	// DefaultNamespaceRetryAfter when zero.
	RetryAfter time.Duration

	mu     sync.Mutex
	active map[string]int // running reconciles per namespace; absent when none
}

// NewNamespaceLimiter wraps inner, admitting max reconciles per namespace at once.
func NewNamespaceLimiter(inner reconcile.Reconciler, max int) *NamespaceLimiter {
	return &NamespaceLimiter{Inner: inner, Max: max}
}

var _ reconcile.Reconciler = (*NamespaceLimiter)(nil)

// Reconcile runs the inner reconciler when req's namespace is below its limit, and
// otherwise asks to be called again after RetryAfter.
func (l *NamespaceLimiter) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	if !l.acquire(req.Namespace) {
		ctrl.LoggerFrom(ctx).V(1).Info("namespace at its concurrency limit, retrying later", "limit", l.limit())
		return reconcile.Result{RequeueAfter: l.retryAfter()}, nil
	}
	defer l.release(req.Namespace) // also when Inner panics (controller-runtime recovers)
	return l.Inner.Reconcile(ctx, req)
}

// Running returns how many reconciles of namespace are running.
func (l *NamespaceLimiter) Running(namespace string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.active[namespace]
}

func (l *NamespaceLimiter) limit() int {
	return max(l.Max, 1)
}

func (l *NamespaceLimiter) retryAfter() time.Duration {
	if l.RetryAfter > 0 {
		return l.RetryAfter
	}
	return DefaultNamespaceRetryAfter
}

func (l *NamespaceLimiter) acquire(namespace string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.active[namespace] >= l.limit() {
		return false
	}
	if l.active == nil {
		l.active = map[string]int{}
	}
	l.active[namespace]++
	return true
}

func (l *NamespaceLimiter) release(namespace string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.active[namespace] <= 1 {
		delete(l.active, namespace)
		return
	}
	l.active[namespace]--
}
