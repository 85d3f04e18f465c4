package apply

import (
	"context"
	"errors"
	"fmt"

	"github.com/fluxcd/pkg/ssa"
	ssaerrors "github.com/fluxcd/pkg/ssa/errors"
	"github.com/fluxcd/pkg/ssa/normalize"
	"github.com/fluxcd/pkg/ssa/utils"
	"golang.org/x/sync/errgroup"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// defaultConcurrency is used when PlanOptions.Concurrency or Applier.Concurrency is not set.
const defaultConcurrency = 16

// Notes of a Decision on an object that could not be dry-run because the change brings
// what it needs (see Pending).
const (
	PendingKindNote      = "not dry-run: its kind is defined by a CustomResourceDefinition of this change"
	PendingNamespaceNote = "not dry-run: its namespace is created by this change"
)

// Decision is what applying one object would do.
type Decision struct {
	// Object is the object planned (the desired state, CA bundle of a CRD removed).
	Object *unstructured.Unstructured
	// Action is ssa.CreatedAction, ssa.ConfiguredAction, ssa.UnchangedAction or
	// ssa.SkippedAction (the Policy of the object or the live one skips it, or says
	// IfNotPresent and the object exists).
	Action ssa.Action
	// Recreate is set with ssa.ConfiguredAction when the change touches an immutable field
	// and the object or the live one carries converge.dev/force: enabled: the live object
	// is deleted, then the object created again. DryRun is nil then.
	Recreate bool
	// DryRun is the object as the server-side dry-run returned it: what the cluster will
	// hold. Nil when skipped, recreated, or not dry-run (see Note).
	DryRun *unstructured.Unstructured
	// Live is the object in the cluster when it was known or read: it is read only when
	// the dry-run shows the object exists, or when the dry-run fails.
	Live *unstructured.Unstructured
	// Note says why the object was not dry-run (PendingKindNote, PendingNamespaceNote).
	Note string
	// Takeover is set with ssa.ConfiguredAction when the live object has fields of other
	// tools' field managers (see TakesOver): the apply makes converge their only owner
	// first, so that it removes those Git does not set. DryRun does not show that removal.
	Takeover bool
}

// Writes reports whether applying the decision writes to the cluster.
func (d Decision) Writes() bool {
	return d.Action == ssa.CreatedAction || d.Action == ssa.ConfiguredAction
}

// PlanOptions tune Plan.
type PlanOptions struct {
	// Concurrency bounds the dry-runs in flight (default 16).
	Concurrency int
	// Pending are the kinds and namespaces a change brings with it, when objects of a later
	// stage are planned before the earlier stages are applied (converge diff). Nil for an
	// apply, which applies a stage before it plans the next.
	Pending *Pending
	// CleanUpOtherTools: a takeover also removes the labels and annotations other tools
	// leave on their objects (see Applier.CleanUpOtherTools).
	CleanUpOtherTools bool
	// Policy is what the SyncTarget sets for some objects beyond their annotations.
	Policy PolicyFunc
}

// Pending lists the kinds defined by the CRDs and the namespaces created by the
// Namespaces of a change: an object of such a kind or in such a namespace cannot be
// dry-run before the change is applied, and is planned as created, with a note.
type Pending struct {
	Kinds      map[schema.GroupKind]bool
	Namespaces map[string]bool
}

// PendingOf returns what the CRDs and Namespaces among objects bring.
func PendingOf(objects []*unstructured.Unstructured) *Pending {
	p := &Pending{Kinds: map[schema.GroupKind]bool{}, Namespaces: map[string]bool{}}
	for _, o := range objects {
		switch {
		case utils.IsCRD(o):
			group, _, _ := unstructured.NestedString(o.Object, "spec", "group")
			kind, _, _ := unstructured.NestedString(o.Object, "spec", "names", "kind")
			p.Kinds[schema.GroupKind{Group: group, Kind: kind}] = true
		case utils.IsNamespace(o):
			p.Namespaces[o.GetName()] = true
		}
	}
	return p
}

// note returns the note of an object whose dry-run failed with err because the change
// brings its kind or its namespace; "" otherwise.
func (p *Pending) note(o *unstructured.Unstructured, err error) string {
	switch {
	case p == nil:
		return ""
	case meta.IsNoMatchError(err) && p.Kinds[o.GroupVersionKind().GroupKind()]:
		return PendingKindNote
	case o.GetNamespace() != "" && missingNamespace(err, o.GetNamespace()) && p.Namespaces[o.GetNamespace()]:
		return PendingNamespaceNote
	}
	return ""
}

// missingNamespace is true when err says that namespace ns does not exist.
func missingNamespace(err error, ns string) bool {
	var status apierrors.APIStatus
	if !apierrors.IsNotFound(err) || !errors.As(err, &status) {
		return false
	}
	d := status.Status().Details
	return d != nil && d.Kind == "namespaces" && d.Name == ns
}

// Plan says what applying objects would do, one Decision per object in their order. It
// only reads and dry-runs: it never writes. Each object is dry-run applied server-side
// with FieldManager, forcing ownership, at most opts.Concurrency at a time; live holds
// what the caller read of the objects already (nil: nothing), the others are read only
// when their dry-run shows they exist. CRDs lose their CA bundle (the API server sets it).
//
// A dry-run that fails is an error naming the object, Secret values redacted — unless
// the live object is excluded (skipped), the failure is an immutable field the object or
// the live one forces (Recreate), or opts.Pending brings the missing kind or namespace.
func Plan(ctx context.Context, c client.Client, objects []*unstructured.Unstructured, live Live,
	opts PlanOptions) ([]Decision, error) {
	concurrency := opts.Concurrency
	if concurrency <= 0 {
		concurrency = defaultConcurrency
	}
	decisions := make([]Decision, len(objects))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(concurrency)
	for i, o := range objects {
		g.Go(func() error {
			d, err := planOne(gctx, c, o, live.Get(o), opts)
			if err != nil {
				// The API server quotes invalid values: keep Secrets' out of status and events.
				return RedactSecretValues(err, []*unstructured.Unstructured{o})
			}
			decisions[i] = d
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	return decisions, nil
}

// planOne dry-runs o and decides. existing is the live object when it is known already
// (nil otherwise: it is then read only when the dry-run shows it exists, or fails).
func planOne(ctx context.Context, c client.Client, o, existing *unstructured.Unstructured, opts PlanOptions) (Decision, error) {
	utils.RemoveCABundleFromCRD(o)
	p := &planning{ctx: ctx, c: c, d: Decision{Object: o, Live: existing}, cleanUp: opts.CleanUpOtherTools}
	policy := Policy(o).Or(Policy(existing)).Or(opts.Policy.Of(o))
	if policy.Skip {
		p.d.Action = ssa.SkippedAction
		return p.d, nil
	}
	if policy.IfNotPresent {
		live, err := p.live()
		if err != nil {
			return Decision{}, fmt.Errorf("%s: reading the live object: %w", utils.FmtUnstructured(o), err)
		}
		if live != nil {
			p.d.Action = ssa.SkippedAction // created when missing, never updated
			return p.d, nil
		}
	}
	dryRun := o.DeepCopy()
	if err := dryRunApply(ctx, c, dryRun); err != nil {
		return p.dryRunFailed(err, dryRun, opts.Pending)
	}
	return p.dryRunDone(dryRun)
}

// planning is the decision on one object under way.
type planning struct {
	ctx     context.Context
	c       client.Client
	d       Decision
	cleanUp bool // PlanOptions.CleanUpOtherTools
}

// live returns the live object: the one known already, else the one read now, kept in
// the decision; nil when it does not exist.
func (p *planning) live() (*unstructured.Unstructured, error) {
	if p.d.Live != nil {
		return p.d.Live, nil
	}
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(p.d.Object.GroupVersionKind())
	if err := p.c.Get(p.ctx, client.ObjectKeyFromObject(p.d.Object), u); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, err
	}
	p.d.Live = u
	return u, nil
}

// dryRunFailed decides on an object whose dry-run failed with err: created when pending
// brings its kind or namespace, skipped when the live object is excluded, recreated when
// an immutable field changes and the object or the live one forces it, else an error.
func (p *planning) dryRunFailed(err error, dryRun *unstructured.Unstructured, pending *Pending) (Decision, error) {
	o := p.d.Object
	if note := pending.note(o, err); note != "" {
		p.d.Action, p.d.Note = ssa.CreatedAction, note
		return p.d, nil
	}
	live, getErr := p.live()
	if getErr == nil && live != nil && (Policy(live).Skip || Policy(live).IfNotPresent) {
		p.d.Action = ssa.SkippedAction
		return p.d, nil
	}
	if getErr == nil && live != nil && ssaerrors.IsImmutableError(err) && (Forced(o) || Forced(live)) {
		p.d.Action, p.d.Recreate = ssa.ConfiguredAction, true
		return p.d, nil
	}
	return Decision{}, ssaerrors.NewDryRunErr(err, dryRun)
}

// dryRunDone decides from the dry-run result: created when the object does not exist,
// skipped when the live one's policy says so, configured when it is taken over from
// another tool, else by comparing it with the live object.
func (p *planning) dryRunDone(dryRun *unstructured.Unstructured) (Decision, error) {
	p.d.DryRun = dryRun
	if dryRun.GetResourceVersion() == "" {
		p.d.Action = ssa.CreatedAction
		return p.d, nil
	}
	live, err := p.live()
	if err != nil {
		return Decision{}, fmt.Errorf("%s: reading the live object: %w", utils.FmtUnstructured(p.d.Object), err)
	}
	switch {
	case live == nil:
		p.d.Action = ssa.CreatedAction // deleted since the dry-run
	case Policy(live).Skip || Policy(live).IfNotPresent:
		p.d.Action, p.d.DryRun = ssa.SkippedAction, nil
	case TakesOver(p.d.Object, live, p.cleanUp):
		p.d.Action, p.d.Takeover = ssa.ConfiguredAction, true
	case Drifted(live, dryRun):
		p.d.Action = ssa.ConfiguredAction
	default:
		p.d.Action = ssa.UnchangedAction
	}
	return p.d, nil
}

func dryRunApply(ctx context.Context, c client.Client, o *unstructured.Unstructured) error {
	// The dry-run result is read back into o: the Patch form of server-side apply does that
	// for unstructured objects, as fluxcd/pkg/ssa relies on too.
	//nolint:staticcheck // see above
	return c.Patch(ctx, o, client.Apply, client.DryRunAll, client.ForceOwnership, client.FieldOwner(FieldManager))
}

// Drifted reports whether applying would change live: the dry-run result differs in its
// labels, annotations or anything outside metadata and status.
func Drifted(live, dryRun *unstructured.Unstructured) bool {
	if !apiequality.Semantic.DeepEqual(dryRun.GetLabels(), live.GetLabels()) ||
		!apiequality.Semantic.DeepEqual(dryRun.GetAnnotations(), live.GetAnnotations()) {
		return true
	}
	return !apiequality.Semantic.DeepEqual(comparable(dryRun).Object, comparable(live).Object)
}

func comparable(o *unstructured.Unstructured) *unstructured.Unstructured {
	u := o.DeepCopy()
	unstructured.RemoveNestedField(u.Object, "metadata")
	unstructured.RemoveNestedField(u.Object, "status")
	if err := normalize.DryRunUnstructured(u); err != nil {
		return o
	}
	return u
}
