package reconciler

import (
	"context"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
	"github.com/converge-gitops/converge/sync/cluster"
	"github.com/converge-gitops/converge/sync/drift"
)

// secretReadTimeout bounds the look-up of a remote cluster (the read of its kubeconfig
// Secret) where the caller has no context.
const secretReadTimeout = 30 * time.Second

// clientFor returns the client st acts with on the cluster its objects are on: applies,
// prunes and hooks go through it.
func (r *Reconciler) clientFor(ctx context.Context, st *convergev1.SyncTarget) (client.Client, error) {
	on, err := r.Clusters.For(ctx, st)
	if err != nil {
		return nil, err
	}
	return on.Client(impersonatedUser(st, r.DefaultServiceAccount))
}

// localClientFor returns the client st acts with on the daemon's own cluster, where its
// spec.postBuild variables are (as its kubeconfig and credentials Secrets are), also when
// it deploys to a remote cluster.
func (r *Reconciler) localClientFor(st *convergev1.SyncTarget) (client.Client, error) {
	return r.Clusters.Local().Client(impersonatedUser(st, r.DefaultServiceAccount))
}

// localDrift is the drift watcher of the daemon's own cluster, which every cluster's
// wakes SyncTargets through; nil when drift is not watched.
func (r *Reconciler) localDrift() *drift.Watcher {
	if r.Clusters == nil {
		return nil
	}
	w, _, _ := r.Clusters.Local().Drift(client.ObjectKey{})
	return w
}

// remoteSecretGone reports, with a warning event, a SyncTarget deleted after the
// kubeconfig Secret of its remote cluster (a namespace deleted as a whole): its objects
// there are left in place, rather than its deletion held until a Secret comes back.
func (r *Reconciler) remoteSecretGone(ctx context.Context, st *convergev1.SyncTarget) bool {
	if st.Spec.KubeConfig == nil {
		return false
	}
	if _, err := r.Clusters.For(ctx, st); !apierrors.IsNotFound(err) {
		return false
	}
	r.event(st, "Warning", "PruneSkipped", "", fmt.Sprintf(
		"the kubeconfig secret %s/%s is gone: the objects on its cluster are left in place", st.Namespace, st.Spec.KubeConfig.SecretRef.Name))
	return true
}

// clusterScope is the cluster of one run, looked up once: the run's applies, prunes,
// renders, health waits and drift all go to the same cluster, and a remote one's
// kubeconfig Secret is not read again within the run.
type clusterScope struct {
	resolved bool
	on       cluster.Cluster
	err      error
	drift    *drift.Watcher
	driftSet bool
}

// cluster returns the cluster of the run's SyncTarget.
func (ru *run) cluster(ctx context.Context) (cluster.Cluster, error) {
	if !ru.scope.resolved {
		ru.scope.on, ru.scope.err = ru.r.Clusters.For(ctx, ru.st)
		ru.scope.resolved = true
	}
	return ru.scope.on, ru.scope.err
}

// client returns the client the run's SyncTarget acts with on its cluster.
func (ru *run) client(ctx context.Context) (client.Client, error) {
	on, err := ru.cluster(ctx)
	if err != nil {
		return nil, err
	}
	return on.Client(impersonatedUser(ru.st, ru.r.DefaultServiceAccount))
}

// drift returns the drift watcher of the cluster the SyncTarget's objects are on: the
// daemon's own, or that of its remote cluster (which wakes SyncTargets through the same
// events); nil when drift is not watched, or the remote cluster cannot be had (its deploys
// say why). A remote watcher new to the SyncTarget (a rotated Secret, a restart) is given
// the kinds of its inventory at once.
func (ru *run) drift() *drift.Watcher {
	if ru.scope.driftSet {
		return ru.scope.drift
	}
	ru.scope.driftSet = true
	ctx, cancel := context.WithTimeout(context.Background(), secretReadTimeout)
	defer cancel()
	on, err := ru.cluster(ctx)
	if err != nil {
		return nil
	}
	w, first, err := on.Drift(ru.key)
	if err != nil || w == nil {
		return nil
	}
	if first {
		_ = w.Watch(inventoryObjects(ru.st.Status.Inventory)) // an unreachable cluster: remember watches again
	}
	ru.scope.drift = w
	return w
}
