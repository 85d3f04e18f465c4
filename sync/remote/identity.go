package remote

import (
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/converge-gitops/converge/health"
)

// Impersonating returns a copy of base acting as user ("" leaves it as it is).
func Impersonating(base *rest.Config, user string) *rest.Config {
	cfg := rest.CopyConfig(base)
	if user != "" {
		cfg.Impersonate = rest.ImpersonationConfig{UserName: user}
	}
	return cfg
}

// ImpersonatingChecker returns a health Checker watching as user through base, with
// mapper (discovery is open to every user, one mapper serves them all).
func ImpersonatingChecker(base *rest.Config, mapper meta.RESTMapper, user string) (*health.Checker, error) {
	cfg := Impersonating(base, user)
	httpClient, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, err
	}
	dyn, err := dynamic.NewForConfigAndClient(cfg, httpClient)
	if err != nil {
		return nil, err
	}
	md, err := metadata.NewForConfigAndClient(cfg, httpClient)
	if err != nil {
		return nil, err
	}
	return health.NewForClients(dyn, md, mapper), nil
}

// Identities keeps, per impersonated user, the client and the health checker of one
// cluster: a remote one, or the daemon's own (sync/cluster).
type Identities struct {
	name   string // the kubeconfig Secret of a remote cluster, for errors; "" for the daemon's
	config *rest.Config
	scheme *runtime.Scheme
	mapper meta.RESTMapper

	mu       sync.Mutex
	clients  map[string]client.Client
	checkers map[string]*health.Checker
	caps     Capabilities
	capsAt   time.Time
}

// NewIdentities returns the identities of the cluster of cfg. name, when not empty, is the
// kubeconfig Secret of a remote cluster, which the clients' errors name.
func NewIdentities(name string, cfg *rest.Config, scheme *runtime.Scheme, mapper meta.RESTMapper) *Identities {
	return &Identities{name: name, config: cfg, scheme: scheme, mapper: mapper,
		clients: map[string]client.Client{}, checkers: map[string]*health.Checker{}}
}

// Client returns the client acting as user ("" for cfg's own identity), made on first
// use. It reads straight from the API server and can watch (an apply's stage waits watch).
func (ids *Identities) Client(user string) (client.Client, error) {
	ids.mu.Lock()
	defer ids.mu.Unlock()
	if c, ok := ids.clients[user]; ok {
		return c, nil
	}
	c, err := client.NewWithWatch(Impersonating(ids.config, user), client.Options{Scheme: ids.scheme, Mapper: ids.mapper})
	if err != nil {
		return nil, fmt.Errorf("client for %q: %w", user, err)
	}
	var out client.Client = c
	if ids.name != "" {
		out = nameErrors(c, ids.name)
	}
	ids.clients[user] = out
	return out, nil
}

// Checker returns the health Checker watching as user, made on first use.
func (ids *Identities) Checker(user string) (*health.Checker, error) {
	ids.mu.Lock()
	defer ids.mu.Unlock()
	if c, ok := ids.checkers[user]; ok {
		return c, nil
	}
	c, err := ImpersonatingChecker(ids.config, ids.mapper, user)
	if err != nil {
		return nil, fmt.Errorf("health checker for %q: %w", user, err)
	}
	ids.checkers[user] = c
	return c, nil
}

// Capabilities are what a chart's templates may ask of the cluster it is rendered for
// (Helm's .Capabilities): the cluster's version and the API versions it serves.
type Capabilities struct {
	// KubeVersion is the API server's version, e.g. "v1.35.0".
	KubeVersion string
	// APIVersions are the group versions served, "apps/v1", and each kind in them,
	// "apps/v1/Deployment" (a subresource's kind too, "apps/v1/Scale", as helm install
	// lists them), sorted.
	APIVersions []string
}

// CapabilitiesTTL is how long the capabilities of a cluster are kept before discovery is
// asked again: a CRD installed since is seen within it.
const CapabilitiesTTL = 5 * time.Minute

// discoveryTimeout bounds the discovery of the capabilities.
const discoveryTimeout = 30 * time.Second

// Capabilities returns the cluster's capabilities, from discovery with the cluster's own
// identity (discovery is open to every user), kept for CapabilitiesTTL: every group version
// served and every kind in them, as helm install finds them. The kinds of an API group
// whose discovery fails (an aggregated API away) are left out rather than failing the rest.
func (ids *Identities) Capabilities() (Capabilities, error) {
	ids.mu.Lock()
	if !ids.capsAt.IsZero() && time.Since(ids.capsAt) < CapabilitiesTTL {
		defer ids.mu.Unlock()
		return ids.caps, nil
	}
	ids.mu.Unlock()
	caps, err := discover(ids.config)
	if err != nil {
		err = fmt.Errorf("discovering the cluster's capabilities: %w", err)
		if ids.name != "" {
			err = nameError(ids.name, err)
		}
		return Capabilities{}, err
	}
	ids.mu.Lock()
	ids.caps, ids.capsAt = caps, time.Now()
	ids.mu.Unlock()
	return caps, nil
}

// ForgetCapabilities makes the next Capabilities ask discovery again: the daemon applied a
// CustomResourceDefinition there, whose API a chart rendered next may ask for.
func (ids *Identities) ForgetCapabilities() {
	ids.mu.Lock()
	ids.capsAt = time.Time{}
	ids.mu.Unlock()
}

func discover(base *rest.Config) (Capabilities, error) {
	cfg := rest.CopyConfig(base)
	cfg.Timeout = discoveryTimeout
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return Capabilities{}, err
	}
	v, err := dc.ServerVersion()
	if err != nil {
		return Capabilities{}, err
	}
	groups, lists, err := dc.ServerGroupsAndResources()
	if err != nil && !discovery.IsGroupDiscoveryFailedError(err) {
		return Capabilities{}, err
	}
	seen := map[string]bool{}
	for _, g := range groups {
		for _, gv := range g.Versions {
			seen[gv.GroupVersion] = true
		}
	}
	for _, l := range lists {
		seen[l.GroupVersion] = true
		for _, r := range l.APIResources {
			if r.Kind != "" { // as helm install lists them, the kinds of subresources too
				seen[l.GroupVersion+"/"+r.Kind] = true
			}
		}
	}
	if len(seen) == 0 {
		return Capabilities{}, errors.New("discovery listed no API")
	}
	out := Capabilities{KubeVersion: v.GitVersion, APIVersions: make([]string, 0, len(seen))}
	for gv := range seen {
		out.APIVersions = append(out.APIVersions, gv)
	}
	sort.Strings(out.APIVersions)
	return out, nil
}
