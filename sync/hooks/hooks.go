// Package hooks runs hook objects — Helm's (helm.sh/hook) and Argo CD's
// (argocd.argoproj.io/hook) — of charts, plain YAML and kustomizations alike, apart from
// the rest of a revision: in Helm's order, each applied through the apply engine (dry-run,
// object policy) after an ownership check, waited for when it is a Job or a Pod, then
// removed by its delete policy. The daemon runs the install, upgrade, rollback, sync and
// sync-fail hooks around a revision's apply; `converge test` runs the test hooks.
package hooks

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	releaseutil "helm.sh/helm/v4/pkg/release/v1/util"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
	"github.com/converge-gitops/converge/sync/apply"
	"github.com/converge-gitops/converge/sync/render"
)

// Helm's annotations of a hook.
const (
	WeightAnnotation = "helm.sh/hook-weight"
	DeleteAnnotation = "helm.sh/hook-delete-policy"
)

// Argo CD's annotations of a hook, and of the wave of any object.
const (
	ArgoDeleteAnnotation = "argocd.argoproj.io/hook-delete-policy"
	ArgoWaveAnnotation   = "argocd.argoproj.io/sync-wave"
)

// The events a hook runs at: Helm's names, and two of Argo CD's that Helm has no word for.
const (
	PreInstall   = "pre-install"
	PostInstall  = "post-install"
	PreUpgrade   = "pre-upgrade"
	PostUpgrade  = "post-upgrade"
	PreRollback  = "pre-rollback"
	PostRollback = "post-rollback"
	// Sync hooks run right after the revision's apply, before its health wait
	// (argocd.argoproj.io/hook: Sync).
	Sync = "sync"
	// SyncFail hooks run when a revision fails, before it is rolled back
	// (argocd.argoproj.io/hook: SyncFail).
	SyncFail = "sync-fail"
)

// argoEvents are the events of Argo CD's hook phases. PreSync and PostSync run at every
// sync, so at every install, upgrade and rollback.
var argoEvents = map[string][]string{
	"PreSync":  {PreInstall, PreUpgrade, PreRollback},
	"Sync":     {Sync},
	"PostSync": {PostInstall, PostUpgrade, PostRollback},
	"SyncFail": {SyncFail},
}

// argoSkip is the Argo CD hook value of an object never applied.
const argoSkip = "Skip"

// Delete policies (Helm's names; Argo CD's HookSucceeded, HookFailed and
// BeforeHookCreation are read as them).
const (
	BeforeHookCreation = "before-hook-creation"
	HookSucceeded      = "hook-succeeded"
	HookFailed         = "hook-failed"
)

var argoPolicies = map[string]string{
	"BeforeHookCreation": BeforeHookCreation,
	"HookSucceeded":      HookSucceeded,
	"HookFailed":         HookFailed,
}

// ErrFailed: a hook Job or Pod failed, or could not be applied.
var ErrFailed = errors.New("hook failed")

// ErrOwned: a hook names an object that another SyncTarget, or nothing of converge's,
// manages; it is neither written nor deleted.
var ErrOwned = errors.New("hook object is not converge's to write")

// Hook is one hook object and how it runs.
type Hook struct {
	Object *unstructured.Unstructured
	// Events it runs at (see the constants).
	Events []string
	// Weight orders the hooks of one event (helm.sh/hook-weight, or Argo CD's sync-wave
	// when the object has only Argo CD's annotations); 0 when unset or not a number.
	Weight int
	// Policies are its delete policies: before-hook-creation when it names none.
	Policies map[string]bool
}

// Parse reads o's hook annotations: ok is false when o is no hook. An object with Argo
// CD's hook annotation follows it and not Helm's, as in Argo CD.
func Parse(o *unstructured.Unstructured) (h Hook, ok bool) {
	a := o.GetAnnotations()
	h = Hook{Object: o, Policies: map[string]bool{}}
	if argo, isArgo := a[render.ArgoHookAnnotation]; isArgo {
		for _, phase := range splitList(argo) {
			h.Events = append(h.Events, argoEvents[phase]...)
		}
		for _, p := range splitList(a[ArgoDeleteAnnotation]) {
			if name, known := argoPolicies[p]; known {
				h.Policies[name] = true
			}
		}
		h.Weight = Wave(o)
	} else if helm, isHelm := a[render.HookAnnotation]; isHelm {
		h.Events = splitList(helm)
		for _, p := range splitList(a[DeleteAnnotation]) {
			h.Policies[p] = true
		}
		h.Weight, _ = strconv.Atoi(strings.TrimSpace(a[WeightAnnotation]))
	} else {
		return Hook{}, false
	}
	if len(h.Policies) == 0 {
		h.Policies[BeforeHookCreation] = true
	}
	return h, true
}

