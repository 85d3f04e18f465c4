package reconciler

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
	"github.com/converge-gitops/converge/internal/category"
	"github.com/converge-gitops/converge/sync/cluster"
	"github.com/converge-gitops/converge/sync/postbuild"
	"github.com/converge-gitops/converge/sync/render"
)

// The spec.postBuild variables in a sync: read at every sync (one Get per referent, with
// the SyncTarget's own rights), remembered as a digest per SyncTarget, and a change of
// them redeploys the same revision.

// readVariables reads the SyncTarget's variables into the run, through the client the
// SyncTarget acts with on the daemon's cluster (impersonating its service account, when
// it has one): a tenant cannot have converge read a Secret it could not read itself.
func (ru *run) readVariables(ctx context.Context) *outcome {
	if ru.st.Spec.PostBuild == nil && (ru.st.Spec.Helm == nil || len(ru.st.Spec.Helm.ValuesFrom) == 0) {
		ru.vars = postbuild.Variables{}
		return nil
	}
	c, err := ru.r.localClientFor(ru.st)
	if err == nil {
		ru.vars, err = postbuild.Read(ctx, c, ru.st)
	}
	if err != nil {
		o := fromFailure(classify(phaseVariables, err), "", nil, err.Error())
		if o.err == nil {
			o.after = ru.r.interval(ru.st) // and at once when a watched referent changes
		}
		return &o
	}
	return nil
}

// renderTree renders a checked-out tree, with the run's variables substituted.
// A chart sees the capabilities of the cluster it deploys to; their discovery failing
// (the cluster away) is no fault of the revision: retried, said as an apply that failed.
func (ru *run) renderTree(ctx context.Context, dir string) (*render.Result, error) {
	c, err := ru.client(ctx)
	if err != nil {
		return nil, err
	}
	on, _ := ru.cluster(ctx) // looked up by client already
	caps := func() (cluster.Capabilities, error) {
		caps, err := on.Capabilities()
		if err != nil {
			says, _ := category.Of(err)
			if says == category.Unknown {
				says = category.Retry
			}
			return caps, category.WrapReason(says, convergev1.ApplyFailedReason, err)
		}
		return caps, nil
	}
	return ru.r.Renderer.Render(ctx, ru.st, cluster.Destination{Client: c, Capabilities: caps}, dir, ru.vars)
}

// variablesState compares the digest of the variables read now with the one the last
// attempt used (last): changed when both are known and differ; unknown when there are
// variables read from ConfigMaps or Secrets but nothing is remembered (after a restart,
// or the first sync).
func variablesState(last, now string) (changed, unknown bool) {
	if now == "" {
		return false, false
	}
	return last != "" && last != now, last == ""
}

// failedOnVariables reports whether the last attempt failed on its variables (an unset
// one, strict): after a restart, when what they were is not known, it is tried again once.
func failedOnVariables(st *convergev1.SyncTarget) bool {
	c := apimeta.FindStatusCondition(st.Status.Conditions, convergev1.ReadyCondition)
	return c != nil && c.Reason == convergev1.SubstitutionFailedReason
}

// variablesCause says why an unchanged revision is deployed again, for its history entry.
func variablesCause(changed, unknown bool) string {
	switch {
	case changed:
		return "variables changed"
	case unknown:
		return "variables read anew"
	}
	return ""
}

// substituteFromIndex indexes SyncTargets by "<kind>/<name>" of each ConfigMap and Secret
// their spec.postBuild.substituteFrom or spec.helm.valuesFrom names, and of their
// spec.kubeConfig Secret (in their own namespace).
const substituteFromIndex = ".spec.postBuild.substituteFrom"

func substituteFromKeys(o client.Object) []string {
	st, ok := o.(*convergev1.SyncTarget)
	if !ok {
		return nil
	}
	var keys []string
	if st.Spec.PostBuild != nil {
		for _, ref := range st.Spec.PostBuild.SubstituteFrom {
			keys = append(keys, ref.Kind+"/"+ref.Name)
		}
	}
	if st.Spec.Helm != nil {
		for _, ref := range st.Spec.Helm.ValuesFrom {
			keys = append(keys, ref.Kind+"/"+ref.Name)
		}
	}
	if st.Spec.KubeConfig != nil {
		keys = append(keys, "Secret/"+st.Spec.KubeConfig.SecretRef.Name)
	}
	return keys
}

// newMetadataCache makes the cache of ConfigMaps' and Secrets' metadata, started with the
// manager's caches: it keeps name, namespace, UID and resourceVersion, no data, and no
// annotation (kubectl's last-applied-configuration of a Secret holds its data) or label.
func newMetadataCache(mgr ctrl.Manager) (cache.Cache, error) {
	c, err := cache.New(mgr.GetConfig(), cache.Options{Scheme: mgr.GetScheme(), Mapper: mgr.GetRESTMapper(),
		DefaultTransform: identityOnly})
	if err != nil {
		return nil, fmt.Errorf("creating the cache of variables' metadata: %w", err)
	}
	return c, mgr.Add(variablesCache{c})
}

// watchVariables has a change to a ConfigMap or Secret that a SyncTarget's
// spec.postBuild.substituteFrom or spec.helm.valuesFrom names, or to its kubeconfig Secret
// (its creation and deletion too), reconcile that SyncTarget. Only metadata is watched, in
// the cache of newMetadataCache.
func (r *Reconciler) watchVariables(ctx context.Context, mgr ctrl.Manager, b *builder.Builder) (*builder.Builder, error) {
	if err := mgr.GetFieldIndexer().IndexField(ctx, &convergev1.SyncTarget{}, substituteFromIndex, substituteFromKeys); err != nil {
		return nil, err
	}
	c := r.metadata
	if c == nil {
		return b, nil
	}
	for _, kind := range []string{"ConfigMap", "Secret"} {
		obj := &metav1.PartialObjectMetadata{}
		obj.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind(kind))
		b = b.WatchesRawSource(source.Kind[client.Object](c, obj, handler.EnqueueRequestsFromMapFunc(r.referencing(kind))))
	}
	return b, nil
}

// variablesCache runs with the manager's caches.
type variablesCache struct{ cache.Cache }

// GetCache has the manager start the cache with its own and wait for it to sync.
func (c variablesCache) GetCache() cache.Cache { return c.Cache }

// identityOnly keeps of an object's metadata what telling a change needs.
func identityOnly(o any) (any, error) {
	m, ok := o.(*metav1.PartialObjectMetadata)
	if !ok {
		return o, nil
	}
	out := &metav1.PartialObjectMetadata{TypeMeta: m.TypeMeta}
	out.Namespace, out.Name, out.UID, out.ResourceVersion = m.Namespace, m.Name, m.UID, m.ResourceVersion
	return out, nil
}

// referencing maps a ConfigMap or Secret (kind) to the SyncTargets whose
// spec.postBuild.substituteFrom names it.
func (r *Reconciler) referencing(kind string) handler.MapFunc {
	return func(ctx context.Context, o client.Object) []reconcile.Request {
		list := &convergev1.SyncTargetList{}
		if err := r.List(ctx, list, client.InNamespace(o.GetNamespace()),
			client.MatchingFields{substituteFromIndex: kind + "/" + o.GetName()}); err != nil {
			return nil
		}
		reqs := make([]reconcile.Request, 0, len(list.Items))
		for _, st := range list.Items {
			reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&st)})
		}
		return reqs
	}
}
