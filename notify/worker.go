package notify

import (
	"context"
	"fmt"
	"slices"
	gosync "sync"

	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
)

// worker delivers the notifications of one Notifier, one at a time and in order, in a
// goroutine of its own: a sync never waits for it. Its queue is derived from the
// SyncTargets' status and the cursors of what it delivered, so it is bounded, and a
// restart re-derives exactly what was not delivered yet.
type worker struct {
	r    *Reconciler
	key  types.NamespacedName
	wake chan struct{}
	done chan struct{}
	stop context.CancelFunc

	mu       gosync.Mutex
	notifier *convergev1.Notifier // the spec as last reconciled

	// Owned by the loop goroutine.
	status  convergev1.NotifierStatus // as last written
	written bool                      // status is in the API server
	depth   int
}

// update hands the worker the Notifier as last seen, and wakes it.
func (w *worker) update(n *convergev1.Notifier) {
	w.mu.Lock()
	w.notifier = n.DeepCopy()
	w.mu.Unlock()
	w.poke()
}

func (w *worker) poke() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

func (w *worker) spec() *convergev1.Notifier {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.notifier
}

// run loads the cursors from the Notifier's status (read from the API server, not the
// cache), then derives and delivers until ctx ends.
func (w *worker) run(ctx context.Context) {
	defer close(w.done)
	defer w.setDepth(0)
	log := ctrl.LoggerFrom(ctx).WithValues("notifier", w.key.String())
	ctx = ctrl.LoggerInto(ctx, log)
	for !w.load(ctx) {
		if !w.sleep(ctx, w.r.opts.BaseBackoff) {
			return
		}
	}
	for ctx.Err() == nil {
		n := w.spec()
		items, targets, err := w.collect(ctx, n)
		if err != nil {
			log.Error(err, "listing SyncTargets")
			w.sleep(ctx, w.r.opts.BaseBackoff)
			continue
		}
		w.setDepth(len(items))
		if len(items) == 0 {
			w.prune(targets)
			w.flush(ctx, n)
			select {
			case <-ctx.Done():
			case <-w.wake:
			}
			continue
		}
		w.process(ctx, n, items[0])
	}
}

// load reads the status: the cursors and counters of the last instance.
func (w *worker) load(ctx context.Context) bool {
	var n convergev1.Notifier
	if err := w.r.APIReader.Get(ctx, w.key, &n); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "reading the Notifier")
		return false
	}
	w.status, w.written = *n.Status.DeepCopy(), true
	return true
}

// collect derives what is to be delivered, oldest first per SyncTarget, at most the
// queue size; the rest is derived again once those are delivered.
func (w *worker) collect(ctx context.Context, n *convergev1.Notifier) ([]item, map[string]bool, error) {
	sel := labels.Everything()
	if n.Spec.TargetSelector != nil {
		s, err := metav1.LabelSelectorAsSelector(n.Spec.TargetSelector)
		if err != nil { // the reconciler stops the worker of such a spec first
			return nil, nil, fmt.Errorf("spec.targetSelector: %w", err)
		}
		sel = s
	}
	var list convergev1.SyncTargetList
	if err := w.r.Client.List(ctx, &list, client.InNamespace(n.Namespace), client.MatchingLabelsSelector{Selector: sel}); err != nil {
		return nil, nil, err
	}
	slices.SortFunc(list.Items, func(a, b convergev1.SyncTarget) int { return cmpString(a.Name, b.Name) })
	drift, err := w.r.driftEvents(ctx, n.Namespace)
	if err != nil {
		return nil, nil, err
	}
	targets := map[string]bool{}
	var items []item
	for i := range list.Items {
		st := &list.Items[i]
		targets[st.Name] = true
		items = append(items, pendingFor(n, st, w.cursor(st.Name), n.CreationTimestamp.Time, drift)...)
		if len(items) >= w.r.opts.QueueSize {
			return items[:w.r.opts.QueueSize], targets, nil
		}
	}
	return items, targets, nil
}

func cmpString(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func (w *worker) cursor(target string) convergev1.NotificationCursor {
	for _, c := range w.status.Targets {
		if c.Name == target {
			return c
		}
	}
	return convergev1.NotificationCursor{Name: target}
}

func (w *worker) setCursor(c convergev1.NotificationCursor) {
	for i := range w.status.Targets {
		if w.status.Targets[i].Name == c.Name {
			w.status.Targets[i] = c
			return
		}
	}
	w.status.Targets = append(w.status.Targets, c)
	slices.SortFunc(w.status.Targets, func(a, b convergev1.NotificationCursor) int { return cmpString(a.Name, b.Name) })
}

// prune drops the cursors of SyncTargets that are gone or no longer selected.
func (w *worker) prune(targets map[string]bool) {
	kept := w.status.Targets[:0:0]
	for _, c := range w.status.Targets {
		if targets[c.Name] {
			kept = append(kept, c)
		}
	}
	if len(kept) != len(w.status.Targets) {
		w.status.Targets, w.written = kept, false
	}
}

func (w *worker) setDepth(d int) {
	queueDepth.Add(float64(d - w.depth))
	w.depth = d
}

// setReady sets the Ready condition.
func (w *worker) setReady(n *convergev1.Notifier, status metav1.ConditionStatus, reason, msg string) {
	if apimeta.SetStatusCondition(&w.status.Conditions, metav1.Condition{Type: convergev1.ReadyCondition,
		Status: status, Reason: reason, Message: cut(msg, 1000), ObservedGeneration: n.Generation}) {
		w.written = false
	}
}

// flush writes the status when it changed since the last write; a failed write is tried
// again at the next one. Only this worker writes the Notifier's status.
func (w *worker) flush(ctx context.Context, n *convergev1.Notifier) {
	if w.status.ObservedGeneration != n.Generation {
		w.status.ObservedGeneration, w.written = n.Generation, false
	}
	if c := apimeta.FindStatusCondition(w.status.Conditions, convergev1.ReadyCondition); c == nil ||
		c.Reason == convergev1.InvalidSpecReason { // the worker runs: the spec is valid now
		w.setReady(n, metav1.ConditionTrue, convergev1.SucceededReason, "waiting for events")
	}
	if w.written {
		return
	}
	obj := &convergev1.Notifier{ObjectMeta: metav1.ObjectMeta{Namespace: w.key.Namespace, Name: w.key.Name}}
	body, err := statusPatch(w.status)
	if err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "encoding the Notifier's status")
		return
	}
	if err := w.r.Client.Status().Patch(ctx, obj, client.RawPatch(types.MergePatchType, body)); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "writing the Notifier's status")
		return
	}
	w.written = true
}
