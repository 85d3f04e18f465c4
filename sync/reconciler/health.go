package reconciler

import (
	"context"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
	"github.com/converge-gitops/converge/health"
	"github.com/converge-gitops/converge/sync/cluster"
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
	// DefaultServiceAccount is impersonated for SyncTargets that name none, as by the Reconciler.
	DefaultServiceAccount string
}

// Wait implements HealthChecker: the objects are watched on the cluster they are on, with
// the identity that applied them.
func (h *WatchHealth) Wait(ctx context.Context, on cluster.Cluster, st *convergev1.SyncTarget,
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
	checker, err := on.Checker(impersonatedUser(st, h.DefaultServiceAccount))
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
