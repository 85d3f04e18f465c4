// Package cluster is where a SyncTarget's objects are: the daemon's own cluster, or the
// remote one its spec.kubeConfig names. Either is one Cluster: a client and a health
// checker per impersonated identity, a drift watcher and a REST mapper, each made once
// and shared by the SyncTargets deploying there.
package cluster

import (
	"context"
	"errors"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
	"github.com/converge-gitops/converge/health"
	"github.com/converge-gitops/converge/sync/drift"
	"github.com/converge-gitops/converge/sync/remote"
)

// Cluster is one cluster SyncTargets deploy to.
type Cluster interface {
	// Name is "" for the daemon's own cluster, the kubeconfig Secret "namespace/name" of
	// a remote one.
	Name() string
	// Client returns the client acting as user ("" is the daemon, or the kubeconfig's own
	// identity). It reads straight from the API server and can watch: a cached client
	// would start a cluster-wide informer for every kind ever applied.
	Client(user string) (client.Client, error)
	// Checker returns the health Checker watching as user: a SyncTarget's objects are
	// health-checked with the rights that applied them.
	Checker(user string) (*health.Checker, error)
	// Drift returns the cluster's drift watcher for owner, nil when drift is not
	// watched; first reports a watcher new to owner, which is then to be given the
	// kinds of owner's inventory.
	Drift(owner types.NamespacedName) (w *drift.Watcher, first bool, err error)
	// Mapper is the cluster's REST mapper.
	Mapper() meta.RESTMapper
	// Capabilities are the cluster's version and the API versions it serves, for a
	// chart's .Capabilities (kept for remote.CapabilitiesTTL).
	Capabilities() (Capabilities, error)
	// ForgetCapabilities makes the next Capabilities discover them again: a
	// CustomResourceDefinition was applied there.
	ForgetCapabilities()
}

// Capabilities are what a chart's templates may ask of the cluster it is rendered for.
type Capabilities = remote.Capabilities

// Destination is what a render knows of the cluster a SyncTarget's objects go to.
type Destination struct {
	// Client is the client the SyncTarget acts with there: a chart's lookup reads through
	// it, its REST mapper tells the scope of kinds. Nil, lookup finds nothing.
	Client client.Client
	// Capabilities discovers that cluster's version and API versions, a chart's
	// .Capabilities, as helm install does; called only for a chart. Nil renders as helm
	// template does offline: the Kubernetes release of converge's client and the API
	// versions it knows.
	Capabilities func() (Capabilities, error)
}

// Clusters gives each SyncTarget its Cluster. Set is the daemon's.
type Clusters interface {
	// For returns the cluster st's objects are on.
	For(ctx context.Context, st *convergev1.SyncTarget) (Cluster, error)
	// Local is the daemon's own cluster, where every SyncTarget's Secrets, variables
	// and status are, also when its objects are on a remote one.
	Local() Cluster
	// Release lets go of what owner held on a remote cluster (it is gone).
	Release(owner types.NamespacedName)
}

// ErrNoRemote refuses a SyncTarget with spec.kubeConfig in a daemon without remote
// clusters.
var ErrNoRemote = errors.New("spec.kubeConfig: this daemon does not deploy to remote clusters")

// Local is the daemon's own cluster.
type Local struct {
	ids     *remote.Identities
	mapper  meta.RESTMapper
	checker *health.Checker
	drift   *drift.Watcher
}

// LocalOptions are what the daemon's own cluster is made of.
type LocalOptions struct {
	// Config is the daemon's client config, the base of every impersonating client.
	Config *rest.Config
	// Scheme and Mapper are the manager's.
	Scheme *runtime.Scheme
	Mapper meta.RESTMapper
	// Checker watches with the daemon's own identity; nil makes one from Config.
	Checker *health.Checker
	// Drift is the daemon's drift watcher; nil when drift is not watched.
	Drift *drift.Watcher
}

// NewLocal returns the daemon's own cluster.
func NewLocal(o LocalOptions) *Local {
	return &Local{ids: remote.NewIdentities("", o.Config, o.Scheme, o.Mapper), mapper: o.Mapper,
		checker: o.Checker, drift: o.Drift}
}

// Name implements Cluster: the daemon's cluster has none.
func (l *Local) Name() string { return "" }

// Client implements Cluster; a client is made once per user.
func (l *Local) Client(user string) (client.Client, error) { return l.ids.Client(user) }

// Checker implements Cluster; a checker is made once per user, the daemon's own is
// LocalOptions.Checker when given.
func (l *Local) Checker(user string) (*health.Checker, error) {
	if user == "" && l.checker != nil {
		return l.checker, nil
	}
	return l.ids.Checker(user)
}

// Drift implements Cluster: the daemon's watcher watches every owner's kinds from the
// apply on, so it is never new to one.
func (l *Local) Drift(types.NamespacedName) (*drift.Watcher, bool, error) { return l.drift, false, nil }

// Mapper implements Cluster.
func (l *Local) Mapper() meta.RESTMapper { return l.mapper }

