package remote

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
	"github.com/converge-gitops/converge/health"
	"github.com/converge-gitops/converge/internal/category"
	"github.com/converge-gitops/converge/sync/drift"
)

// Options of the remote clusters of a daemon.
type Options struct {
	// Secrets reads the kubeconfig Secrets, always in the SyncTarget's own namespace: the
	// daemon's API reader (no cache of every Secret of the cluster).
	Secrets client.Reader
	// Versions, when set, reads the metadata of Secrets from a watch's cache (the daemon's
	// cache of ConfigMaps' and Secrets' metadata): a SyncTarget keeps its cluster without
	// reading the Secret again while the Secret's resourceVersion there is the one the
	// cluster was read at. Nil, the Secret is read at every Acquire.
	Versions client.Reader
	// Scheme of the clients.
	Scheme *runtime.Scheme
	// AllowLoopback lets a remote cluster be at a loopback or link-local address, and its
	// server be plain http (tests and local development run every cluster on 127.0.0.1).
	AllowLoopback bool
	// Networks, when not empty, are the only networks a remote cluster may be in: the
	// address dialled (and a server given as an IP address, when the kubeconfig is read)
	// must be in one of them. Empty, a cluster may be at any address not refused anyway.
	Networks Networks
}

// addresses is where the options let a remote cluster be.
func (o Options) addresses() addressPolicy {
	return addressPolicy{allowLoopback: o.AllowLoopback, networks: o.Networks}
}

// ConfigError is a kubeconfig Secret that cannot be used: missing, unreadable or refused.
type ConfigError struct {
	// Secret is "namespace/name".
	Secret string
	Err    error
}

func (e *ConfigError) Error() string {
	if apierrors.IsNotFound(e.Err) {
		return fmt.Sprintf("the kubeconfig secret %s does not exist", e.Secret)
	}
	return fmt.Sprintf("kubeconfig secret %s: %v", e.Secret, e.Err)
}

func (e *ConfigError) Unwrap() error { return e.Err }

// FailureCategory says a kubeconfig Secret missing or refused is not a revision's fault:
// the SyncTarget is retried with backoff, and a fixed Secret is picked up by the retry.
func (e *ConfigError) FailureCategory() (category.Category, string) { return category.Retry, "" }

// Clusters are the remote clusters of a daemon, one per kubeconfig Secret and content.
type Clusters struct {
	opts Options

	mu     sync.Mutex
	byKey  map[string]*Cluster              // Secret "namespace/name" + "@" + content hash
	owners map[types.NamespacedName]holding // what each SyncTarget holds
}

// holding is the cluster a SyncTarget holds, and the Secret reference and resourceVersion
// it was read from.
type holding struct {
	c       *Cluster
	ref     convergev1.KubeConfigSecretReference
	version string
}

// NewClusters returns an empty set of remote clusters.
func NewClusters(opts Options) *Clusters {
	return &Clusters{opts: opts, byKey: map[string]*Cluster{}, owners: map[types.NamespacedName]holding{}}
}

// Acquire returns st's cluster, made on first use, held for st until Release or until st
// acquires another one (a rotated Secret, another Secret). The kubeconfig Secret is read
// unless st holds a cluster read from the Secret's current resourceVersion (Versions).
// Errors are *ConfigError.
func (cs *Clusters) Acquire(ctx context.Context, st *convergev1.SyncTarget) (*Cluster, error) {
	if st.Spec.KubeConfig == nil {
		return nil, errors.New("the SyncTarget has no spec.kubeConfig")
	}
	ref := st.Spec.KubeConfig.SecretRef
	name := st.Namespace + "/" + ref.Name
	owner := types.NamespacedName{Namespace: st.Namespace, Name: st.Name}
	if c := cs.unchanged(ctx, owner, ref); c != nil {
		return c, nil
	}
	data, version, err := cs.read(ctx, st.Namespace, ref)
	if err != nil {
		return nil, &ConfigError{Secret: name, Err: err}
	}
	sum := sha256.Sum256(data)
	key := name + "@" + hex.EncodeToString(sum[:])

	cs.mu.Lock()
	defer cs.mu.Unlock()
	c := cs.byKey[key]
	if c == nil {
		if c, err = newCluster(name, data, cs.opts); err != nil {
			return nil, &ConfigError{Secret: name, Err: err}
		}
		c.key = key
		cs.byKey[key] = c
	}
	if cs.owners[owner].c != c {
		cs.releaseLocked(owner)
		c.refs++
	}
	cs.owners[owner] = holding{c: c, ref: ref, version: version}
	return c, nil
}

