package fleet

import (
	"context"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
)

// childChanged lets through the updates of a generated SyncTarget that change what its set
// reads of it (childState): a status write that changes none of it — a fetched revision,
// the inventory, a progress message — does not wake the set. Creates and deletes always
// do.
var childChanged = predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
	old, okOld := e.ObjectOld.(*convergev1.SyncTarget)
	cur, okNew := e.ObjectNew.(*convergev1.SyncTarget)
	if !okOld || !okNew {
		return true
	}
	return stateOf(old) != stateOf(cur)
}}

// childState is what the set reads of a SyncTarget it generated: its rendering, its
// ownership, whether its controller acted on its spec, and the conditions of the rollout,
// with the message of a failure (which the set's Ready condition repeats).
type childState struct {
	generation, observedGeneration int64
	hash, set                      string
	controller                     types.UID
	deleting                       bool
	ready, stalled, reconciling    conditionState
	// applied and attempt are the revision in the cluster and the last attempt's revision
	// and result: a preview's comment on its pull request says them.
	applied, attempt string
}

type conditionState struct {
	status          metav1.ConditionStatus
	reason, message string
}

func stateOf(st *convergev1.SyncTarget) childState {
	s := childState{
		generation: st.Generation, observedGeneration: st.Status.ObservedGeneration,
		hash: st.Annotations[TemplateHashAnnotation], set: st.Labels[convergev1.SetLabel],
		deleting: st.DeletionTimestamp != nil, applied: st.Status.LastAppliedRevision,
	}
	if len(st.Status.History) > 0 {
		s.attempt = st.Status.History[0].Revision + " " + string(st.Status.History[0].Result)
	}
	if ref := metav1ControllerOf(st); ref != nil {
		s.controller = ref.UID
	}
	conds := st.Status.Conditions
	s.ready = conditionOf(conds, convergev1.ReadyCondition, func(c *metav1.Condition) bool {
		return c.Status == metav1.ConditionFalse && !waitingReasons[c.Reason]
	})
	s.stalled = conditionOf(conds, convergev1.StalledCondition, func(c *metav1.Condition) bool {
		return c.Status == metav1.ConditionTrue
	})
	s.reconciling = conditionOf(conds, convergev1.ReconcilingCondition, func(*metav1.Condition) bool { return false })
	return s
}

// conditionOf is a condition's status and reason, and its message when withMessage says
// the set may repeat it.
func conditionOf(conds []metav1.Condition, typ string, withMessage func(*metav1.Condition) bool) conditionState {
	c := meta.FindStatusCondition(conds, typ)
	if c == nil {
		return conditionState{}
	}
	s := conditionState{status: c.Status, reason: c.Reason}
	if withMessage(c) {
		s.message = c.Message
	}
	return s
}

// childBatch is how long the set waits after a change of a SyncTarget it generated before
// it reconciles: the changes of many SyncTargets within it (N of them turning Ready as a
// rollout lands) wake the set once, not N times, each of which would render and list its
// every SyncTarget again and write its status, which lists them all. The wait grows with the
// set, childBatchPerTarget for each of its SyncTargets, from childBatch up to maxChildBatch,
// so that what the set spends on its wake-ups stays a small part of what its SyncTargets'
// own syncs cost: a second for a hundred, five for five hundred. A rollout step starts at
// most that much later than the last one of the step before turned Ready.
const (
	childBatch          = time.Second
	childBatchPerTarget = 10 * time.Millisecond
	maxChildBatch       = 10 * time.Second
)

// batchFor is the wait of a set of n SyncTargets.
func batchFor(n int) time.Duration {
	return min(maxChildBatch, max(childBatch, time.Duration(n)*childBatchPerTarget))
}

// setSizes remembers how many SyncTargets each set generated when it last reconciled, for
// its wait (batchFor).
type setSizes struct{ m sync.Map }

func (s *setSizes) set(key types.NamespacedName, n int) { s.m.Store(key, n) }

func (s *setSizes) forget(key types.NamespacedName) { s.m.Delete(key) }

// generations remembers a generation per set.
type generations struct{ m sync.Map }

// changed records generation for key (0: forget it) and reports whether it differs from
// the one recorded before (a set never recorded has changed only when it is not 0).
func (g *generations) changed(key types.NamespacedName, generation int64) bool {
	if generation == 0 {
		_, had := g.m.LoadAndDelete(key)
		return had
	}
	before, had := g.m.Swap(key, generation)
	return had && before.(int64) != generation
}

// batch is the wait of the set of req.
func (s *setSizes) batch(req reconcile.Request) time.Duration {
	n, _ := s.m.Load(req.NamespacedName)
	size, _ := n.(int)
	return batchFor(size)
}

// enqueueSetOfChild enqueues, delay(set) later, the set that is the controller of a
// SyncTarget, as Owns does but for the delay.
func enqueueSetOfChild(scheme *runtime.Scheme, mapper meta.RESTMapper, delay func(reconcile.Request) time.Duration) handler.EventHandler {
	owner := handler.EnqueueRequestForOwner(scheme, mapper, &convergev1.SyncTargetSet{}, handler.OnlyControllerOwner())
	later := func(q workqueue.TypedRateLimitingInterface[reconcile.Request]) workqueue.TypedRateLimitingInterface[reconcile.Request] {
		return delayedQueue{TypedRateLimitingInterface: q, delay: delay}
	}
	return handler.Funcs{
		CreateFunc: func(ctx context.Context, e event.CreateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			owner.Create(ctx, e, later(q))
		},
		UpdateFunc: func(ctx context.Context, e event.UpdateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			owner.Update(ctx, e, later(q))
		},
		DeleteFunc: func(ctx context.Context, e event.DeleteEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			owner.Delete(ctx, e, later(q))
		},
		GenericFunc: func(ctx context.Context, e event.GenericEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			owner.Generic(ctx, e, later(q))
		},
	}
}

// delayedQueue adds what it is given delay(it) later: adds of one request within the delay
// make one, at the time of the first.
type delayedQueue struct {
	workqueue.TypedRateLimitingInterface[reconcile.Request]
	delay func(reconcile.Request) time.Duration
}

func (q delayedQueue) Add(r reconcile.Request) { q.AddAfter(r, q.delay(r)) }
