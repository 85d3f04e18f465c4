package reconcilertest

import (
	"context"
	"errors"
	"net/url"
	"sync"
	"syscall"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
	"github.com/converge-gitops/converge/health"
	"github.com/converge-gitops/converge/sync/cluster"
	"github.com/converge-gitops/converge/sync/drift"
	"github.com/converge-gitops/converge/sync/remote"
)

// Cluster is a cluster whose every identity acts through the one client C (a fake
// client holding its objects). Away makes it unreachable: every call fails as a remote
// cluster's transport fails when its API server is down.
type Cluster struct {
	// Caps are the cluster's capabilities; CapsErr, when set, is what their discovery
	// fails with.
	Caps    cluster.Capabilities
	CapsErr error

	name string
	c    client.WithWatch

	mu        sync.Mutex
	away      bool
	forgotten int
}

// NewCluster returns the cluster named name ("" for the daemon's own) of client c.
func NewCluster(name string, c client.WithWatch) *Cluster { return &Cluster{name: name, c: c} }

// Away makes the cluster unreachable (true) or reachable again.
func (c *Cluster) Away(away bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.away = away
}

func (c *Cluster) isAway() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.away
}

// Name implements cluster.Cluster.
func (c *Cluster) Name() string { return c.name }

// Client implements cluster.Cluster: C for every user, failing while the cluster is away.
func (c *Cluster) Client(string) (client.Client, error) {
	unreachable := func() error {
		if !c.isAway() {
			return nil
		}
		return &url.Error{Op: "Get", URL: "https://" + c.name + ".example/api",
			Err: &remote.UnreachableError{Cluster: c.name, Err: syscall.ECONNREFUSED}}
	}
	return interceptor.NewClient(c.c, interceptor.Funcs{
		Get: func(ctx context.Context, w client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if err := unreachable(); err != nil {
				return err
			}
			return w.Get(ctx, key, obj, opts...)
		},
		List: func(ctx context.Context, w client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
			if err := unreachable(); err != nil {
				return err
			}
			return w.List(ctx, list, opts...)
		},
		Create: func(ctx context.Context, w client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			if err := unreachable(); err != nil {
				return err
			}
			return w.Create(ctx, obj, opts...)
		},
		Update: func(ctx context.Context, w client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
			if err := unreachable(); err != nil {
				return err
			}
			return w.Update(ctx, obj, opts...)
		},
		Delete: func(ctx context.Context, w client.WithWatch, obj client.Object, opts ...client.DeleteOption) error {
			if err := unreachable(); err != nil {
				return err
			}
			return w.Delete(ctx, obj, opts...)
		},
	}), nil
}

// Checker implements cluster.Cluster: the fakes' Health needs none.
func (c *Cluster) Checker(string) (*health.Checker, error) {
	return nil, errors.New("a fake cluster has no health checker")
}

// Drift implements cluster.Cluster: drift is not watched (the full sync heals it).
func (c *Cluster) Drift(types.NamespacedName) (*drift.Watcher, bool, error) { return nil, false, nil }

// Mapper implements cluster.Cluster.
func (c *Cluster) Mapper() meta.RESTMapper { return c.c.RESTMapper() }

// Capabilities implements cluster.Cluster: Caps, failing while the cluster is away.
func (c *Cluster) Capabilities() (cluster.Capabilities, error) {
	if c.isAway() {
		return cluster.Capabilities{}, &remote.UnreachableError{Cluster: c.name, Err: syscall.ECONNREFUSED}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.CapsErr != nil {
		return cluster.Capabilities{}, c.CapsErr
	}
	return c.Caps, nil
}

// ForgetCapabilities implements cluster.Cluster: counted in Forgotten.
func (c *Cluster) ForgetCapabilities() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.forgotten++
}

// Forgotten counts the calls of ForgetCapabilities.
func (c *Cluster) Forgotten() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.forgotten
}

// Clusters are the daemon's own cluster and remote ones known by the name of their
// kubeconfig Secret; a SyncTarget naming another Secret finds it missing.
type Clusters struct {
	local *Cluster

	mu       sync.Mutex
	remote   map[string]*Cluster
	held     map[types.NamespacedName]string // owner → the remote cluster it holds
	lookups  int
	released []types.NamespacedName
}

// NewClusters returns the clusters of a daemon whose own cluster is local.
func NewClusters(local client.WithWatch) *Clusters {
	return &Clusters{local: NewCluster("", local), remote: map[string]*Cluster{}, held: map[types.NamespacedName]string{}}
}

// AddRemote adds the cluster of the kubeconfig Secret secret (in any namespace), whose
// objects c holds.
func (cs *Clusters) AddRemote(secret string, c client.WithWatch) *Cluster {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	rc := NewCluster(secret, c)
	cs.remote[secret] = rc
	return rc
}

// For implements cluster.Clusters: as cluster.Set, a SyncTarget without spec.kubeConfig
// lets go of the remote cluster it held.
func (cs *Clusters) For(_ context.Context, st *convergev1.SyncTarget) (cluster.Cluster, error) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	cs.lookups++
	owner := types.NamespacedName{Namespace: st.Namespace, Name: st.Name}
	if st.Spec.KubeConfig == nil {
		cs.releaseLocked(owner)
		return cs.local, nil
	}
	name := st.Spec.KubeConfig.SecretRef.Name
	if rc, ok := cs.remote[name]; ok {
		cs.held[owner] = name
		return rc, nil
	}
	return nil, &remote.ConfigError{Secret: st.Namespace + "/" + name,
		Err: apierrors.NewNotFound(schema.GroupResource{Resource: "secrets"}, name)}
}

// Local implements cluster.Clusters.
func (cs *Clusters) Local() cluster.Cluster { return cs.local }

// Release implements cluster.Clusters.
func (cs *Clusters) Release(owner types.NamespacedName) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	cs.releaseLocked(owner)
}

func (cs *Clusters) releaseLocked(owner types.NamespacedName) {
	if _, ok := cs.held[owner]; ok {
		delete(cs.held, owner)
		cs.released = append(cs.released, owner)
	}
}

// Lookups is how many times For was called.
func (cs *Clusters) Lookups() int {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	return cs.lookups
}

// Released are the owners that let go of the remote cluster they held, in order.
func (cs *Clusters) Released() []types.NamespacedName {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	return append([]types.NamespacedName(nil), cs.released...)
}