// unchanged returns the cluster owner holds if it was read from ref at the resourceVersion
// Versions has now; nil when the Secret is to be read.
func (cs *Clusters) unchanged(ctx context.Context, owner types.NamespacedName, ref convergev1.KubeConfigSecretReference) *Cluster {
	if cs.opts.Versions == nil {
		return nil
	}
	cs.mu.Lock()
	held := cs.owners[owner]
	cs.mu.Unlock()
	if held.c == nil || held.ref != ref || held.version == "" {
		return nil
	}
	m := &metav1.PartialObjectMetadata{}
	m.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Secret"))
	if err := cs.opts.Versions.Get(ctx, client.ObjectKey{Namespace: owner.Namespace, Name: ref.Name}, m); err != nil ||
		m.ResourceVersion != held.version {
		return nil
	}
	return held.c
}

// read returns the kubeconfig of the Secret ref of namespace, and the Secret's
// resourceVersion.
func (cs *Clusters) read(ctx context.Context, namespace string, ref convergev1.KubeConfigSecretReference) ([]byte, string, error) {
	if cs.opts.Secrets == nil {
		return nil, "", errors.New("no Secret reader configured")
	}
	s := &corev1.Secret{}
	if err := cs.opts.Secrets.Get(ctx, client.ObjectKey{Namespace: namespace, Name: ref.Name}, s); err != nil {
		return nil, "", err
	}
	data, err := kubeConfigData(s.Data, ref.Key)
	return data, s.ResourceVersion, err
}

// Current returns the cluster owner holds, nil when none.
func (cs *Clusters) Current(owner types.NamespacedName) *Cluster {
	if cs == nil {
		return nil
	}
	cs.mu.Lock()
	defer cs.mu.Unlock()
	return cs.owners[owner].c
}

// Release lets go of the cluster owner holds, if any; the last owner of a cluster closes
// it. It is safe on a nil Clusters.
func (cs *Clusters) Release(owner types.NamespacedName) {
	if cs == nil {
		return
	}
	cs.mu.Lock()
	defer cs.mu.Unlock()
	cs.releaseLocked(owner)
}

func (cs *Clusters) releaseLocked(owner types.NamespacedName) {
	c := cs.owners[owner].c
	if c == nil {
		return
	}
	delete(cs.owners, owner)
	c.forget(owner)
	if c.refs--; c.refs == 0 {
		delete(cs.byKey, c.key)
		c.close()
	}
}

// Len is the number of open clusters.
func (cs *Clusters) Len() int {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	return len(cs.byKey)
}

// Cluster is one remote cluster: what every SyncTarget deploying there with the same
// kubeconfig shares.
type Cluster struct {
	// Name is the kubeconfig Secret, "namespace/name", for messages.
	Name string

	key       string
	refs      int
	config    *rest.Config
	transport *http.Transport
	mapper    meta.RESTMapper
	ids       *Identities
	ctx       context.Context
	cancel    context.CancelFunc

	mu      sync.Mutex
	drift   *drift.Watcher
	watched map[types.NamespacedName]bool // owners whose kinds the drift watcher was given
	closed  bool
}

