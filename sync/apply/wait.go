package apply

import (
	"context"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/converge-gitops/converge/health"
	"github.com/converge-gitops/converge/internal/crdkinds"
)

// waitForStage waits, through the health engine (health.Checker, reading with c's
// identity), until the objects of a stage that later stages may depend on are ready:
// Current in kstatus' terms, a CRD once Established, a Namespace once Active. What the
// API server answered the apply (got) settles the objects it shows ready already, a
// Namespace or a ClusterRole, so that only the others (a new CRD, for a moment) are
// watched. Then, as an Established CRD is not always in discovery yet, the kinds of the
// stage's CRDs are waited for too, or the objects of those kinds that come next would
// fail their dry-run with "no matches for kind". Both waits are bounded by timeout.
func waitForStage(ctx context.Context, c client.Client, stage int, objects, got []*unstructured.Unstructured,
	timeout time.Duration) error {
	refs := make([]health.ObjectRef, len(objects))
	for i, o := range objects {
		refs[i] = health.RefForObject(o)
	}
	opts := health.Options{Timeout: timeout, Observed: got}
	if owner := ownerLabels(objects); owner != nil {
		opts.Selector = labels.SelectorFromSet(labels.Set(owner))
	}
	if _, err := health.NewForClient(c).Wait(ctx, refs, opts); err != nil {
		return fmt.Errorf("%s not ready for the next stage: %w", stageNames[stage], err)
	}
	return waitForKinds(ctx, c.RESTMapper(), objects, timeout)
}

// waitForKinds waits until the REST mapper knows every served version of the kinds the
// CRDs among objects define.
func waitForKinds(ctx context.Context, mapper meta.RESTMapper, objects []*unstructured.Unstructured, timeout time.Duration) error {
	type kind struct {
		gk      schema.GroupKind
		version string
	}
	var kinds []kind
	for _, o := range objects {
		for _, gvk := range crdkinds.Served(o) {
			kinds = append(kinds, kind{gvk.GroupKind(), gvk.Version})
		}
	}
	var missing kind
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		for _, k := range kinds {
			if _, err := mapper.RESTMapping(k.gk, k.version); err != nil {
				missing = k
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("%s %s/%s is not served yet: %w", missing.gk.Kind, missing.gk.Group, missing.version, err)
	}
	return nil
}
