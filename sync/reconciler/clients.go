package reconciler

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
	"github.com/converge-gitops/converge/sync/drift"
	"github.com/converge-gitops/converge/sync/remote"
)

// ImpersonatingClients are the daemon's Clients: each impersonates the SyncTarget's
// service account (or the daemon's default one) when there is one, on the daemon's
// cluster or, for a SyncTarget with spec.kubeConfig, on that remote cluster. They read
// straight from the API server: a cached client would start a cluster-wide informer for
// every kind ever applied, and could answer from a stale cache.
type ImpersonatingClients struct {
	// Config is the daemon's own client config, the base of impersonating clients.
	Config *rest.Config
	// Scheme and Mapper are the manager's.
	Scheme *runtime.Scheme
	Mapper meta.RESTMapper
	// DefaultServiceAccount is impersonated for SyncTargets that name none.
	DefaultServiceAccount string
	// Remote holds the clusters of SyncTargets with spec.kubeConfig; nil refuses them.
	Remote *remote.Clusters

	clients sync.Map // impersonated user → client.Client
}

// secretReadTimeout bounds the read of a kubeconfig Secret (For takes no context).
const secretReadTimeout = 30 * time.Second

// For implements Clients; a client is made once per cluster and impersonated user. Its
// RESTMapper is that of its cluster.
func (ic *ImpersonatingClients) For(st *convergev1.SyncTarget) (client.Client, error) {
	user := impersonatedUser(st, ic.DefaultServiceAccount)
	if st.Spec.KubeConfig != nil {
		return ic.remoteFor(st, user)
	}
	ic.Remote.Release(client.ObjectKeyFromObject(st)) // it left its remote cluster, if it had one
	return ic.local(user)
}

// local returns the client acting as user on the daemon's cluster.
func (ic *ImpersonatingClients) local(user string) (client.Client, error) {
	if c, ok := ic.clients.Load(user); ok {
		return c.(client.Client), nil
	}
	// One that can watch: the apply's stage waits (health) then watch instead of listing again.
	c, err := client.NewWithWatch(remote.Impersonating(ic.Config, user), client.Options{Scheme: ic.Scheme, Mapper: ic.Mapper})
	if err != nil {
		return nil, fmt.Errorf("client for %q: %w", user, err)
	}
	ic.clients.Store(user, c)
	return c, nil
}

// remoteFor returns the client of st's remote cluster acting as user there. The
// kubeconfig Secret is read each time, so that a rotated one is used at once.
func (ic *ImpersonatingClients) remoteFor(st *convergev1.SyncTarget, user string) (client.Client, error) {
	if ic.Remote == nil {
		return nil, errors.New("spec.kubeConfig: this daemon does not deploy to remote clusters")
	}
	ctx, cancel := context.WithTimeout(context.Background(), secretReadTimeout)
	defer cancel()
	cluster, err := ic.Remote.Acquire(ctx, st)
	if err != nil {
		return nil, err
	}
	return cluster.Client(user)
}

// cluster returns the remote cluster st deploys to, the one it holds already if any;
// nil for a SyncTarget of the daemon's cluster.
func (ic *ImpersonatingClients) cluster(ctx context.Context, st *convergev1.SyncTarget) (*remote.Cluster, error) {
	if st.Spec.KubeConfig == nil {
		return nil, nil
	}
	if ic.Remote == nil {
		return nil, errors.New("spec.kubeConfig: this daemon does not deploy to remote clusters")
	}
	if c := ic.Remote.Current(client.ObjectKeyFromObject(st)); c != nil {
		return c, nil
	}
	return ic.Remote.Acquire(ctx, st)
}

// localClientFor returns the client st acts with on the daemon's own cluster, where its
// spec.postBuild variables are (as its kubeconfig and credentials Secrets are), also when
// it deploys to a remote cluster.
func (r *Reconciler) localClientFor(st *convergev1.SyncTarget) (client.Client, error) {
	ic, ok := r.Clients.(*ImpersonatingClients)
	if !ok || st.Spec.KubeConfig == nil {
		return r.clientFor(st)
	}
	return ic.local(impersonatedUser(st, ic.DefaultServiceAccount))
}

// remoteSecretGone reports, with a warning event, a SyncTarget deleted after the
// kubeconfig Secret of its remote cluster (a namespace deleted as a whole): its objects
// there are left in place, rather than its deletion held until a Secret comes back.
func (r *Reconciler) remoteSecretGone(st *convergev1.SyncTarget) bool {
	if st.Spec.KubeConfig == nil {
		return false
	}
	if _, err := r.clientFor(st); !apierrors.IsNotFound(err) {
		return false
	}
	r.event(st, "Warning", "PruneSkipped", "", fmt.Sprintf(
		"the kubeconfig secret %s/%s is gone: the objects on its cluster are left in place", st.Namespace, st.Spec.KubeConfig.SecretRef.Name))
	return true
}

// releaseCluster lets go of the remote cluster of a SyncTarget that is gone.
func releaseCluster(cs Clients, key client.ObjectKey) {
	if ic, ok := cs.(*ImpersonatingClients); ok {
		ic.Remote.Release(key)
	}
}

// drift returns the drift watcher of the cluster the SyncTarget's objects are on: the
// reconciler's own, or that of its remote cluster (which wakes SyncTargets through the
// same events); nil when drift is not watched, or the remote cluster cannot be had (its
// deploys say why). A remote watcher new to the SyncTarget (a rotated Secret, a restart)
// is given the kinds of its inventory at once.
func (ru *run) drift() *drift.Watcher {
	local := ru.r.Drift
	if local == nil || ru.st.Spec.KubeConfig == nil {
		return local
	}
	ic, ok := ru.r.Clients.(*ImpersonatingClients)
	if !ok {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), secretReadTimeout)
	defer cancel()
	cluster, err := ic.cluster(ctx, ru.st)
	if err != nil {
		return nil
	}
	w, first, err := cluster.Drift(local, ru.key)
	if err != nil || w == nil {
		return nil
	}
	if first {
		_ = w.Watch(inventoryObjects(ru.st.Status.Inventory)) // an unreachable cluster: remember watches again
	}
	return w
}
