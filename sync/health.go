package sync

import (
	"context"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/client"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
	"github.com/converge-gitops/converge/health"
)

// WatchHealth is the HealthChecker of the daemon: every applied object plus the
// SyncTarget's extra healthChecks, judged by kstatus or its CEL rules, learned from
// watches narrowed by the owner labels.
type WatchHealth struct {
	Checker *health.Checker
}

// Wait implements HealthChecker.
func (h WatchHealth) Wait(ctx context.Context, _ client.Client, st *convergev1.SyncTarget,
	objects []*unstructured.Unstructured, since time.Time, timeout time.Duration) error {
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
	_, err := h.Checker.Wait(ctx, refs, health.Options{
		Timeout:  timeout,
		Exprs:    st.Spec.HealthCheckExprs,
		Selector: labels.SelectorFromSet(st.OwnerLabels()),
		Since:    since,
	})
	return err
}
