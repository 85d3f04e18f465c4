package notify

import (
	"context"
	"encoding/json"
	"fmt"

	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
)

// validate checks what the CRD's rules cannot: the label selector and the template.
func validate(n *convergev1.Notifier) error {
	if n.Spec.TargetSelector != nil {
		if _, err := metav1.LabelSelectorAsSelector(n.Spec.TargetSelector); err != nil {
			return fmt.Errorf("spec.targetSelector: %w", err)
		}
	}
	if _, err := parseSummary(n.Spec.Summary); err != nil {
		return err
	}
	return nil
}

// invalid reports a spec that cannot work on Ready (False, InvalidSpec); nothing is
// delivered until it is fixed, and then what happened meanwhile is.
func (r *Reconciler) invalid(ctx context.Context, n *convergev1.Notifier, cause error) error {
	before := n.DeepCopy()
	changed := apimeta.SetStatusCondition(&n.Status.Conditions, metav1.Condition{
		Type: convergev1.ReadyCondition, Status: metav1.ConditionFalse, Reason: convergev1.InvalidSpecReason,
		Message: cut(cause.Error(), 1000), ObservedGeneration: n.Generation,
	})
	if !changed && before.Status.ObservedGeneration == n.Generation {
		return nil
	}
	body, err := json.Marshal(map[string]any{"status": map[string]any{
		"conditions": n.Status.Conditions, "observedGeneration": n.Generation}})
	if err != nil {
		return err
	}
	obj := &convergev1.Notifier{}
	obj.Namespace, obj.Name = n.Namespace, n.Name
	return r.Client.Status().Patch(ctx, obj, client.RawPatch(types.MergePatchType, body))
}
