package remote

import (
	"fmt"
	"sync"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
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
