package reconciler

import (
	"context"
	"fmt"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
	"github.com/converge-gitops/converge/health"
	"github.com/converge-gitops/converge/sync/remote"
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
	// Remote holds the clusters of SyncTargets with spec.kubeConfig (the Clients' own):
	// their objects are watched there, with the same identity.
	Remote *remote.Clusters

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
	checker, err := h.checkerOf(ctx, st)
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

// checkerOf returns the Checker of the cluster st deploys to, watching with its identity.
func (h *WatchHealth) checkerOf(ctx context.Context, st *convergev1.SyncTarget) (*health.Checker, error) {
	user := impersonatedUser(st, h.DefaultServiceAccount)
	if st.Spec.KubeConfig == nil {
		return h.checkerFor(user)
	}
	ic := &ImpersonatingClients{Remote: h.Remote}
	cluster, err := ic.cluster(ctx, st)
	if err != nil {
		return nil, err
	}
	return cluster.Checker(user)
}

// checkerFor returns the Checker watching as user on the daemon's cluster; "" is the
// daemon itself.
func (h *WatchHealth) checkerFor(user string) (*health.Checker, error) {
	if user == "" || h.Config == nil {
		return h.Checker, nil
	}
	if c, ok := h.checkers.Load(user); ok {
		return c.(*health.Checker), nil
	}
	var checker *health.Checker
	var err error
	if h.Mapper == nil {
		checker, err = health.New(remote.Impersonating(h.Config, user))
	} else {
		checker, err = remote.ImpersonatingChecker(h.Config, h.Mapper, user)
	}
	if err != nil {
		return nil, fmt.Errorf("health checker for %q: %w", user, err)
	}
	c, _ := h.checkers.LoadOrStore(user, checker)
	return c.(*health.Checker), nil
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
