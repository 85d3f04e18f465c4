package apply

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/fluxcd/pkg/ssa"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
)

// Taking over objects another tool made.
//
// When converge applies an object that another tool wrote (Flux, Helm, Argo CD, kubectl),
// the server-side apply alone would leave the other tool's field manager owning the
// fields Git does not set: they would stay in the object for ever. So before converge's
// apply, the fields of the managedFields entries of those tools (TakeoverManagers) are
// merged into converge's apply entry (see handOver), and kubectl's
// last-applied-configuration annotation is removed, in one JSON patch of the live
// object's metadata, guarded by its resourceVersion. converge is then the owner of those
// fields, and its apply removes those Git does not set. The labels and annotations the
// other tools leave (otherToolPrefixes and the others of otherToolLabels) are the
// exception: unless the takeover cleans up (Applier.CleanUpOtherTools), those Git does
// not set stay owned by their tool's entry, which keeps only them, so they stay on the
// object; with the clean-up they are removed in the same patch. The object is
// changed in place: same UID, and a Deployment whose template Git leaves as it is does
// not roll out (fields the API server defaults are defaulted again to the same values).
//
// A takeover never crosses the ownership between SyncTargets: an object whose live labels
// name another SyncTarget is not taken over here (CheckOwnership decides whether it may
// be adopted at all), nor is one whose Policy says Merge.

// TakeoverManagers are the field managers, with their operations, whose fields converge
// takes over: Flux's kustomize-controller and helm-controller, the Helm SDK, Argo CD
// (server-side or client-side apply), and kubectl (client-side apply, edit, patch,
// create, replace, label, annotate, set, server-side apply), and the API server's
// before-first-apply. Entries of subresources (status, scale) are never taken over.
var TakeoverManagers = takeoverManagers(map[string][]metav1.ManagedFieldsOperationType{
	"kustomize-controller":      {metav1.ManagedFieldsOperationApply, metav1.ManagedFieldsOperationUpdate},
	"helm-controller":           {metav1.ManagedFieldsOperationApply, metav1.ManagedFieldsOperationUpdate},
	"helm":                      {metav1.ManagedFieldsOperationApply, metav1.ManagedFieldsOperationUpdate},
	"argocd-controller":         {metav1.ManagedFieldsOperationApply, metav1.ManagedFieldsOperationUpdate},
	"kubectl-client-side-apply": {metav1.ManagedFieldsOperationUpdate},
	"kubectl-edit":              {metav1.ManagedFieldsOperationUpdate},
	"kubectl-patch":             {metav1.ManagedFieldsOperationUpdate},
	"kubectl-create":            {metav1.ManagedFieldsOperationUpdate},
	"kubectl-replace":           {metav1.ManagedFieldsOperationUpdate},
	"kubectl-label":             {metav1.ManagedFieldsOperationUpdate},
	"kubectl-annotate":          {metav1.ManagedFieldsOperationUpdate},
	"kubectl-set":               {metav1.ManagedFieldsOperationUpdate},
	"kubectl":                   {metav1.ManagedFieldsOperationApply, metav1.ManagedFieldsOperationUpdate},
	"before-first-apply":        {metav1.ManagedFieldsOperationUpdate},
})

func takeoverManagers(ops map[string][]metav1.ManagedFieldsOperationType) []ssa.FieldManager {
	var out []ssa.FieldManager
	for name, types := range ops {
		for _, op := range types {
			out = append(out, ssa.FieldManager{Name: name, ExactMatch: true, OperationType: op})
		}
	}
	return out
}

// Metadata other tools leave on the objects they manage, removed by a takeover with
// Applier.CleanUpOtherTools unless Git sets it: keys under these prefixes, Helm's chart
// label and its managed-by: Helm, and the app.kubernetes.io/instance label when Argo CD
// tracks the object by it (it has Argo CD's field manager and no tracking-id annotation).
var otherToolPrefixes = []string{
	"kustomize.toolkit.fluxcd.io/", "helm.toolkit.fluxcd.io/", "argocd.argoproj.io/", "meta.helm.sh/",
}

const (
	helmChartLabel      = "helm.sh/chart"
	managedByLabel      = "app.kubernetes.io/managed-by"
	instanceLabel       = "app.kubernetes.io/instance"
	argoTrackingIDKey   = "argocd.argoproj.io/tracking-id"
	argoFieldManager    = "argocd-controller"
	helmManagedByValue  = "Helm"
	lastAppliedAnnotKey = corev1.LastAppliedConfigAnnotation
)

// TakesOver reports whether applying desired over live takes live over from another
// tool: live has fields of TakeoverManagers or kubectl's last-applied-configuration (or,
// with cleanUp, another tool's labels or annotations that Git does not set), its labels
// name no other SyncTarget, and neither policy says Merge.
func TakesOver(desired, live *unstructured.Unstructured, cleanUp bool) bool {
	ops, err := takeoverOps(desired, live, cleanUp)
	return err == nil && len(ops) > 0
}

