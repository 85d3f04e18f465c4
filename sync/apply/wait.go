package apply

import (
	"context"
	"fmt"
	"time"

	"github.com/fluxcd/cli-utils/pkg/kstatus/polling"
	kstatus "github.com/fluxcd/cli-utils/pkg/kstatus/status"
	"github.com/fluxcd/pkg/ssa"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
)

// waitForStage waits until the objects of a stage that later stages may depend on are
// ready. A Namespace or ClusterRole is ready once it exists, as the API server's answer
// shows; a new CRD needs a moment to be Established: only such objects are polled. Then,
// as an Established CRD is not always in discovery yet, the kinds of the stage's CRDs are
// waited for too, or the objects of those kinds that come next would fail their dry-run
// with "no matches for kind".
func waitForStage(ctx context.Context, c client.Client, objects []*unstructured.Unstructured,
	entries []ssa.ChangeSetEntry, got []*unstructured.Unstructured, timeout time.Duration) error {
	var unready []ssa.ChangeSetEntry
	for i, e := range entries {
		if !isCurrent(got[i]) {
			unready = append(unready, e)
		}
	}
	if len(unready) > 0 {
		poller := polling.NewStatusPoller(c, c.RESTMapper(), polling.Options{})
		rm := ssa.NewResourceManager(c, poller, ssa.Owner{Field: FieldManager, Group: convergev1.GroupVersion.Group})
		set := (&ssa.ChangeSet{Entries: unready}).ToObjMetadataSet()
		if err := rm.WaitForSet(set, ssa.WaitOptions{Interval: 200 * time.Millisecond, Timeout: timeout}); err != nil {
			return err
		}
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
		if o.GroupVersionKind().GroupKind() != (schema.GroupKind{Group: "apiextensions.k8s.io", Kind: "CustomResourceDefinition"}) {
			continue
		}
		group, _, _ := unstructured.NestedString(o.Object, "spec", "group")
		name, _, _ := unstructured.NestedString(o.Object, "spec", "names", "kind")
		versions, _, _ := unstructured.NestedSlice(o.Object, "spec", "versions")
		for _, v := range versions {
			m, _ := v.(map[string]any)
			version, _ := m["name"].(string)
			if served, _ := m["served"].(bool); served && version != "" {
				kinds = append(kinds, kind{schema.GroupKind{Group: group, Kind: name}, version})
			}
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

// isCurrent reports whether kstatus finds o (as the API server returned it) ready.
func isCurrent(o *unstructured.Unstructured) bool {
	if o == nil {
		return false
	}
	res, err := kstatus.Compute(o)
	return err == nil && res.Status == kstatus.CurrentStatus
}
