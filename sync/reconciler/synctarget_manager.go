package reconciler

import (
	"context"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
)

// dependsOnIndex indexes SyncTargets by the "<namespace>/<name>" of each dependency.
const dependsOnIndex = ".spec.dependsOn"

// Options of the controller.
type Options struct {
	// Concurrency is the number of SyncTargets reconciled at once.
	Concurrency int
}

// SetupWithManager registers the reconciler: it reacts to spec and annotation changes of
// SyncTargets (not to their own status writes), and wakes the dependents of a SyncTarget
// whose status changed.
func (r *Reconciler) SetupWithManager(ctx context.Context, mgr ctrl.Manager, opts Options) error {
	if err := mgr.GetFieldIndexer().IndexField(ctx, &convergev1.SyncTarget{}, dependsOnIndex,
		func(o client.Object) []string {
			st := o.(*convergev1.SyncTarget)
			keys := make([]string, 0, len(st.Spec.DependsOn))
			for _, d := range st.Spec.DependsOn {
				keys = append(keys, st.DependencyKey(d).String())
			}
			return keys
		}); err != nil {
		return err
	}
	b := ctrl.NewControllerManagedBy(mgr).
		For(&convergev1.SyncTarget{}, builder.WithPredicates(predicate.Or(
			predicate.GenerationChangedPredicate{}, predicate.AnnotationChangedPredicate{}))).
		Watches(&convergev1.SyncTarget{}, handler.EnqueueRequestsFromMapFunc(r.dependents)).
		WithOptions(controller.Options{MaxConcurrentReconciles: max(opts.Concurrency, 1)})
	b, err := r.watchVariables(ctx, mgr, b)
	if err != nil {
		return err
	}
	if w := r.localDrift(); w != nil {
		b = b.WatchesRawSource(source.Channel(w.Events, &handler.EnqueueRequestForObject{}))
	}
	if wake := r.Fetcher.Wakeups(); wake != nil {
		b = b.WatchesRawSource(source.Channel(wake, &handler.EnqueueRequestForObject{}))
	}
	if r.MaxConcurrentPerNamespace > 0 {
		return b.Complete(NewNamespaceLimiter(r, r.MaxConcurrentPerNamespace))
	}
	return b.Complete(r)
}

// dependents lists the SyncTargets that depend on o.
func (r *Reconciler) dependents(ctx context.Context, o client.Object) []reconcile.Request {
	list := &convergev1.SyncTargetList{}
	if err := r.List(ctx, list, client.MatchingFields{dependsOnIndex: client.ObjectKeyFromObject(o).String()}); err != nil {
		return nil
	}
	reqs := make([]reconcile.Request, 0, len(list.Items))
	for _, st := range list.Items {
		reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&st)})
	}
	return reqs
}