// takeoverOps are the JSON patch operations of a takeover of live (none when there is
// nothing to take over), after a test of its resourceVersion. With cleanUp, the other
// tools' labels and annotations that Git does not set are removed; without it they stay,
// and so do their fields in the other tools' entries (see handOver), so that converge's
// apply, which does not set them, leaves them on the object.
func takeoverOps(desired, live *unstructured.Unstructured, cleanUp bool) ([]any, error) {
	if live == nil || Policy(desired).Or(Policy(live)).Merge || claimedByOther(desired, live) {
		return nil, nil
	}
	labels := otherToolLabels(desired, live)
	annotations := otherToolKeys(desired.GetAnnotations(), live.GetAnnotations())
	var keep *metav1.FieldsV1
	if !cleanUp {
		keep, labels, annotations = metadataFields(labels, annotations), nil, nil
	}
	managers, err := handOver(live, keep)
	if err != nil {
		return nil, err
	}
	var ops []any
	if managers != nil {
		ops = append(ops, ssa.NewPatchReplace("/metadata/managedFields", managers))
	}
	for _, p := range ssa.PatchRemoveAnnotations(live, append(annotations, lastAppliedAnnotKey)) {
		ops = append(ops, p)
	}
	for _, p := range ssa.PatchRemoveLabels(live, labels) {
		ops = append(ops, p)
	}
	if len(ops) == 0 {
		return nil, nil
	}
	test := map[string]string{"op": "test", "path": "/metadata/resourceVersion", "value": live.GetResourceVersion()}
	return append([]any{test}, ops...), nil
}

// metadataFields is the field set (in managedFields' fieldsV1 form) of the given labels
// and annotations, nil when there are none.
func metadataFields(labels, annotations []string) *metav1.FieldsV1 {
	metadata := map[string]any{}
	for field, keys := range map[string][]string{"f:labels": labels, "f:annotations": annotations} {
		if len(keys) == 0 {
			continue
		}
		m := map[string]any{}
		for _, k := range keys {
			m["f:"+k] = map[string]any{}
		}
		metadata[field] = m
	}
	if len(metadata) == 0 {
		return nil
	}
	raw, _ := json.Marshal(map[string]any{"f:metadata": metadata}) // maps of strings always marshal
	return metav1.NewFieldsV1(string(raw))
}

// handOver returns live's managedFields with the fields of the TakeoverManagers' entries
// merged into converge's apply entry (renamed to it when there is none), as fluxcd/pkg/ssa's
// PatchReplaceFieldsManagers does, except for the fields in keep: those stay with their
// manager, in an entry of the same manager and operation that holds only them. An entry
// that holds nothing but kept fields is left as it is. nil when no entry hands anything over.
func handOver(live *unstructured.Unstructured, keep *metav1.FieldsV1) ([]metav1.ManagedFieldsEntry, error) {
	entries := live.GetManagedFields()
	out := make([]metav1.ManagedFieldsEntry, 0, len(entries)+1)
	var own *metav1.ManagedFieldsEntry
	for i, e := range entries {
		if e.Manager == FieldManager && e.Operation == metav1.ManagedFieldsOperationApply && e.Subresource == "" {
			own = &entries[i]
		}
	}
	handed := false
	for _, e := range entries {
		if own != nil && e.Manager == own.Manager && e.Operation == own.Operation && e.Subresource == "" {
			continue // appended, with what it takes over, at the end
		}
		if !takenOver(e) {
			out = append(out, e)
			continue
		}
		moved, kept, err := splitFields(e.FieldsV1, keep)
		if err != nil {
			return nil, fmt.Errorf("reading the fields of %s: %w", e.Manager, err)
		}
		if moved == nil && kept != nil {
			out = append(out, e) // all its fields stay with it
			continue
		}
		if kept != nil {
			residual := e
			residual.FieldsV1 = kept
			out = append(out, residual)
		}
		if own, err = merged(own, e, moved); err != nil {
			return nil, err
		}
		handed = true
	}
	if !handed {
		return nil, nil
	}
	return append(out, *own), nil
}

// takenOver reports whether e is an entry of one of the TakeoverManagers.
func takenOver(e metav1.ManagedFieldsEntry) bool {
	for _, m := range TakeoverManagers {
		if e.Manager == m.Name && e.Operation == m.OperationType && e.Subresource == "" {
			return true
		}
	}
	return false
}

// splitFields splits fields into those not in keep and those in keep (which may be nil),
// each nil when empty.
func splitFields(fields, keep *metav1.FieldsV1) (moved, kept *metav1.FieldsV1, err error) {
	if fields == nil || keep == nil {
		return fields, nil, nil
	}
	set, err := ssa.FieldsToSet(*fields)
	if err != nil {
		return nil, nil, err
	}
	keepSet, err := ssa.FieldsToSet(*keep)
	if err != nil {
		return nil, nil, err
	}
	rest, held := set.Difference(&keepSet), set.Intersection(&keepSet)
	if moved, err = nonEmpty(rest.Empty(), rest.ToJSON); err != nil {
		return nil, nil, err
	}
	kept, err = nonEmpty(held.Empty(), held.ToJSON)
	return moved, kept, err
}

