package apply

import (
	"context"
	"fmt"
	"sort"
	gosync "sync"
	"time"

	"github.com/fluxcd/cli-utils/pkg/object"
	"github.com/fluxcd/pkg/ssa"
	"github.com/fluxcd/pkg/ssa/utils"
	"golang.org/x/sync/errgroup"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Result counts what an apply did.
type Result struct {
	ChangeSet  *ssa.ChangeSet
	Created    int
	Configured int
	Unchanged  int
	// Observed are the objects as the API server returned them: written, or dry-run when
	// nothing was to be written. A health check starts from them instead of reading them again.
	Observed []*unstructured.Unstructured
}

// Applier applies rendered objects with server-side apply, in stages (see Stage): CRDs,
// Namespaces and ClusterRoles first (and waited for when the API server's answer does not
// show them ready already), then class definitions, then the rest. Every object of a
// stage is planned (dry-run, see Plan) before any object of it is written, so an invalid
// object leaves the stage untouched.
//
// Within a stage everything runs concurrently: the dry-runs, then the writes of the
// objects that differ. What the cluster holds is given by the caller (see CheckOwnership)
// or learnt from one list per kind and namespace of the objects the SyncTarget already
// owns, so that an apply costs about one dry-run per object plus one write per change —
// not a read, a dry-run and a sequential write per object as fluxcd/pkg/ssa's ApplyAll does.
type Applier struct {
	// Concurrency of the dry-runs and writes of one stage (default 16).
	Concurrency int
	// CleanUpOtherTools: when an object is taken over from another tool (see TakesOver),
	// the labels and annotations that tool leaves on it (Flux's, Helm's, Argo CD's) are
	// removed too, unless Git sets them; without it they stay, still owned by that tool.
	CleanUpOtherTools bool
	// policy is Options.Policy of the call under way.
	policy PolicyFunc
}

// Options are what one Apply call asks beyond the Applier's settings.
type Options struct {
	// CleanUpOtherTools turns on Applier.CleanUpOtherTools for this call (a SyncTarget
	// annotated converge.dev/clean-up-other-tools: enabled).
	CleanUpOtherTools bool
	// Policy is what the SyncTarget sets for some objects beyond their annotations.
	Policy PolicyFunc
}

// Apply applies objects through c (an impersonating client when the SyncTarget names a
// service account). The objects must carry their owner labels already. live holds what
// the caller read of them already; Apply lists what the SyncTarget owns of the kinds and
// namespaces it applies several objects of, where live has not listed them. opts adds to
// the Applier's settings for this call.
func (a Applier) Apply(ctx context.Context, c client.Client, objects []*unstructured.Unstructured, live Live,
	timeout time.Duration, opts Options) (Result, error) {
	a.CleanUpOtherTools = a.CleanUpOtherTools || opts.CleanUpOtherTools
	a.policy = opts.Policy
	cs := ssa.NewChangeSet()
	var observed []*unstructured.Unstructured
	var err error
	for stage, staged := range Stages(objects) {
		if len(staged) == 0 {
			continue
		}
		var entries []ssa.ChangeSetEntry
		var got []*unstructured.Unstructured
		entries, got, err = a.applyStage(ctx, c, staged, live)
		cs.Append(entries)
		observed = append(observed, got...)
		if err != nil {
			break
		}
		if stage != RestStage {
			if err = waitForStage(ctx, c, stage, staged, got, timeout); err != nil {
				break
			}
		}
	}
	res := Result{ChangeSet: cs, Observed: observed}
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
	if err != nil {
		// The API server quotes invalid values: keep Secrets' out of status and events.
		return res, RedactSecretValues(err, objects)
	}
	return res, nil
}

// applyStage plans every object, then writes those that differ from the cluster. It
// returns, in the order of the entries, the objects as the API server last returned them
// (nil for a skipped one). On error the entries and objects written so far are returned.
func (a Applier) applyStage(ctx context.Context, c client.Client, objects []*unstructured.Unstructured,
	live Live) ([]ssa.ChangeSetEntry, []*unstructured.Unstructured, error) {
	sort.Sort(ssa.SortableUnstructureds(objects))
	concurrency := a.Concurrency
	if concurrency <= 0 {
		concurrency = defaultConcurrency
	}
	live = listOwned(ctx, c, objects, live)
	decisions, err := Plan(ctx, c, objects, live, PlanOptions{Concurrency: concurrency, CleanUpOtherTools: a.CleanUpOtherTools,
		Policy: a.policy})
	if err != nil {
		return nil, nil, err
	}
	entries := make([]ssa.ChangeSetEntry, len(objects))
	observed := make([]*unstructured.Unstructured, len(objects))
	for i, d := range decisions {
		entries[i] = ChangeSetEntry(d.Object, d.Action)
		observed[i] = d.DryRun
	}

	var mu gosync.Mutex
	written := make([]bool, len(objects))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(concurrency)
	for i, d := range decisions {
		if !d.Writes() {
			continue
		}
		g.Go(func() error {
			applied, err := a.write(gctx, c, d)
			if err != nil {
				return err
			}
			mu.Lock()
			written[i] = true
			observed[i] = applied
			if d.Recreate {
				entries[i].Action = ssa.CreatedAction // deleted, then created again
			}
			mu.Unlock()
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		var done []ssa.ChangeSetEntry
		var got []*unstructured.Unstructured
		for i := range objects {
			if written[i] {
				done = append(done, entries[i])
				got = append(got, observed[i])
			}
		}
		return done, got, err
	}
	return entries, observed, nil
}

// write applies the object of decision d: recreated or taken over first when d says so.
// It returns the object as the API server returned it.
func (a Applier) write(ctx context.Context, c client.Client, d Decision) (*unstructured.Unstructured, error) {
	switch {
	case d.Recreate:
		if err := recreate(ctx, c, d.Live); err != nil {
			return nil, fmt.Errorf("%s immutable field detected: %w", utils.FmtUnstructured(d.Object), err)
		}
	case d.Takeover:
		if err := takeOver(ctx, c, d.Object, a.CleanUpOtherTools); err != nil {
			return nil, fmt.Errorf("%s: %w", utils.FmtUnstructured(d.Object), err)
		}
	}
	applied := d.Object.DeepCopy()
	//nolint:staticcheck // client.Apply as a patch type: like fluxcd/pkg/ssa, for unstructured objects
	if err := c.Patch(ctx, applied, client.Apply, client.ForceOwnership, client.FieldOwner(FieldManager)); err != nil {
		return nil, fmt.Errorf("%s apply failed: %w", utils.FmtUnstructured(applied), err)
	}
	return applied, nil
}

// recreate deletes live (a change to an immutable field was forced) and waits until it is gone.
func recreate(ctx context.Context, c client.Client, live *unstructured.Unstructured) error {
	if err := c.Delete(ctx, live, client.PropagationPolicy(metav1.DeletePropagationBackground)); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting it: %w", err)
	}
	return wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(live.GroupVersionKind())
		err := c.Get(ctx, client.ObjectKeyFromObject(live), u)
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		return false, err
	})
}

// ChangeSetEntry is the change set entry of applying o with action.
func ChangeSetEntry(o *unstructured.Unstructured, action ssa.Action) ssa.ChangeSetEntry {
	return ssa.ChangeSetEntry{
		ObjMetadata:  object.UnstructuredToObjMetadata(o),
		GroupVersion: o.GroupVersionKind().Version,
		Subject:      utils.FmtUnstructured(o),
		Action:       action,
	}
}
