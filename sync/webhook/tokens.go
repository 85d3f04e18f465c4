package webhook

import (
	"context"
	"sync"
	"time"

	"k8s.io/utils/clock"
)

// DefaultTokenTTL is how long the webhook receiver uses a token (or a source key) it
// read from the API server before it reads it again.
const DefaultTokenTTL = 30 * time.Second

// webhookLoadTimeout bounds one read of the API server for the webhook receiver.
const webhookLoadTimeout = 10 * time.Second

// ttlCache remembers the outcome of a lookup by key, value or error, for ttl, and has concurrent
// callers of one key share one lookup. It serves the webhook receiver, which must not read
// the API server once per request: a flood of requests costs at most one read per key and
// ttl, whatever their number, and a failed read is remembered too, so that a missing or
// forbidden Secret costs no more than a present one.
//
// Why not an informer: the locked-down daemon may only get Secrets by name, not list or watch
// them (config/rbac/multi-tenant), and watching every Secret of the cluster to use a few would
// hold them all in memory. A Secret updated is therefore seen within ttl, not at once.
type ttlCache[V any] struct {
	ttl   time.Duration
	clock clock.PassiveClock

	mu        sync.Mutex
	entries   map[string]*ttlEntry[V]
	lastSweep time.Time
}

type ttlEntry[V any] struct {
	done    chan struct{} // closed once val and err are set
	val     V
	err     error
	expires time.Time // zero while loading
}

func newTTLCache[V any](ttl time.Duration, clk clock.PassiveClock) *ttlCache[V] {
	return &ttlCache[V]{ttl: ttl, clock: clk, entries: map[string]*ttlEntry[V]{}, lastSweep: clk.Now()}
}

// get returns what load said for k less than ttl ago, or calls it. load runs with ctx's values
// but not its cancellation, so that the request that happens to start a shared lookup cannot
// cancel it for the others.
func (c *ttlCache[V]) get(ctx context.Context, k string, load func(context.Context) (V, error)) (V, error) {
	c.mu.Lock()
	now := c.clock.Now()
	if now.Sub(c.lastSweep) >= c.ttl {
		c.sweep(now)
	}
	e, ok := c.entries[k]
	if !ok || (!e.expires.IsZero() && !now.Before(e.expires)) {
		e = &ttlEntry[V]{done: make(chan struct{})}
		c.entries[k] = e
		c.mu.Unlock()
		loadCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), webhookLoadTimeout)
		v, err := load(loadCtx)
		cancel()
		c.mu.Lock()
		e.val, e.err, e.expires = v, err, c.clock.Now().Add(c.ttl)
		close(e.done)
		c.mu.Unlock()
		return v, err
	}
	c.mu.Unlock()
	select {
	case <-e.done:
		return e.val, e.err
	case <-ctx.Done():
		var zero V
		return zero, ctx.Err()
	}
}

// sweep drops the expired entries, so that the keys no longer asked for go.
func (c *ttlCache[V]) sweep(now time.Time) {
	for k, e := range c.entries {
		if !e.expires.IsZero() && !now.Before(e.expires) {
			delete(c.entries, k)
		}
	}
	c.lastSweep = now
}