// nonEmpty is the fieldsV1 of a set given its emptiness and its JSON, nil when empty.
func nonEmpty(empty bool, toJSON func() ([]byte, error)) (*metav1.FieldsV1, error) {
	if empty {
		return nil, nil
	}
	raw, err := toJSON()
	if err != nil {
		return nil, err
	}
	return metav1.NewFieldsV1(string(raw)), nil
}

// merged is converge's apply entry own with the fields moved from the entry from added;
// from renamed to converge's apply entry when own is nil.
func merged(own *metav1.ManagedFieldsEntry, from metav1.ManagedFieldsEntry, moved *metav1.FieldsV1) (*metav1.ManagedFieldsEntry, error) {
	if own == nil {
		e := from
		e.Manager, e.Operation, e.FieldsV1 = FieldManager, metav1.ManagedFieldsOperationApply, moved
		return &e, nil
	}
	e := *own
	if moved == nil {
		return &e, nil
	}
	if e.FieldsV1 == nil {
		e.FieldsV1 = moved
		return &e, nil
	}
	a, err := ssa.FieldsToSet(*e.FieldsV1)
	if err != nil {
		return nil, fmt.Errorf("reading converge's fields: %w", err)
	}
	b, err := ssa.FieldsToSet(*moved)
	if err != nil {
		return nil, err
	}
	union, err := ssa.SetToFields(*a.Union(&b))
	if err != nil {
		return nil, err
	}
	e.FieldsV1 = &union
	return &e, nil
}

// claimedByOther reports whether live's owner labels name a SyncTarget desired's do not.
func claimedByOther(desired, live *unstructured.Unstructured) bool {
	name, ok := live.GetLabels()[convergev1.NameLabel]
	if !ok {
		return false
	}
	d := desired.GetLabels()
	return name != d[convergev1.NameLabel] || live.GetLabels()[convergev1.NamespaceLabel] != d[convergev1.NamespaceLabel]
}

// otherToolKeys are the keys of live under otherToolPrefixes that desired does not set.
func otherToolKeys(desired, live map[string]string) []string {
	var keys []string
	for k := range live {
		if _, set := desired[k]; set {
			continue
		}
		for _, p := range otherToolPrefixes {
			if strings.HasPrefix(k, p) {
				keys = append(keys, k)
				break
			}
		}
	}
	return keys
}

// otherToolLabels are the labels of other tools on live that desired does not set.
func otherToolLabels(desired, live *unstructured.Unstructured) []string {
	want, have := desired.GetLabels(), live.GetLabels()
	keys := otherToolKeys(want, have)
	unset := func(k string) bool { _, set := want[k]; return !set }
	if unset(helmChartLabel) {
		keys = append(keys, helmChartLabel)
	}
	if unset(managedByLabel) && have[managedByLabel] == helmManagedByValue {
		keys = append(keys, managedByLabel)
	}
	if unset(instanceLabel) && trackedByArgoLabel(live) {
		keys = append(keys, instanceLabel)
	}
	return keys
}

// trackedByArgoLabel reports whether Argo CD tracks live by its app.kubernetes.io/instance
// label: Argo CD manages fields of it and it carries no tracking-id annotation.
func trackedByArgoLabel(live *unstructured.Unstructured) bool {
	if _, annotated := live.GetAnnotations()[argoTrackingIDKey]; annotated {
		return false
	}
	for _, e := range live.GetManagedFields() {
		if e.Manager == argoFieldManager {
			return true
		}
	}
	return false
}

// takeOver patches the live object of desired so that converge owns the fields of the
// other tools (see TakeoverManagers), reading it afresh and trying again when it changed
// in between.
func takeOver(ctx context.Context, c client.Client, desired *unstructured.Unstructured, cleanUp bool) error {
	changed := func(err error) bool { return apierrors.IsConflict(err) || apierrors.IsInvalid(err) }
	return retry.OnError(retry.DefaultRetry, changed, func() error {
		live := &unstructured.Unstructured{}
		live.SetGroupVersionKind(desired.GroupVersionKind())
		if err := c.Get(ctx, client.ObjectKeyFromObject(desired), live); err != nil {
			return err
		}
		ops, err := takeoverOps(desired, live, cleanUp)
		if err != nil || len(ops) == 0 {
			return err
		}
		patch, err := json.Marshal(ops)
		if err != nil {
			return err
		}
		if err := c.Patch(ctx, live, client.RawPatch(types.JSONPatchType, patch), client.FieldOwner(FieldManager)); err != nil {
			return fmt.Errorf("taking it over from %s: %w", otherManagers(live), err)
		}
		return nil
	})
}

// otherManagers names the managers of live that a takeover removes, for messages.
func otherManagers(live *unstructured.Unstructured) string {
	var names []string
	seen := map[string]bool{}
	for _, e := range live.GetManagedFields() {
		for _, m := range TakeoverManagers {
			if e.Manager == m.Name && e.Operation == m.OperationType && e.Subresource == "" && !seen[e.Manager] {
				seen[e.Manager] = true
				names = append(names, e.Manager)
			}
		}
	}
	if len(names) == 0 {
		return "other tools"
	}
	return strings.Join(names, ", ")
}
