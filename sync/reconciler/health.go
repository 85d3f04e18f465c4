package reconciler

import (
	"context"
	"fmt"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
	"github.com/converge-gitops/converge/health"
)

// WatchHealth is the HealthChecker of the daemon: every applied object plus the
// SyncTarget's extra healthChecks, judged by kstatus or its CEL rules, learned from
// watches narrowed by the owner labels.
//
// Objects are watched with the identity that applied them: a SyncTarget that impersonates
// a service account (its own or DefaultServiceAccount) is health-checked with that
// account's rights, so that a locked-down daemon needs no read access to what tenants
// deploy, and a tenant cannot learn through health checks what it may not read.
type WatchHealth struct {
	// Checker watches with the daemon's own identity, for SyncTargets that impersonate no one.
	Checker *health.Checker
	// Config is the daemon's client config, the base of the impersonating Checkers.
	Config *rest.Config
	// Mapper is shared by the impersonating Checkers.
	Mapper meta.RESTMapper
	// DefaultServiceAccount is impersonated for SyncTargets that name none, as by the Reconciler.
	DefaultServiceAccount string

	checkers sync.Map // impersonated user → *health.Checker
}

// Wait implements HealthChecker.
func (h *WatchHealth) Wait(ctx context.Context, _ client.Client, st *convergev1.SyncTarget,
	objects, observed []*unstructured.Unstructured, since time.Time, timeout time.Duration, onSlow func()) error {
	refs := make([]health.ObjectRef, 0, len(objects)+len(st.Spec.HealthChecks))
	for _, o := range objects {
		refs = append(refs, health.RefForObject(o))
	}
	for _, hc := range st.Spec.HealthChecks {
		ref, err := health.RefForReference(hc, st.Spec.TargetNamespace)
		if err != nil {
			return err
		}
		refs = append(refs, ref)
	}
	checker, err := h.checkerFor(impersonatedUser(st, h.DefaultServiceAccount))
	if err != nil {
		return err
	}
	_, err = checker.Wait(ctx, refs, health.Options{
		Timeout:  timeout,
		Exprs:    st.Spec.HealthCheckExprs,
		Selector: labels.SelectorFromSet(st.OwnerLabels()),
		Since:    since,
		Observed: observed,
		Slow:     slowWait,
		OnSlow: func(health.Report) {
			if onSlow != nil {
				onSlow()
			}
		},
	})
	return err
}

// checkerFor returns the Checker watching as user; "" is the daemon itself.
func (h *WatchHealth) checkerFor(user string) (*health.Checker, error) {
	if user == "" || h.Config == nil {
		return h.Checker, nil
	}
	if c, ok := h.checkers.Load(user); ok {
		return c.(*health.Checker), nil
	}
	checker, err := newImpersonatingChecker(h.Config, h.Mapper, user)
	if err != nil {
		return nil, fmt.Errorf("health checker for %q: %w", user, err)
	}
	c, _ := h.checkers.LoadOrStore(user, checker)
	return c.(*health.Checker), nil
}

// newImpersonatingChecker returns a Checker watching as user, with the REST mapper
// given (one per identity is not needed: discovery is open to every user), else its own.
func newImpersonatingChecker(base *rest.Config, mapper meta.RESTMapper, user string) (*health.Checker, error) {
	cfg := rest.CopyConfig(base)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user}
	if mapper == nil {
		return health.New(cfg)
	}
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

// impersonatedUser is the user a SyncTarget acts as: its service account, else the
// daemon's default one, else "" (the daemon itself).
func impersonatedUser(st *convergev1.SyncTarget, defaultServiceAccount string) string {
	sa := st.Spec.ServiceAccountName
	if sa == "" {
		sa = defaultServiceAccount
	}
	if sa == "" {
		return ""
	}
	return fmt.Sprintf("system:serviceaccount:%s:%s", st.Namespace, sa)
}
