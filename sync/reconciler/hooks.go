package reconciler

import (
	"context"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
	"github.com/converge-gitops/converge/sync/apply"
	"github.com/converge-gitops/converge/sync/hooks"
)

// The hooks of a revision (Helm's and Argo CD's annotations, in a chart, plain YAML or a
// kustomization) are not part of its set: they are run apart, around it, never in the
// inventory (see sync/hooks) — pre-install/pre-upgrade (pre-rollback in a rollback)
// before the apply, sync hooks right after it, post-install/post-upgrade once the set is
// healthy, sync-fail hooks when the revision fails, before its rollback. Each hook goes
// through the apply engine and the health checker like the set. A hook that fails fails
// the revision (HookFailed), which rolls back like any failure.

// hookEvent names the event of a deploy: pre- or post- install, upgrade or rollback.
func hookEvent(when string, st *convergev1.SyncTarget, w healthWait) string {
	switch {
	case w.failed != "":
		return when + "-rollback"
	case st.Status.LastAppliedRevision == "":
		return when + "-install"
	}
	return when + "-upgrade"
}

// hookRunner runs hooks with c on the SyncTarget's cluster: applied by the reconciler's
// Applier, waited by its HealthChecker (the hook alone: the SyncTarget's extra health
// checks are the set's; a Pod until it succeeded), within timeout.
func (ru *run) hookRunner(c client.Client, timeout time.Duration) hooks.Runner {
	return hooks.Runner{
		Client: c,
		Apply: func(ctx context.Context, objects []*unstructured.Unstructured) (apply.Result, error) {
			return ru.r.Applier.Apply(ctx, c, objects, nil, timeout, apply.Options{CleanUpOtherTools: ru.st.CleanUpOtherTools()})
		},
		Wait: func(ctx context.Context, objects, observed []*unstructured.Unstructured) error {
			if ru.r.Health == nil {
				return nil
			}
			on, err := ru.cluster(ctx)
			if err != nil {
				return err
			}
			st := ru.st.DeepCopy()
			st.Spec.HealthChecks, st.Spec.HealthCheckExprs = nil, hooks.WaitRules(st.Spec.HealthCheckExprs)
			return ru.r.Health.Wait(ctx, on, st, objects, observed, ru.r.Clock.Now(), timeout, nil)
		},
	}
}

// runHooks runs d's hooks of event within left of the revision's timeout; a failure fails
// the revision (HookFailed).
func (ru *run) runHooks(ctx context.Context, c client.Client, d *deployment, event string, left time.Duration) *failure {
	if len(hooks.For(d.hooks, event)) == 0 {
		return nil
	}
	left = max(left, time.Second)
	hctx, cancel := context.WithTimeout(ctx, left)
	defer cancel()
	if err := ru.progress(ctx, fmt.Sprintf("running the %s hooks of %s", event, d.revision)); err != nil {
		return fail(phaseStatus, err)
	}
	runner := ru.hookRunner(c, left)
	runner.Now = ru.r.Clock.Now
	runner.Ran = func(h hooks.Hook, event string, err error, took time.Duration) {
		d.ranHook(h, event, err, took, ru.redact)
	}
	if err := runner.Run(hctx, d.hooks, event); err != nil {
		if ctx.Err() != nil {
			return fail(phaseApply, ctx.Err())
		}
		return &failure{reason: convergev1.HookFailedReason, then: failRevision, err: err}
	}
	return nil
}

// Bounds of the hooks a history entry records.
const (
	maxRecordedHooks  = 20
	maxHookRunMessage = 500
)

// ranHook records a hook run for the attempt's history: its message redacted of the
// values read from Secrets, and cut.
func (d *deployment) ranHook(h hooks.Hook, event string, err error, took time.Duration, redact func(string) string) {
	if len(d.hookRuns) >= maxRecordedHooks {
		return
	}
	run := convergev1.HookRun{Event: event, Kind: h.Object.GetKind(), Name: h.Object.GetName(), Result: convergev1.SyncSucceeded,
		Duration: &metav1.Duration{Duration: took.Round(time.Millisecond)}}
	if err != nil {
		run.Result, run.Message = convergev1.SyncFailed, redact(err.Error())
		if len(run.Message) > maxHookRunMessage {
			run.Message = run.Message[:maxHookRunMessage-3] + "..."
		}
	}
	d.hookRuns = append(d.hookRuns, run)
}
