package reconciler

import (
	"context"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
	"github.com/converge-gitops/converge/sync/apply"
	"github.com/converge-gitops/converge/sync/hooks"
)

// A deploy is a list of named steps, chosen once from what the revision rendered to (see
// steps; whether it is a chart is the render's answer): every revision's objects go
// through the prune guard, the ownership check, the pending inventory, the apply (and
// prune, wave by wave when the objects have sync waves) and the health wait; hooks add a
// step before the apply, one right after it (Argo CD's Sync hooks) and one after the wait.
// A chart's CRD policy is an apply policy (see objectPolicy) whose create-only part adds
// a step; a chart may add the removal of Helm's release Secrets. The first step that fails
// ends the deploy with its failure (and runs the revision's SyncFail hooks).

// step is one step of a deploy.
type step struct {
	name string
	run  func(ctx context.Context, ds *deploying) *failure
}

// deploying is what the steps of one deploy share.
type deploying struct {
	d        *deployment
	w        healthWait
	previous *convergev1.ResourceInventory
	// c is the client the SyncTarget acts with on its cluster.
	c client.Client
	// stale is what the prune after the apply deletes (the prune guard's answer).
	stale []convergev1.InventoryEntry
	// live is what the ownership check read of the objects.
	live apply.Live
	// said: the pending inventory's write said "applying <revision>" already.
	said bool
	// since is when the apply began, timeout the revision's; the hooks and the health wait
	// have what is left of it.
	since   time.Time
	timeout time.Duration
}

// Step names, as the status, logs and tests speak of them.
const (
	stepCreateOnly     = "create only"
	stepPruneGuard     = "prune guard"
	stepOwnership      = "ownership"
	stepPending        = "pending inventory"
	stepPreHooks       = "pre hooks"
	stepApply          = "apply"
	stepSyncHooks      = "sync hooks"
	stepHealth         = "health"
	stepPostHooks      = "post hooks"
	stepReleaseSecrets = "release secrets"
)

// steps returns the steps of deploying d (its objects and hooks split already) for w.
func (ru *run) steps(d *deployment, w healthWait) []step {
	st, chart := ru.st, d.chart
	var out []step
	add := func(name string, run func(ctx context.Context, ds *deploying) *failure) {
		out = append(out, step{name: name, run: run})
	}
	if chart && st.CRDPolicy() == convergev1.CRDsCreate {
		add(stepCreateOnly, ru.createOnlyStep)
	}
	add(stepPruneGuard, ru.guardStep)
	add(stepOwnership, ru.ownershipStep)
	add(stepPending, ru.pendingStep)
	if pre := hookEvent("pre", st, w); len(hooks.For(d.hooks, pre)) > 0 {
		add(stepPreHooks, func(ctx context.Context, ds *deploying) *failure {
			return ru.runHooks(ctx, ds.c, ds.d, pre, ds.left(ru))
		})
	}
	add(stepApply, ru.applyStep)
	if len(hooks.For(d.hooks, hooks.Sync)) > 0 {
		add(stepSyncHooks, func(ctx context.Context, ds *deploying) *failure {
			return ru.runHooks(ctx, ds.c, ds.d, hooks.Sync, ds.left(ru))
		})
	}
	add(stepHealth, func(ctx context.Context, ds *deploying) *failure {
		t := ru.r.Clock.Now()
		if f := ru.waitHealthy(ctx, ds.d, ds.w, ds.since, ds.timeout); f != nil {
			return f
		}
		ru.r.timed("health", t)
		return nil
	})
	if post := hookEvent("post", st, w); len(hooks.For(d.hooks, post)) > 0 {
		add(stepPostHooks, func(ctx context.Context, ds *deploying) *failure {
			return ru.runHooks(ctx, ds.c, ds.d, post, ds.left(ru))
		})
	}
	if st.Spec.Helm != nil && st.Spec.Helm.RemoveReleaseSecrets {
		add(stepReleaseSecrets, func(ctx context.Context, ds *deploying) *failure {
			if err := ru.removeReleaseSecrets(ctx, ds.c); err != nil {
				return fail(phaseApply, err)
			}
			return nil
		})
	}
	return out
}

// left is what is left of the revision's timeout.
func (ds *deploying) left(ru *run) time.Duration {
	return ds.timeout - ru.r.Clock.Since(ds.since)
}

// guardStep decides what the prune after the apply deletes, or refuses the revision (see
// guardPrune).
func (ru *run) guardStep(ctx context.Context, ds *deploying) *failure {
	stale, f := ru.guardPrune(ctx, ds.w, ds.previous, ds.d)
	ds.stale = ru.objectPolicy(ds.d.chart).Prunable(stale)
	return f
}

// ownershipStep checks that no object belongs to another owner, and reads what is live.
func (ru *run) ownershipStep(ctx context.Context, ds *deploying) *failure {
	t := ru.r.Clock.Now()
	live, err := apply.CheckOwnershipCached(ctx, ds.c, ru.key, ru.r.ownerExists, ru.drift().Managed(ctx), ds.d.objects)
	if err != nil {
		return fail(phaseApply, err)
	}
	ds.live = live
	ru.r.timed("ownership", t)
	return nil
}

// pendingStep records the pending inventory (see writePending); the revision's timeout
// runs from here.
func (ru *run) pendingStep(ctx context.Context, ds *deploying) *failure {
	said, err := ru.writePending(ctx, ds.w.revision, ds.previous, ds.d.inventory)
	if err != nil {
		return fail(phaseStatus, err)
	}
	ds.said, ds.since, ds.timeout = said, ru.r.Clock.Now(), ru.st.GetTimeout()
	return nil
}

// applyStep applies the objects and prunes what is stale, within the revision's timeout.
func (ru *run) applyStep(ctx context.Context, ds *deploying) *failure {
	applyCtx, cancel := context.WithTimeout(ctx, max(ds.left(ru), time.Second))
	defer cancel()
	return ru.applyAndPrune(applyCtx, ds.c, ds.d, ds.live, ds.stale, ds.timeout, ru.r.Clock.Now(), ds.said)
}
