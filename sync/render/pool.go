package render

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"
)

// ErrRenderWorker: the render worker was stopped or crashed: the render used more memory
// than the pool allows, recursed past the stack bound, or died otherwise. Like every render
// error it is the commit's fault (BuildFailed), and only its own SyncTarget's.
var ErrRenderWorker = errors.New("render worker stopped")

// Defaults of PoolOptions.
const (
	DefaultWorkers           = 2
	DefaultWorkerMemoryLimit = 512 << 20
	DefaultLendFor           = time.Second
	// workerRecycle ends a worker after this many renders, and workerRecycleRSS after a
	// render that left it this large a fraction of its memory bound, so that no render's
	// leftovers weigh on the next.
	workerRecycle = 500
	// timeoutGrace is how long after its own deadline a render may take to say so before
	// its worker is killed.
	timeoutGrace = 2 * time.Second
	// watchInterval is how often a rendering worker's memory is read.
	watchInterval = 10 * time.Millisecond
)

// PoolOptions size a Pool. Zero fields take the defaults.
type PoolOptions struct {
	// Workers bounds the worker processes, hence the renders at once (DefaultWorkers).
	Workers int
	// PerTenant is the share of one tenant (a namespace): the workers its renders are sure
	// of, so that one tenant's slow or hostile renders leave workers to the others (default
	// Workers/2, at least 1). A tenant may use a worker beyond its share while no other
	// tenant waits for one; such a loan is taken back (its render killed and started again
	// within the share) once another tenant has waited LendFor.
	PerTenant int
	// LendFor is how long a tenant waiting within its share lets a worker lent to another
	// tenant finish its render before taking it back (DefaultLendFor).
	LendFor time.Duration
	// MemoryLimit bounds a worker's resident memory while it renders, in bytes
	// (DefaultWorkerMemoryLimit); past it the worker is killed and the render fails.
	MemoryLimit int64
	// Command starts a worker: the program and its arguments (default: this executable,
	// which must call ServeWorkerIfAsked first thing).
	Command []string
	// Stopped, when set, is told of every worker the pool killed or lost during a render:
	// the tenant and why ("memory", "timeout", "stack", "crash").
	Stopped func(tenant, reason string)
}

func (o PoolOptions) withDefaults() PoolOptions {
	if o.Workers <= 0 {
		o.Workers = DefaultWorkers
	}
	if o.PerTenant <= 0 {
		o.PerTenant = max(1, o.Workers/2)
	}
	o.PerTenant = min(o.PerTenant, o.Workers)
	if o.LendFor <= 0 {
		o.LendFor = DefaultLendFor
	}
	if o.MemoryLimit <= 0 {
		o.MemoryLimit = DefaultWorkerMemoryLimit
	}
	return o
}

// Pool renders in worker processes, so that what a template does costs only its own
// render: a worker is bounded in memory (its resident size is watched, its heap and
// address space limited), in stack depth (WorkerStack) and in time (killed at the render's
// deadline), and runs on one core. A worker that crashes or is killed fails that render
// with a clear *Error and is replaced; nothing of it reaches the caller's process. Workers
// are reused between renders while they stay small. Safe for concurrent use.
type Pool struct {
	opts PoolOptions

	mu      sync.Mutex
	idle    []*workerProc
	busy    int                     // leases held
	tenants map[string]*tenantState // tenants holding or waiting for a lease
	lent    map[*lease]struct{}     // leases beyond their tenant's share
	changed chan struct{}           // closed, and replaced, when a lease ends or is taken back
	closed  bool
}

// tenantState counts a tenant's leases and its renders waiting for one.
type tenantState struct {
	held, waiting int
}

// lease is a render's right to a worker.
type lease struct {
	tenant string
	lent   bool
	since  time.Time
	// cancel ends the render holding the lease; takenBack says that the pool did it.
	cancel    context.CancelFunc
	takenBack bool
}

// NewPool returns a pool; workers start when first needed.
func NewPool(opts PoolOptions) (*Pool, error) {
	opts = opts.withDefaults()
	if len(opts.Command) == 0 {
		exe, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("render workers: finding this executable: %w", err)
		}
		opts.Command = []string{exe}
	}
	return &Pool{opts: opts, tenants: map[string]*tenantState{}, lent: map[*lease]struct{}{},
		changed: make(chan struct{})}, nil
}

// Close ends the idle workers; renders under way end with their own.
func (p *Pool) Close() {
	p.mu.Lock()
	idle := p.idle
	p.idle, p.closed = nil, true
	p.mu.Unlock()
	for _, w := range idle {
		w.kill()
	}
}

// Render is the package's Render in a worker process, for tenant (the SyncTarget's
// namespace: its renders share PerTenant workers). It returns what Render would, and
// an *Error of class ErrRenderWorker when the worker is killed or dies, or
// ErrRenderTimeout when it passes the render's deadline. A render on a lent worker that
// the pool takes back is started again within the tenant's share.
func (p *Pool) Render(ctx context.Context, tenant string, opts Options) (*Result, error) {
	for mayBorrow := true; ; mayBorrow = false {
		l, rctx, err := p.acquire(ctx, tenant, mayBorrow)
		if err != nil {
			return nil, err
		}
		res, err := p.renderOn(rctx, tenant, opts)
		// A render ended by the take-back (its worker killed, or its lookups cancelled) runs
		// again; one that finished first stands.
		if p.release(l) && ctx.Err() == nil && err != nil {
			continue
		}
		return res, err
	}
}

