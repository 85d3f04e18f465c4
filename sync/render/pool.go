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
	// PerTenant bounds the renders of one tenant (a namespace) at once, so that one tenant's
	// slow or hostile renders leave workers to the others (default Workers/2, at least 1).
	PerTenant int
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
	opts  PoolOptions
	slots chan struct{}

	mu      sync.Mutex
	idle    []*workerProc
	tenants map[string]*tenantSlots
	closed  bool
}

type tenantSlots struct {
	slots chan struct{}
	users int
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
	return &Pool{opts: opts, slots: make(chan struct{}, opts.Workers), tenants: map[string]*tenantSlots{}}, nil
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
// ErrRenderTimeout when it passes the render's deadline.
func (p *Pool) Render(ctx context.Context, tenant string, opts Options) (*Result, error) {
	release, err := p.acquire(ctx, tenant)
	if err != nil {
		return nil, err
	}
	defer release()
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

// acquire waits for a slot of tenant's and one of the pool's.
func (p *Pool) acquire(ctx context.Context, tenant string) (func(), error) {
	p.mu.Lock()
	t := p.tenants[tenant]
	if t == nil {
		t = &tenantSlots{slots: make(chan struct{}, p.opts.PerTenant)}
		p.tenants[tenant] = t
	}
	t.users++
	p.mu.Unlock()
	leave := func() {
		p.mu.Lock()
		if t.users--; t.users == 0 {
			delete(p.tenants, tenant)
		}
		p.mu.Unlock()
	}
	select {
	case t.slots <- struct{}{}:
	case <-ctx.Done():
		leave()
		return nil, ctx.Err()
	}
	select {
	case p.slots <- struct{}{}:
	case <-ctx.Done():
		<-t.slots
		leave()
		return nil, ctx.Err()
	}
	return func() {
		<-p.slots
		<-t.slots
		leave()
	}, nil
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
