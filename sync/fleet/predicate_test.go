package fleet

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
)

// TestChildChangedWakesTheSetOnlyForWhatItReads: a generated SyncTarget's status write that
// changes no condition the rollout reads does not reconcile the set; one that makes it
// Ready, fails it or acts on a new generation does.
func TestChildChangedWakesTheSetOnlyForWhatItReads(t *testing.T) {
	g := NewWithT(t)
	base := tgt("a", "main", "updating").Live
	wakes := func(edit func(st *convergev1.SyncTarget)) bool {
		cur := base.DeepCopy()
		edit(cur)
		return childChanged.Update(event.UpdateEvent{ObjectOld: base, ObjectNew: cur})
	}
	g.Expect(wakes(func(st *convergev1.SyncTarget) {
		st.Status.LastFetchedRevision = "main@sha1:abc"
		st.Status.Inventory = &convergev1.ResourceInventory{}
	})).To(BeFalse(), "a fetched revision and an inventory")
	g.Expect(wakes(func(st *convergev1.SyncTarget) { st.Status.Conditions[0].Message = "applying" })).
		To(BeFalse(), "a new message of a Ready condition that is no failure")
	g.Expect(wakes(func(st *convergev1.SyncTarget) { st.Status.ObservedGeneration = 2 })).
		To(BeTrue(), "its controller acted on its spec")
	g.Expect(wakes(func(st *convergev1.SyncTarget) {
		st.Status.Conditions[0] = metav1.Condition{Type: convergev1.ReadyCondition, Status: metav1.ConditionFalse,
			Reason: convergev1.RolledBackReason, Message: "health check failed"}
	})).To(BeTrue(), "it failed")
	g.Expect(wakes(func(st *convergev1.SyncTarget) { st.Annotations[TemplateHashAnnotation] = "other" })).
		To(BeTrue(), "another rendering")
	g.Expect(wakes(func(st *convergev1.SyncTarget) { st.Status.LastAppliedRevision = "main@sha1:def" })).
		To(BeTrue(), "another revision in the cluster, which a preview's comment says")
	g.Expect(wakes(func(st *convergev1.SyncTarget) {
		st.Status.History = []convergev1.HistoryEntry{{Revision: "main@sha1:def", Result: convergev1.SyncRolledBack}}
	})).To(BeTrue(), "an attempt rolled back, which a preview's comment says")

	failed := tgt("a", "main", "failed").Live
	cur := failed.DeepCopy()
	cur.Status.Conditions[0].Message = "another failure"
	g.Expect(childChanged.Update(event.UpdateEvent{ObjectOld: failed, ObjectNew: cur})).
		To(BeTrue(), "a failure's message, which the set repeats")
}

// TestEachTargetReportsTheFirstFailureInOrder: of the targets that failed, the error is the
// first one's in the targets' order, whatever order they finished in, and no more than
// writeConcurrency run at once.
func TestEachTargetReportsTheFirstFailureInOrder(t *testing.T) {
	g := NewWithT(t)
	targets := make([]*Target, 3*writeConcurrency)
	for i := range targets {
		targets[i] = &Target{Rendered: Rendered{Name: fmt.Sprintf("t%02d", i)}}
	}
	var running, most atomic.Int64
	release := make(chan struct{})
	err := eachTarget(context.Background(), targets, writeConcurrency, func(_ context.Context, tg *Target) error {
		n := running.Add(1)
		defer running.Add(-1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		switch tg.Name {
		case "t03":
			<-release // fails after t05
			return errors.New("t03 failed")
		case "t05":
			defer close(release)
			return errors.New("t05 failed")
		}
		return nil
	})
	g.Expect(err).To(MatchError("t03 failed"))
	g.Expect(most.Load()).To(BeNumerically("<=", writeConcurrency))

	var calls atomic.Int64
	g.Expect(eachTarget(context.Background(), targets, writeConcurrency, func(context.Context, *Target) error {
		calls.Add(1)
		return nil
	})).To(Succeed())
	g.Expect(calls.Load()).To(Equal(int64(len(targets))), "every target, once")
}

// TestEnqueueSetOfChildBatches: many changes of the SyncTargets of one set within the batch
// enqueue that set once; a SyncTarget no set controls enqueues nothing.
func TestEnqueueSetOfChildBatches(t *testing.T) {
	g := NewWithT(t)
	q := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[reconcile.Request]())
	defer q.ShutDown()
	scheme := runtime.NewScheme()
	g.Expect(convergev1.AddToScheme(scheme)).To(Succeed())
	mapper := meta.NewDefaultRESTMapper([]schema.GroupVersion{convergev1.GroupVersion})
	mapper.Add(convergev1.GroupVersion.WithKind(convergev1.SyncTargetSetKind), meta.RESTScopeNamespace)
	h := enqueueSetOfChild(scheme, mapper, func(reconcile.Request) time.Duration { return 200 * time.Millisecond })
	set := &convergev1.SyncTargetSet{ObjectMeta: metav1.ObjectMeta{Name: "rings", Namespace: "apps", UID: "u1"}}
	child := func(name string, controlled bool) *convergev1.SyncTarget {
		st := &convergev1.SyncTarget{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "apps"}}
		if controlled {
			st.OwnerReferences = []metav1.OwnerReference{*metav1.NewControllerRef(set, convergev1.GroupVersion.WithKind(convergev1.SyncTargetSetKind))}
		}
		return st
	}
	for i := range 20 {
		st := child(fmt.Sprintf("t%d", i), true)
		h.Update(t.Context(), event.UpdateEvent{ObjectOld: st, ObjectNew: st}, q)
	}
	h.Create(t.Context(), event.CreateEvent{Object: child("hand-written", false)}, q)
	g.Expect(q.Len()).To(Equal(0), "not before the batch ends")
	g.Eventually(q.Len).WithTimeout(5 * time.Second).WithPolling(10 * time.Millisecond).Should(Equal(1))
	req, _ := q.Get()
	g.Expect(req.NamespacedName).To(Equal(types.NamespacedName{Namespace: "apps", Name: "rings"}))
	g.Consistently(q.Len).WithTimeout(200 * time.Millisecond).WithPolling(10 * time.Millisecond).Should(Equal(0))
}

// TestBatchGrowsWithTheSet: a set of a hundred or fewer waits a second after a change of its
// SyncTargets, a larger one longer in proportion, ten seconds at most; a set not seen yet, or
// gone, waits a second.
func TestBatchGrowsWithTheSet(t *testing.T) {
	g := NewWithT(t)
	for n, want := range map[int]time.Duration{0: time.Second, 100: time.Second, 250: 2500 * time.Millisecond,
		500: 5 * time.Second, 1000: 10 * time.Second, 5000: 10 * time.Second} {
		g.Expect(batchFor(n)).To(Equal(want), "%d SyncTargets", n)
	}
	var sizes setSizes
	req := reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "apps", Name: "rings"}}
	g.Expect(sizes.batch(req)).To(Equal(time.Second))
	sizes.set(req.NamespacedName, 500)
	g.Expect(sizes.batch(req)).To(Equal(5 * time.Second))
	g.Expect(sizes.batch(reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "apps", Name: "other"}})).To(Equal(time.Second))
	sizes.forget(req.NamespacedName)
	g.Expect(sizes.batch(req)).To(Equal(time.Second))
}