func splitList(s string) []string {
	var out []string
	for _, e := range strings.Split(s, ",") {
		if e = strings.TrimSpace(e); e != "" {
			out = append(out, e)
		}
	}
	return out
}

// Split separates the hooks of a rendered set from the objects applied as the set; an
// object Argo CD's hook annotation says to skip is in neither.
func Split(objects []*unstructured.Unstructured) (rest []*unstructured.Unstructured, hooks []Hook) {
	for _, o := range objects {
		if slices.Contains(splitList(o.GetAnnotations()[render.ArgoHookAnnotation]), argoSkip) {
			continue
		}
		if h, ok := Parse(o); ok {
			hooks = append(hooks, h)
		} else {
			rest = append(rest, o)
		}
	}
	return rest, hooks
}

// RunsAt says whether h runs at event.
func (h Hook) RunsAt(event string) bool {
	return slices.Contains(h.Events, event)
}

// For returns the hooks that run at event in Helm v4's order: its install order of kinds
// first, then, stably, by weight and name, so that the kind decides only between hooks of
// equal weight and name.
func For(hooks []Hook, event string) []Hook {
	var out []Hook
	for _, h := range hooks {
		if h.RunsAt(event) {
			out = append(out, h)
		}
	}
	rank := make(map[string]int, len(releaseutil.InstallOrder))
	for i, k := range releaseutil.InstallOrder {
		rank[k] = i
	}
	sort.SliceStable(out, func(i, j int) bool {
		return lessKind(out[i].Object.GetKind(), out[j].Object.GetKind(), rank)
	})
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].Weight != out[j].Weight {
			return out[i].Weight < out[j].Weight
		}
		return out[i].Object.GetName() < out[j].Object.GetName()
	})
	return out
}

// lessKind is Helm's order of kinds: its install order, the kinds it does not list last
// and among themselves by name.
func lessKind(a, b string, rank map[string]int) bool {
	ra, aok := rank[a]
	rb, bok := rank[b]
	switch {
	case !aok && !bok:
		return a < b
	case !aok:
		return false
	case !bok:
		return true
	}
	return ra < rb
}

// Runner runs hooks through the engine's parts.
type Runner struct {
	// Client is the SyncTarget's client on its cluster.
	Client client.Client
	// Apply applies one hook object (the apply engine: dry-run, policy, staged write).
	Apply func(ctx context.Context, objects []*unstructured.Unstructured) (apply.Result, error)
	// Wait waits until the objects are ready (a Job complete, a Pod done) or failed, from
	// what the apply returned (the health checker).
	Wait func(ctx context.Context, objects, observed []*unstructured.Unstructured) error
	// Poll is how often a deletion is looked at until the object is gone (250 ms when zero).
	Poll time.Duration
	// Ran, when set, is told of each hook run, at event, when it ends: its error (nil when
	// it succeeded) and how long it took.
	Ran func(h Hook, event string, err error, took time.Duration)
	// Now is the clock of Ran's durations (time.Now when nil).
	Now func() time.Time
}

// Run runs the hooks of event, one after the other, in order (see For); the first that
// fails stops it. As in Helm, when one fails the ones before it that succeeded are still
// removed by their hook-succeeded policy.
func (r Runner) Run(ctx context.Context, hooks []Hook, event string) error {
	ran := []Hook{}
	now := r.Now
	if now == nil {
		now = time.Now
	}
	for _, h := range For(hooks, event) {
		start := now()
		err := r.runOne(ctx, h)
		if r.Ran != nil {
			r.Ran(h, event, err, now().Sub(start))
		}
		if err != nil {
			for _, done := range ran {
				if done.Policies[HookSucceeded] {
					_ = r.deleteObjects(ctx, done)
				}
			}
			o := h.Object
			return fmt.Errorf("%w: %s hook %s %s/%s: %w", ErrFailed, event, o.GetKind(), o.GetNamespace(), o.GetName(), err)
		}
		ran = append(ran, h)
	}
	for _, h := range slices.Backward(ran) {
		if h.Policies[HookSucceeded] {
			if err := r.deleteObjects(ctx, h); err != nil {
				return fmt.Errorf("%w: %s hook %s: deleting it: %w", ErrFailed, event, apply.Describe(h.Object), err)
			}
		}
	}
	return nil
}

