package reconciler

import (
	"context"
	"fmt"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
	"github.com/converge-gitops/converge/sync/hooks"
)

// The hooks of a Helm chart are not part of a revision's set: they are run apart, around
// it — pre-install/pre-upgrade (pre-rollback in a rollback) before the apply,
// post-install/post-upgrade once the set is healthy — never in the inventory (see
// sync/hooks). A hook that fails fails the revision (HookFailed), which rolls back like any
// failure.

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

// runHooks runs d's hooks of event within left of the revision's timeout; a failure fails
// the revision (HookFailed).
func (ru *run) runHooks(ctx context.Context, c client.Client, d *deployment, event string, left time.Duration) *failure {
	if len(hooks.For(d.hooks, event)) == 0 {
		return nil
	}
	hctx, cancel := context.WithTimeout(ctx, max(left, time.Second))
	defer cancel()
	if err := ru.progress(ctx, fmt.Sprintf("running the %s hooks of %s", event, d.revision)); err != nil {
		return fail(phaseStatus, err)
	}
	if err := hooks.Run(hctx, c, d.hooks, event); err != nil {
		if ctx.Err() != nil {
			return fail(phaseApply, ctx.Err())
		}
		return &failure{reason: convergev1.HookFailedReason, then: failRevision, err: err}
	}
	return nil
}
