package notify

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/fields"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
)

// DriftCorrectedReason is the reason of the Event the sync reconciler emits when it
// restored objects changed outside Git. Nothing else records a drift correction durably,
// so drift notifications are read from these Events: the event recorder folds repeats
// within minutes into one Event whose series count it updates, so a burst of corrections
// makes one or a few notifications, not one each.
const DriftCorrectedReason = "DriftCorrected"

// driftEventSelector narrows the Events cache to drift corrections of SyncTargets.
var driftEventSelector = fields.SelectorFromSet(fields.Set{
	"reason": DriftCorrectedReason, "involvedObject.kind": convergev1.SyncTargetKind,
})

// newDriftEventCache returns a cache of the DriftCorrected Events of SyncTargets only,
// started with the manager's caches.
func newDriftEventCache(mgr ctrl.Manager) (cache.Cache, error) {
	c, err := cache.New(mgr.GetConfig(), cache.Options{
		Scheme: mgr.GetScheme(), Mapper: mgr.GetRESTMapper(),
		ByObject: map[client.Object]cache.ByObject{&corev1.Event{}: {Field: driftEventSelector}},
	})
	if err != nil {
		return nil, fmt.Errorf("creating the drift events cache: %w", err)
	}
	if err := mgr.Add(eventCache{c}); err != nil {
		return nil, err
	}
	return c, nil
}

// eventCache runs with the manager's caches.
type eventCache struct{ cache.Cache }

// GetCache has the manager start the cache with its own and wait for it to sync.
func (c eventCache) GetCache() cache.Cache { return c.Cache }

// driftItem is the newest drift correction of st not yet reported, if any: one per look,
// so that corrections in a burst make one notification.
func driftItem(st *convergev1.SyncTarget, evs []corev1.Event, cur convergev1.NotificationCursor, since time.Time) (string, Message, bool) {
	var newest *corev1.Event
	for i := range evs {
		e := &evs[i]
		if e.Reason != DriftCorrectedReason || e.InvolvedObject.Kind != convergev1.SyncTargetKind ||
			e.InvolvedObject.Name != st.Name || (e.InvolvedObject.UID != "" && e.InvolvedObject.UID != st.UID) {
			continue
		}
		if newest == nil || lastSeen(e).After(lastSeen(newest)) {
			newest = e
		}
	}
	if newest == nil || lastSeen(newest).Before(since) {
		return "", Message{}, false
	}
	count := seriesCount(newest)
	key := fmt.Sprintf("%s/%d", newest.UID, count)
	if key == cur.Drift {
		return "", Message{}, false
	}
	msg := newest.Message
	if count > 1 {
		msg = fmt.Sprintf("%s (%d times since %s)", msg, count, eventTime(newest).UTC().Format(time.RFC3339))
	}
	return key, Message{Event: convergev1.EventDriftCorrected, Revision: st.Status.LastAppliedRevision, Message: msg}, true
}

// eventTime is when an Event was first seen.
func eventTime(e *corev1.Event) time.Time {
	switch {
	case !e.EventTime.IsZero():
		return e.EventTime.Time
	case !e.FirstTimestamp.IsZero():
		return e.FirstTimestamp.Time
	}
	return e.CreationTimestamp.Time
}

// lastSeen is when an Event (or its series) was last observed.
func lastSeen(e *corev1.Event) time.Time {
	switch {
	case e.Series != nil && !e.Series.LastObservedTime.IsZero():
		return e.Series.LastObservedTime.Time
	case !e.LastTimestamp.IsZero():
		return e.LastTimestamp.Time
	}
	return eventTime(e)
}

// seriesCount is how many times the Event happened.
func seriesCount(e *corev1.Event) int32 {
	switch {
	case e.Series != nil && e.Series.Count > 0:
		return e.Series.Count
	case e.Count > 0:
		return e.Count
	}
	return 1
}

// driftEvents lists the DriftCorrected Events of a namespace from the events cache.
func (r *Reconciler) driftEvents(ctx context.Context, namespace string) ([]corev1.Event, error) {
	if r.events == nil {
		return nil, nil
	}
	var list corev1.EventList
	if err := r.events.List(ctx, &list, client.InNamespace(namespace)); err != nil {
		return nil, err
	}
	return list.Items, nil
}