// runOne applies one hook (after deleting what earlier runs left of it when its policy
// says before-hook-creation, or when it is a Job or a Pod: a run is a new one, whose
// template could not be changed in place) and waits for it; a failed one is deleted when
// its policy says hook-failed.
func (r Runner) runOne(ctx context.Context, h Hook) error {
	o := h.Object.DeepCopy()
	if h.Policies[BeforeHookCreation] || waited(o) {
		if err := r.deleteObjects(ctx, h); err != nil {
			return err
		}
	}
	if err := r.checkOwner(ctx, o); err != nil {
		return err
	}
	res, err := r.Apply(ctx, []*unstructured.Unstructured{o})
	if err == nil && waited(o) {
		if err = r.Wait(ctx, []*unstructured.Unstructured{o}, res.Observed); err != nil {
			if why := r.whyFailed(ctx, o); why != "" {
				err = errors.New(why)
			}
		}
	}
	if err != nil && h.Policies[HookFailed] {
		_ = r.deleteObjects(ctx, h)
	}
	return err
}

// waited says whether a hook of o's kind is waited for: Jobs and Pods, as in Helm; other
// kinds are done once applied.
func waited(o *unstructured.Unstructured) bool {
	gk := o.GroupVersionKind().GroupKind()
	return (gk.Group == "batch" && gk.Kind == "Job") || (gk.Group == "" && gk.Kind == "Pod")
}

// whyFailed reads why a hook Job or Pod failed, as its status says: "" when it did not
// (the wait ended otherwise, e.g. at its deadline).
func (r Runner) whyFailed(ctx context.Context, o *unstructured.Unstructured) string {
	live := &unstructured.Unstructured{}
	live.SetGroupVersionKind(o.GroupVersionKind())
	if err := r.Client.Get(ctx, client.ObjectKeyFromObject(o), live); err != nil {
		return ""
	}
	if live.GetKind() == "Pod" {
		if phase, _, _ := unstructured.NestedString(live.Object, "status", "phase"); phase == "Failed" {
			reason, _, _ := unstructured.NestedString(live.Object, "status", "reason")
			return strings.TrimSpace("pod failed " + reason)
		}
		return ""
	}
	conds, _, _ := unstructured.NestedSlice(live.Object, "status", "conditions")
	for _, x := range conds {
		if c, _ := x.(map[string]any); c["type"] == "Failed" && c["status"] == "True" {
			return strings.TrimSpace(fmt.Sprintf("job failed: %v %v", c["reason"], c["message"]))
		}
	}
	return ""
}

// checkOwner refuses a hook whose object exists and is not this SyncTarget's: a hook
// never writes (nor, by its delete policy, deletes) an object that another SyncTarget
// manages or that converge did not create.
func (r Runner) checkOwner(ctx context.Context, o *unstructured.Unstructured) error {
	live := &unstructured.Unstructured{}
	live.SetGroupVersionKind(o.GroupVersionKind())
	err := r.Client.Get(ctx, client.ObjectKeyFromObject(o), live)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	have, want := live.GetLabels(), o.GetLabels()
	if have[convergev1.NameLabel] == want[convergev1.NameLabel] && have[convergev1.NamespaceLabel] == want[convergev1.NamespaceLabel] {
		return nil
	}
	if have[convergev1.NameLabel] == "" {
		return fmt.Errorf("%w: %s exists and no converge SyncTarget created it", ErrOwned, apply.Describe(live))
	}
	return fmt.Errorf("%w: %s is managed by SyncTarget %s/%s", ErrOwned, apply.Describe(live),
		have[convergev1.NamespaceLabel], have[convergev1.NameLabel])
}

