package notify

import (
	"context"
	"net/http"
	gosync "sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
)

// Options tune delivery. Zero values take the defaults.
type Options struct {
	// Clock times backoff and rate limits (tests inject a fake one).
	Clock clock.Clock
	// HTTPClient sends the requests; it must not follow redirects (a redirect could carry
	// a token to another host). Default: 15 s timeout, no redirects.
	HTTPClient *http.Client
	// MaxTries of one notification before it is given up (default 8).
	MaxTries int
	// BaseBackoff and MaxBackoff bound the exponential backoff (default 1s and 5m).
	BaseBackoff, MaxBackoff time.Duration
	// Jitter returns a number in [0,1) (default math/rand).
	Jitter func() float64
	// QueueSize bounds the notifications one Notifier holds at once (default 256).
	QueueSize int
	// RateLimit per second and RateBurst of the requests of one Notifier to one host;
	// default 2/s, burst 10; negative: no limit.
	RateLimit float64
	RateBurst int
	// StopTimeout bounds the wait for a worker to end when its Notifier goes or the daemon
	// stops (default 10s); a worker still busy then is left to end on its own.
	StopTimeout time.Duration
}

func (o *Options) defaults() {
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	if o.HTTPClient == nil {
		o.HTTPClient = &http.Client{Timeout: 15 * time.Second,
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	}
	if o.MaxTries <= 0 {
		o.MaxTries = 8
	}
	if o.BaseBackoff <= 0 {
		o.BaseBackoff = time.Second
	}
	if o.MaxBackoff <= 0 {
		o.MaxBackoff = 5 * time.Minute
	}
	if o.QueueSize <= 0 {
		o.QueueSize = 256
	}
	if o.RateLimit == 0 {
		o.RateLimit, o.RateBurst = 2, 10
	}
	if o.StopTimeout <= 0 {
		o.StopTimeout = 10 * time.Second
	}
}

// Reconciler runs one delivery worker per Notifier. It watches SyncTargets and wakes the
// workers of their namespace; the sync reconciler knows nothing of it.
type Reconciler struct {
	Client    client.Client
	APIReader client.Reader
	opts      Options
	// events holds the DriftCorrected Events of SyncTargets (nil: drift is not reported).
	events client.Reader
	log    logr.Logger

	base    context.Context
	mu      gosync.Mutex
	workers map[types.NamespacedName]*worker
	limits  *limiters
}

// NewReconciler returns a Notifier reconciler; SetupWithManager wires it.
func NewReconciler(c client.Client, apiReader client.Reader, o Options) *Reconciler {
	o.defaults()
	return &Reconciler{Client: c, APIReader: apiReader, opts: o,
		workers: map[types.NamespacedName]*worker{}, limits: newLimiters(o.RateLimit, o.RateBurst)}
}

// SetupWithManager registers the controller (leader only, like the sync controller), its
// cache of drift correction Events and the SyncTarget readiness metric.
func SetupWithManager(mgr ctrl.Manager, o Options) (*Reconciler, error) {
	r := NewReconciler(mgr.GetClient(), mgr.GetAPIReader(), o)
	r.log = mgr.GetLogger().WithName("notifier")
	reader := client.Reader(mgr.GetClient())
	ready.reader.Store(&reader)
	if err := mgr.Add(r); err != nil {
		return nil, err
	}
	events, err := newDriftEventCache(mgr)
	if err != nil {
		return nil, err
	}
	r.events = events
	return r, ctrl.NewControllerManagedBy(mgr).
		Named("notifier").
		For(&convergev1.Notifier{}).
		Watches(&convergev1.SyncTarget{}, handler.EnqueueRequestsFromMapFunc(r.notifiersOf)).
		WatchesRawSource(source.Kind[client.Object](events, &corev1.Event{}, handler.EnqueueRequestsFromMapFunc(r.notifiersOf))).
		Complete(r)
}

// Start holds the context the workers run in: the manager's (as leader).
func (r *Reconciler) Start(ctx context.Context) error {
	r.mu.Lock()
	r.base = ctx
	for _, w := range r.workers {
		w.poke()
	}
	r.mu.Unlock()
	<-ctx.Done()
	r.mu.Lock()
	ws := make([]*worker, 0, len(r.workers))
	for _, w := range r.workers {
		ws = append(ws, w)
	}
	r.mu.Unlock()
	r.awaitWorkers(ws...)
	return nil
}

// awaitWorkers waits for the workers (already told to stop) to end, at most StopTimeout on
// the injected clock all told; a worker still busy then is logged and left to end on its own.
func (r *Reconciler) awaitWorkers(ws ...*worker) {
	deadline := r.opts.Clock.NewTimer(r.opts.StopTimeout)
	defer deadline.Stop()
	for _, w := range ws {
		select {
		case <-w.done:
		case <-deadline.C():
			r.log.Info("a notifier's worker did not stop in time; leaving it", "notifier", w.key.String(),
				"timeout", r.opts.StopTimeout)
			return
		}
	}
}

// notifiersOf maps a SyncTarget to the Notifiers of its namespace.
func (r *Reconciler) notifiersOf(ctx context.Context, o client.Object) []reconcile.Request {
	var list convergev1.NotifierList
	if err := r.Client.List(ctx, &list, client.InNamespace(o.GetNamespace())); err != nil {
		return nil
	}
	reqs := make([]reconcile.Request, 0, len(list.Items))
	for _, n := range list.Items {
		reqs = append(reqs, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: n.Namespace, Name: n.Name}})
	}
	return reqs
}

// Reconcile hands the Notifier to its worker (started on first sight), or stops the worker
// of a Notifier that is gone.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var n convergev1.Notifier
	if err := r.Client.Get(ctx, req.NamespacedName, &n); err != nil {
		if apierrors.IsNotFound(err) {
			r.stopWorker(req.NamespacedName)
			return ctrl.Result{}, nil
		}
		return ctrl.Result{}, err
	}
	if !n.DeletionTimestamp.IsZero() {
		r.stopWorker(req.NamespacedName)
		return ctrl.Result{}, nil
	}
	if err := validate(&n); err != nil {
		r.stopWorker(req.NamespacedName)
		return ctrl.Result{}, r.invalid(ctx, &n, err)
	}
	w := r.workerFor(ctx, &n)
	if w == nil { // the manager has not started the workers' context yet
		return ctrl.Result{RequeueAfter: 100 * time.Millisecond}, nil
	}
	w.update(&n)
	return ctrl.Result{}, nil
}

// workerFor returns the Notifier's worker, started in the manager's context; nil before
// the manager started it.
func (r *Reconciler) workerFor(ctx context.Context, n *convergev1.Notifier) *worker {
	key := client.ObjectKeyFromObject(n)
	r.mu.Lock()
	defer r.mu.Unlock()
	if w, ok := r.workers[key]; ok {
		return w
	}
	base := r.base
	if base == nil {
		return nil
	}
	log := r.log
	if log.GetSink() == nil {
		log = ctrl.LoggerFrom(ctx)
	}
	wctx, cancel := context.WithCancel(ctrl.LoggerInto(base, log))
	w := &worker{r: r, key: key, wake: make(chan struct{}, 1), done: make(chan struct{}), stop: cancel,
		notifier: n.DeepCopy()} // set before it runs: the loop reads it first thing
	r.workers[key] = w
	go w.run(wctx)
	return w
}

func (r *Reconciler) stopWorker(key types.NamespacedName) {
	r.mu.Lock()
	w, ok := r.workers[key]
	delete(r.workers, key)
	r.mu.Unlock()
	if ok {
		w.stop()
		r.awaitWorkers(w)
	}
}
