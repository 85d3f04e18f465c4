package sync

import (
	"context"
	"fmt"
	"time"

	"github.com/fluxcd/cli-utils/pkg/kstatus/polling"
	"github.com/fluxcd/pkg/ssa"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
)

// FieldManager is the server-side apply field manager of everything converge applies.
const FieldManager = "converge"

// ForceAnnotation set to "enabled" on an object lets converge delete and recreate it when
// a change touches an immutable field; without it such a change is reported, not forced.
const ForceAnnotation = "converge.dev/force"

// ApplyResult counts what an apply did.
type ApplyResult struct {
	ChangeSet  *ssa.ChangeSet
	Created    int
	Configured int
	Unchanged  int
}

// Applier applies rendered objects with server-side apply, in stages: CRDs, Namespaces
// and ClusterRoles first (and waited for), then class definitions, then the rest. Every
// object of a stage is dry-run before any object of it is written, so an invalid object
// leaves the stage untouched.
type Applier struct {
	// Concurrency of the dry-runs and reads of one stage.
	Concurrency int
}

// Apply applies objects through c (an impersonating client when the SyncTarget names a
// service account). The objects must carry their owner labels already.
func (a Applier) Apply(ctx context.Context, c client.Client, objects []*unstructured.Unstructured, timeout time.Duration) (ApplyResult, error) {
	poller := polling.NewStatusPoller(c, c.RESTMapper(), polling.Options{})
	rm := ssa.NewResourceManager(c, poller, ssa.Owner{Field: FieldManager, Group: convergev1.GroupVersion.Group})
	if a.Concurrency > 0 {
		rm.SetConcurrency(a.Concurrency)
	}
	opts := ssa.DefaultApplyOptions()
	opts.WaitInterval = 200 * time.Millisecond
	opts.WaitTimeout = timeout
	opts.ForceSelector = map[string]string{ForceAnnotation: "enabled"}
	opts.ExclusionSelector = map[string]string{convergev1.ReconcileAnnotation: convergev1.DisabledValue}

	cs, err := rm.ApplyAllStaged(ctx, objects, opts)
	res := ApplyResult{ChangeSet: cs}
	if cs != nil {
		for _, e := range cs.Entries {
			switch e.Action {
			case ssa.CreatedAction:
				res.Created++
			case ssa.ConfiguredAction:
				res.Configured++
			default:
				res.Unchanged++
			}
		}
	}
	if err != nil {
		return res, fmt.Errorf("apply failed: %w", err)
	}
	return res, nil
}