// deleteObjects deletes every object a run of hook h made (whatever its generated name:
// they share h's hook label and owner labels, so nothing another SyncTarget or tool
// made is found) and waits until they are gone.
func (r Runner) deleteObjects(ctx context.Context, h Hook) error {
	o := h.Object
	list := &unstructured.UnstructuredList{}
	list.SetGroupVersionKind(o.GroupVersionKind().GroupVersion().WithKind(o.GetKind() + "List"))
	labels := client.MatchingLabels{render.HookLabel: o.GetLabels()[render.HookLabel]}
	for _, k := range []string{convergev1.NameLabel, convergev1.NamespaceLabel} {
		labels[k] = o.GetLabels()[k]
	}
	if err := r.Client.List(ctx, list, client.InNamespace(o.GetNamespace()), labels); err != nil {
		return err
	}
	for i := range list.Items {
		if err := r.Client.Delete(ctx, &list.Items[i], client.PropagationPolicy("Background")); client.IgnoreNotFound(err) != nil {
			return err
		}
	}
	poll := r.Poll
	if poll <= 0 {
		poll = 250 * time.Millisecond
	}
	return wait.PollUntilContextCancel(ctx, poll, true, func(ctx context.Context) (bool, error) {
		for i := range list.Items {
			live := list.Items[i].DeepCopy()
			err := r.Client.Get(ctx, client.ObjectKeyFromObject(live), live)
			if err == nil && live.GetUID() == list.Items[i].GetUID() {
				return false, nil
			}
			if err != nil && !apierrors.IsNotFound(err) {
				return false, err
			}
		}
		return true, nil
	})
}

// podDone and jobDone judge hook Pods and Jobs as Helm does: done when they succeeded, not
// when they run (kstatus finds a running Job Current: its spec is reconciled).
var (
	podDone = convergev1.CustomHealthCheck{
		APIVersion: "v1", Kind: "Pod",
		Current: "has(self.status) && has(self.status.phase) && self.status.phase == 'Succeeded'",
		Failed:  "has(self.status) && has(self.status.phase) && self.status.phase == 'Failed'",
	}
	jobDone = convergev1.CustomHealthCheck{
		APIVersion: "batch/v1", Kind: "Job",
		Current: jobCondition("Complete"),
		Failed:  jobCondition("Failed"),
	}
)

func jobCondition(typ string) string {
	return "has(self.status) && has(self.status.conditions) && " +
		"self.status.conditions.exists(c, c.type == '" + typ + "' && c.status == 'True')"
}

// WaitRules are the health rules a hook is waited with: rules, but a Pod or a Job is done
// when it succeeded and failed when it failed.
func WaitRules(rules []convergev1.CustomHealthCheck) []convergev1.CustomHealthCheck {
	out := []convergev1.CustomHealthCheck{podDone, jobDone}
	for _, r := range rules {
		if !sameKind(r, podDone) && !sameKind(r, jobDone) {
			out = append(out, r)
		}
	}
	return out
}

func sameKind(a, b convergev1.CustomHealthCheck) bool {
	return a.APIVersion == b.APIVersion && a.Kind == b.Kind
}

// Waves splits a set by Argo CD's sync wave (argocd.argoproj.io/sync-wave, 0 when unset
// or not a number), lowest first, keeping the order within each wave. A set without
// waves is one wave.
func Waves(objects []*unstructured.Unstructured) [][]*unstructured.Unstructured {
	byWave := map[int][]*unstructured.Unstructured{}
	var order []int
	for _, o := range objects {
		w := Wave(o)
		if _, seen := byWave[w]; !seen {
			order = append(order, w)
		}
		byWave[w] = append(byWave[w], o)
	}
	slices.Sort(order)
	out := make([][]*unstructured.Unstructured, 0, len(order))
	for _, w := range order {
		out = append(out, byWave[w])
	}
	return out
}

// Wave is o's sync wave (argocd.argoproj.io/sync-wave), 0 when unset or not a number.
func Wave(o *unstructured.Unstructured) int {
	w, _ := strconv.Atoi(strings.TrimSpace(o.GetAnnotations()[ArgoWaveAnnotation]))
	return w
}
