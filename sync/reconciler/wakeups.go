package reconciler

import (
	"sync"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
)

// refreshes is the bookkeeping the fetchers share of the reconciles users asked for
// (ResolveFresh): for each SyncTarget, the time of the newest request a poll was
// triggered for, so that a request triggers one poll however often it is looked at.
type refreshes struct {
	mu    sync.Mutex
	asked map[string]time.Time // SyncTarget → the request a poll was triggered for
}

// ask records a request of id made at since and reports whether a poll must be
// triggered for it: not when one was for this request or a newer one. When the trigger
// fails, call forget so that the next look tries again.
func (r *refreshes) ask(id string, since time.Time) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.asked == nil {
		r.asked = map[string]time.Time{}
	}
	if t, ok := r.asked[id]; ok && !t.Before(since) {
		return false
	}
	r.asked[id] = since
	return true
}

// answered reports whether a poll that ended at end answers a request of id waiting for
// one, and forgets the request then.
func (r *refreshes) answered(id string, end time.Time) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	since, ok := r.asked[id]
	if !ok || end.Before(since) {
		return false
	}
	delete(r.asked, id)
	return true
}

// forget drops what was asked for id.
func (r *refreshes) forget(id string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.asked, id)
}

// Wakes is how a fetcher wakes SyncTargets; embedded, it implements Fetcher.Wakeups.
type Wakes struct {
	// Wake receives a SyncTarget whose source has news (a new revision or version, a new
	// error), or whose reconcile asked for a poll that ended.
	Wake chan event.GenericEvent
}

// Wakeups implements Fetcher: Wake.
func (w Wakes) Wakeups() <-chan event.GenericEvent {
	if w.Wake == nil {
		return nil
	}
	return w.Wake
}

// wake asks for a reconcile of the SyncTarget key through Wake (none when nil). A full
// queue drops it: the periodic reconcile picks the news up.
func (w Wakes) wake(key client.ObjectKey) {
	if w.Wake == nil {
		return
	}
	st := &convergev1.SyncTarget{}
	st.Namespace, st.Name = key.Namespace, key.Name
	select {
	case w.Wake <- event.GenericEvent{Object: st}:
	default:
	}
}