// newCluster parses a kubeconfig and prepares its cluster; nothing is sent to it yet.
func newCluster(name string, data []byte, opts Options) (*Cluster, error) {
	cfg, err := parse(data, opts.addresses())
	if err != nil {
		return nil, err
	}
	cfg, t, err := withTransport(cfg, name, opts.addresses())
	if err != nil {
		return nil, err
	}
	httpClient, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, err
	}
	mapper, err := apiutil.NewDynamicRESTMapper(cfg, httpClient)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Cluster{Name: name, config: cfg, transport: t, mapper: mapper, ctx: ctx, cancel: cancel,
		ids: NewIdentities(name, cfg, opts.Scheme, mapper), watched: map[types.NamespacedName]bool{}}, nil
}

// Client returns the client acting as user ("" for the kubeconfig's own identity); its
// RESTMapper is the cluster's.
func (c *Cluster) Client(user string) (client.Client, error) { return c.ids.Client(user) }

// Checker returns the health Checker watching as user.
func (c *Cluster) Checker(user string) (*health.Checker, error) { return c.ids.Checker(user) }

// RESTMapper is the cluster's REST mapper, filled lazily from its discovery.
func (c *Cluster) RESTMapper() meta.RESTMapper { return c.mapper }

// Capabilities returns the cluster's version and API versions (see
// Identities.Capabilities).
func (c *Cluster) Capabilities() (Capabilities, error) { return c.ids.Capabilities() }

// ForgetCapabilities makes the next Capabilities discover them again.
func (c *Cluster) ForgetCapabilities() { c.ids.ForgetCapabilities() }

// Drift returns the cluster's drift watcher, made on first use beside parent (its wakeups
// go to parent's Events) with the kubeconfig's own identity; first reports whether owner
// asks for it for the first time, when the kinds it manages are to be watched. Nil once the
// cluster is closed.
func (c *Cluster) Drift(parent *drift.Watcher, owner types.NamespacedName) (w *drift.Watcher, first bool, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed || parent == nil {
		return nil, false, nil
	}
	if c.drift == nil {
		md, err := metadata.NewForConfig(c.config)
		if err != nil {
			return nil, false, err
		}
		c.drift = parent.ForCluster(c.ctx, md, c.mapper)
	}
	first = !c.watched[owner]
	c.watched[owner] = true
	return c.drift, first, nil
}

// forget drops what the cluster's drift watcher noted of owner.
func (c *Cluster) forget(owner types.NamespacedName) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.watched, owner)
	c.drift.Forget(owner)
}

// close stops the drift informers and closes the idle connections.
func (c *Cluster) close() {
	c.mu.Lock()
	c.closed = true
	c.mu.Unlock()
	c.cancel()
	c.transport.CloseIdleConnections()
}

// Closed reports whether the cluster was closed (no SyncTarget holds it any more).
func (c *Cluster) Closed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closed
}

// ForCaller returns st's remote cluster for a caller other than the daemon (`converge
// diff`, `converge tree`, the web UI's pending diff): the kubeconfig Secret is read with r,
// the caller's own rights, and refused as the daemon refuses it. Its clients act with the
// kubeconfig's own identity: whoever may read the Secret holds those credentials anyway.
// It is nil for a SyncTarget without spec.kubeConfig. release closes the cluster; it is
// never nil.
func ForCaller(ctx context.Context, r client.Reader, scheme *runtime.Scheme, st *convergev1.SyncTarget,
	allowLoopback bool) (cluster *Cluster, release func(), err error) {
	release = func() {}
	if st.Spec.KubeConfig == nil {
		return nil, release, nil
	}
	cs := NewClusters(Options{Secrets: r, Scheme: scheme, AllowLoopback: allowLoopback})
	if cluster, err = cs.Acquire(ctx, st); err != nil {
		return nil, release, err
	}
	return cluster, func() { cs.Release(types.NamespacedName{Namespace: st.Namespace, Name: st.Name}) }, nil
}