// renderOn renders on an idle worker, or a new one.
func (p *Pool) renderOn(ctx context.Context, tenant string, opts Options) (*Result, error) {
	w, err := p.worker()
	if err != nil {
		return nil, workerError(err.Error())
	}
	timeout := opts.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	res, reason, err := w.render(ctx, opts, timeout, p.opts.MemoryLimit)
	if reason != "" && p.opts.Stopped != nil {
		p.opts.Stopped(tenant, reason)
	}
	p.put(w)
	return res, err
}

// acquire waits for a lease for tenant: within its share, or lent beyond it when
// mayBorrow and no other tenant waits within its own. A tenant waiting within its share
// takes back the oldest lent lease that has held its worker LendFor. The context
// returned ends when the lease is taken back.
func (p *Pool) acquire(ctx context.Context, tenant string, mayBorrow bool) (*lease, context.Context, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	t := p.tenants[tenant]
	if t == nil {
		t = &tenantState{}
		p.tenants[tenant] = t
	}
	t.waiting++
	defer func() {
		t.waiting--
		p.forget(tenant, t)
	}()
	for {
		if p.closed {
			return nil, nil, workerError("render workers are closed")
		}
		free := p.busy < p.opts.Workers
		var wait time.Duration
		switch within := t.held < p.opts.PerTenant; {
		case within && free, !within && free && mayBorrow && !p.othersWaiting(tenant):
			return p.lease(ctx, tenant, t, !within)
		case within:
			wait = p.takeBack(tenant)
		}
		changed := p.changed
		p.mu.Unlock()
		err := waitFor(ctx, changed, wait)
		p.mu.Lock()
		if err != nil {
			return nil, nil, err
		}
	}
}

// lease gives tenant a worker.
func (p *Pool) lease(ctx context.Context, tenant string, t *tenantState, lent bool) (*lease, context.Context, error) {
	rctx, cancel := context.WithCancel(ctx)
	l := &lease{tenant: tenant, lent: lent, since: time.Now(), cancel: cancel}
	p.busy++
	t.held++
	if lent {
		p.lent[l] = struct{}{}
	}
	return l, rctx, nil
}

// takeBack ends the render on the oldest worker lent to another tenant than this one
// once it has held it LendFor, or says how long until it will have.
func (p *Pool) takeBack(tenant string) time.Duration {
	var oldest *lease
	for l := range p.lent {
		if l.tenant != tenant && (oldest == nil || l.since.Before(oldest.since)) {
			oldest = l
		}
	}
	if oldest == nil {
		return 0
	}
	if left := p.opts.LendFor - time.Since(oldest.since); left > 0 {
		return left
	}
	delete(p.lent, oldest)
	oldest.takenBack = true
	oldest.cancel()
	return 0
}

// othersWaiting says whether a tenant other than this one waits within its share.
func (p *Pool) othersWaiting(tenant string) bool {
	for name, t := range p.tenants {
		if name != tenant && t.waiting > 0 && t.held < p.opts.PerTenant {
			return true
		}
	}
	return false
}

// release ends l and says whether it was taken back.
func (p *Pool) release(l *lease) bool {
	l.cancel()
	p.mu.Lock()
	defer p.mu.Unlock()
	p.busy--
	t := p.tenants[l.tenant]
	t.held--
	p.forget(l.tenant, t)
	if _, ok := p.lent[l]; ok {
		delete(p.lent, l)
	} else if !l.lent {
		// A share's worker is free again: a worker lent to the same tenant is now its share.
		for other := range p.lent {
			if other.tenant == l.tenant {
				delete(p.lent, other)
				other.lent = false
				break
			}
		}
	}
	close(p.changed)
	p.changed = make(chan struct{})
	return l.takenBack
}

// forget drops a tenant that holds and waits for nothing.
func (p *Pool) forget(name string, t *tenantState) {
	if t.held == 0 && t.waiting == 0 {
		delete(p.tenants, name)
	}
}

// waitFor waits until changed is closed, for at most wait when it is positive.
func waitFor(ctx context.Context, changed <-chan struct{}, wait time.Duration) error {
	var timeout <-chan time.Time
	if wait > 0 {
		timer := time.NewTimer(wait)
		defer timer.Stop()
		timeout = timer.C
	}
	select {
	case <-changed:
	case <-timeout:
	case <-ctx.Done():
		return ctx.Err()
	}
	return nil
}

// worker is an idle worker, or a new one.
func (p *Pool) worker() (*workerProc, error) {
	p.mu.Lock()
	if n := len(p.idle); n > 0 {
		w := p.idle[n-1]
		p.idle = p.idle[:n-1]
		p.mu.Unlock()
		return w, nil
	}
	p.mu.Unlock()
	return startWorker(p.opts.Command, p.opts.MemoryLimit)
}

// put keeps w for the next render, or ends it when it is dead, dirty, old or large.
func (p *Pool) put(w *workerProc) {
	keep := !w.done() && w.renders < workerRecycle && residentBytes(w.pid()) < p.opts.MemoryLimit/2
	p.mu.Lock()
	if keep && !p.closed && len(p.idle) < p.opts.Workers {
		p.idle = append(p.idle, w)
		p.mu.Unlock()
		return
	}
	p.mu.Unlock()
	w.kill()
}