// Capabilities implements Cluster.
func (l *Local) Capabilities() (Capabilities, error) { return l.ids.Capabilities() }

// ForgetCapabilities implements Cluster.
func (l *Local) ForgetCapabilities() { l.ids.ForgetCapabilities() }

// Set is the daemon's Clusters: its own, and the remote clusters of kubeconfig Secrets.
type Set struct {
	local  *Local
	remote *remote.Clusters
}

// NewSet returns the clusters of a daemon; a nil remote refuses SyncTargets with
// spec.kubeConfig.
func NewSet(local *Local, remote *remote.Clusters) *Set { return &Set{local: local, remote: remote} }

// For implements Clusters. A remote cluster's kubeconfig Secret is read again only when it
// changed (see remote.Clusters.Acquire); a SyncTarget that left its remote cluster lets
// go of it.
func (s *Set) For(ctx context.Context, st *convergev1.SyncTarget) (Cluster, error) {
	owner := types.NamespacedName{Namespace: st.Namespace, Name: st.Name}
	if st.Spec.KubeConfig == nil {
		s.Release(owner)
		return s.local, nil
	}
	if s.remote == nil {
		return nil, ErrNoRemote
	}
	c, err := s.remote.Acquire(ctx, st)
	if err != nil {
		return nil, err
	}
	return &remoteCluster{c: c, parent: s.local.drift}, nil
}

// Local implements Clusters.
func (s *Set) Local() Cluster { return s.local }

// Release implements Clusters.
func (s *Set) Release(owner types.NamespacedName) {
	if s.remote != nil {
		s.remote.Release(owner)
	}
}

// remoteCluster is a remote.Cluster as a Cluster: its drift watcher wakes SyncTargets
// through the daemon's.
type remoteCluster struct {
	c      *remote.Cluster
	parent *drift.Watcher
}

func (r *remoteCluster) Name() string                                 { return r.c.Name }
func (r *remoteCluster) Client(user string) (client.Client, error)    { return r.c.Client(user) }
func (r *remoteCluster) Checker(user string) (*health.Checker, error) { return r.c.Checker(user) }
func (r *remoteCluster) Mapper() meta.RESTMapper                      { return r.c.RESTMapper() }
func (r *remoteCluster) Capabilities() (Capabilities, error)          { return r.c.Capabilities() }
func (r *remoteCluster) ForgetCapabilities()                          { r.c.ForgetCapabilities() }

func (r *remoteCluster) Drift(owner types.NamespacedName) (*drift.Watcher, bool, error) {
	return r.c.Drift(r.parent, owner)
}

// ForCaller returns the cluster st's objects are on for a caller other than the daemon
// (the CLI, the web UI, converge diff), acting with the caller's own rights: the cluster of
// c and cfg (cfg may be nil: Capabilities then fails), or the remote one of st's
// kubeconfig Secret, read with c (see remote.ForCaller). release is never nil; call it
// when done.
func ForCaller(ctx context.Context, c client.Client, cfg *rest.Config, st *convergev1.SyncTarget,
	allowLoopback bool) (Cluster, func(), error) {
	if st.Spec.KubeConfig == nil {
		cc := &callerCluster{c: c}
		if cfg != nil {
			cc.ids = remote.NewIdentities("", cfg, c.Scheme(), c.RESTMapper())
		}
		return cc, func() {}, nil
	}
	rc, release, err := remote.ForCaller(ctx, c, c.Scheme(), st, allowLoopback)
	if err != nil {
		return nil, release, err
	}
	return &remoteCluster{c: rc}, release, nil
}

// ErrNoConfig is the Capabilities of a caller's cluster given no client config.
var ErrNoConfig = errors.New("the cluster's capabilities: no client config to discover them with")

// ErrCallerIdentity refuses another identity than the caller's own.
var ErrCallerIdentity = errors.New("a caller acts with its own rights, not as another user")

// callerCluster is the cluster of a caller's own client c.
type callerCluster struct {
	c   client.Client
	ids *remote.Identities // nil without a config
}

func (cc *callerCluster) Name() string { return "" }

func (cc *callerCluster) Client(user string) (client.Client, error) {
	if user != "" {
		return nil, ErrCallerIdentity
	}
	return cc.c, nil
}

func (cc *callerCluster) Checker(user string) (*health.Checker, error) {
	if user != "" {
		return nil, ErrCallerIdentity
	}
	return health.NewForClient(cc.c), nil
}

func (cc *callerCluster) Drift(types.NamespacedName) (*drift.Watcher, bool, error) {
	return nil, false, nil
}

func (cc *callerCluster) Mapper() meta.RESTMapper { return cc.c.RESTMapper() }

func (cc *callerCluster) Capabilities() (Capabilities, error) {
	if cc.ids == nil {
		return Capabilities{}, ErrNoConfig
	}
	return cc.ids.Capabilities()
}

func (cc *callerCluster) ForgetCapabilities() {
	if cc.ids != nil {
		cc.ids.ForgetCapabilities()
	}
}
