// Package hooks runs the hooks of a Helm chart (objects annotated helm.sh/hook) as Helm
// does, apart from the rest of a release: in hook-weight order, a Job waited to completion
// and a Pod until it succeeds, then removed by its hook-delete-policy. The daemon runs the
// install, upgrade and rollback hooks around a revision's apply; `converge test` runs the
// test hooks.
package hooks

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
	"github.com/converge-gitops/converge/sync/apply"
	"github.com/converge-gitops/converge/sync/render"
)

const (
	hookWeightAnnotation = "helm.sh/hook-weight"
	hookDeleteAnnotation = "helm.sh/hook-delete-policy"

	beforeHookCreation = "before-hook-creation"
	hookSucceeded      = "hook-succeeded"
	hookFailed         = "hook-failed"
)

// hookPoll is how often a hook Job or Pod is looked at while it runs.
const hookPoll = 250 * time.Millisecond

// ErrFailed: a hook Job or Pod failed, or could not be applied.
var ErrFailed = errors.New("hook failed")

// Split separates the hook objects of a rendered set from the others.
func Split(objects []*unstructured.Unstructured) (rest, hooks []*unstructured.Unstructured) {
	for _, o := range objects {
		if _, ok := o.GetAnnotations()[render.HookAnnotation]; ok {
			hooks = append(hooks, o)
		} else {
			rest = append(rest, o)
		}
	}
	return rest, hooks
}

// Events lists the events a hook object runs at.
func Events(o *unstructured.Unstructured) []string {
	var out []string
	for _, e := range strings.Split(o.GetAnnotations()[render.HookAnnotation], ",") {
		if e = strings.TrimSpace(e); e != "" {
			out = append(out, e)
		}
	}
	return out
}

// hookPolicies lists a hook's delete policies: before-hook-creation when it names none.
func hookPolicies(o *unstructured.Unstructured) map[string]bool {
	out := map[string]bool{}
	for _, p := range strings.Split(o.GetAnnotations()[hookDeleteAnnotation], ",") {
		if p = strings.TrimSpace(p); p != "" {
			out[p] = true
		}
	}
	if len(out) == 0 {
		out[beforeHookCreation] = true
	}
	return out
}

func hookWeight(o *unstructured.Unstructured) int {
	w, _ := strconv.Atoi(strings.TrimSpace(o.GetAnnotations()[hookWeightAnnotation]))
	return w
}

// For returns the hooks that run at event, in Helm's order: weight, kind, name.
func For(hooks []*unstructured.Unstructured, event string) []*unstructured.Unstructured {
	var out []*unstructured.Unstructured
	for _, h := range hooks {
		for _, e := range Events(h) {
			if e == event {
				out = append(out, h)
				break
			}
		}
	}
	sort.SliceStable(out, func(i, j int) bool {
		wi, wj := hookWeight(out[i]), hookWeight(out[j])
		if wi != wj {
			return wi < wj
		}
		if out[i].GetKind() != out[j].GetKind() {
			return out[i].GetKind() < out[j].GetKind()
		}
		return out[i].GetName() < out[j].GetName()
	})
	return out
}

// Run runs the hooks of event, one after the other; the first that fails stops it.
func Run(ctx context.Context, c client.Client, hooks []*unstructured.Unstructured, event string) error {
	for _, h := range For(hooks, event) {
		if err := runHook(ctx, c, h.DeepCopy()); err != nil {
			return fmt.Errorf("%w: %s hook %s %s/%s: %w", ErrFailed, event, h.GetKind(), h.GetNamespace(), h.GetName(), err)
		}
	}
	return nil
}

// runHook applies one hook object (after deleting what earlier runs left of it when its
// policy says before-hook-creation), waits for it when it is a Job or Pod, then deletes it
// as its policy says.
func runHook(ctx context.Context, c client.Client, h *unstructured.Unstructured) error {
	policies := hookPolicies(h)
	if policies[beforeHookCreation] {
		if err := deleteHookObjects(ctx, c, h); err != nil {
			return err
		}
	}
	//nolint:staticcheck // client.Apply as a patch type, as sync/apply applies unstructured objects
	if err := c.Patch(ctx, h, client.Apply, client.ForceOwnership, client.FieldOwner(apply.FieldManager)); err != nil {
		return err
	}
	err := waitHook(ctx, c, h)
	if (err == nil && policies[hookSucceeded]) || (err != nil && policies[hookFailed]) {
		if derr := deleteHookObjects(ctx, c, h); derr != nil && err == nil {
			err = derr
		}
	}
	return err
}

// deleteHookObjects deletes every object a run of hook h made (whatever its generated
// name: they share h's hook label and owner labels) and waits until they are gone.
func deleteHookObjects(ctx context.Context, c client.Client, h *unstructured.Unstructured) error {
	list := &unstructured.UnstructuredList{}
	list.SetGroupVersionKind(h.GroupVersionKind().GroupVersion().WithKind(h.GetKind() + "List"))
	labels := client.MatchingLabels{render.HookLabel: h.GetLabels()[render.HookLabel]}
	for _, k := range []string{convergev1.NameLabel, convergev1.NamespaceLabel} {
		labels[k] = h.GetLabels()[k]
	}
	if err := c.List(ctx, list, client.InNamespace(h.GetNamespace()), labels); err != nil {
		return err
	}
	for i := range list.Items {
		o := &list.Items[i]
		if err := c.Delete(ctx, o, client.PropagationPolicy("Background")); client.IgnoreNotFound(err) != nil {
			return err
		}
	}
	return wait.PollUntilContextCancel(ctx, hookPoll, true, func(ctx context.Context) (bool, error) {
		for i := range list.Items {
			o := list.Items[i].DeepCopy()
			err := c.Get(ctx, client.ObjectKeyFromObject(o), o)
			if err == nil && o.GetUID() == list.Items[i].GetUID() {
				return false, nil
			}
			if err != nil && !apierrors.IsNotFound(err) {
				return false, err
			}
		}
		return true, nil
	})
}

// waitHook waits until a hook Job completes or a hook Pod succeeds; other kinds are
// done once applied, as in Helm.
func waitHook(ctx context.Context, c client.Client, h *unstructured.Unstructured) error {
	kind := h.GroupVersionKind().GroupKind()
	isPod := kind.Group == "" && kind.Kind == "Pod"
	if kind.String() != "Job.batch" && !isPod {
		return nil
	}
	return wait.PollUntilContextCancel(ctx, hookPoll, true, func(ctx context.Context) (bool, error) {
		o := h.DeepCopy()
		if err := c.Get(ctx, client.ObjectKeyFromObject(o), o); err != nil {
			return false, err
		}
		return hookDone(o)
	})
}

// hookDone reads a Job's conditions or a Pod's phase: done, or failed with the reason.
func hookDone(o *unstructured.Unstructured) (bool, error) {
	if o.GetKind() == "Pod" {
		phase, _, _ := unstructured.NestedString(o.Object, "status", "phase")
		switch phase {
		case "Succeeded":
			return true, nil
		case "Failed":
			return false, errors.New("pod failed")
		}
		return false, nil
	}
	conds, _, _ := unstructured.NestedSlice(o.Object, "status", "conditions")
	for _, x := range conds {
		cond, _ := x.(map[string]any)
		if cond["status"] != "True" {
			continue
		}
		switch cond["type"] {
		case "Complete":
			return true, nil
		case "Failed":
			return false, fmt.Errorf("job failed: %v %v", cond["reason"], cond["message"])
		}
	}
	return false, nil
}
