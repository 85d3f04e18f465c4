package fleet

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/source"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
	"github.com/converge-gitops/converge/sources"
	"github.com/converge-gitops/converge/sources/poll"
	"github.com/converge-gitops/converge/sync/render"
)

// FieldOwner is the field manager of the set's writes to the SyncTargets it generates.
const FieldOwner = "converge-set"

// Finalizer holds a set with preserveOnDeletion until it has released its SyncTargets.
const Finalizer = "converge.dev/set-release"

// retryAfter is when a set whose generators failed, or whose render ran out of time, is
// tried again.
const retryAfter = 30 * time.Second

// DefaultWorkers is how many sets are reconciled at once: a set that is slow to generate
// (a Git source that does not answer) or to render (up to RenderTimeout) holds one worker,
// and the sets of other namespaces go on with the others.
const DefaultWorkers = 4

// Reconciler reconciles SyncTargetSets.
type Reconciler struct {
	// Client reads sets and SyncTargets from the cache and writes them.
	Client client.Client
	// APIReader lists cluster Secrets (metadata only) and reads Git credentials, uncached.
	APIReader client.Reader
	// Dirs lists the directories of Git sources.
	Dirs Directories
	// PullRequests lists the open pull requests of forges.
	PullRequests PullRequests
	// Comments writes converge's comment on each pull request.
	Comments Comments
	// Schema validates renderings in process (see validate).
	Schema *Schema
	// Limits bound the template work of one reconcile.
	Limits Limits

	// accounts act as the service accounts that create previews' namespaces.
	accounts *asAccounts
	// diffs are the previews' diffs their pull requests' comments carry.
	diffs *previewDiffs

	// sizes are the sets' sizes, for the wait after a change of their SyncTargets.
	sizes setSizes
	// listed are the generations of the sets whose directories were listed.
	listed generations
}

// Options configure the controller.
type Options struct {
	// Cache configures the checkouts of the gitDirectories generator; Dir is required.
	Cache sources.CacheOptions
	// Workers is how many sets are reconciled at once; DefaultWorkers when zero.
	Workers int
	// Polls, when set, is the daemon's poll scheduler: the sources of gitDirectories
	// generators are polled by it (shared with the SyncTargets', at their interval or cron
	// schedule, at once on a push), and a set is reconciled when one of them moves.
	Polls *poll.Scheduler[sources.Key, sources.Source, sources.Polled]
	// AllowLoopback lets the forges of pullRequests generators be at loopback or
	// link-local addresses (tests; --allow-loopback-clusters).
	AllowLoopback bool
	// RenderPool renders the previews' diffs (pullRequests generators' diffAgainst) in
	// its worker processes: the daemon's render boundary. Nil, in a pool of their own.
	RenderPool *render.Pool
}

// SetupWithManager creates the controller and registers it with mgr: it watches sets
// (spec changes) and the SyncTargets they own (so that a SyncTarget becoming Ready
// advances a rollout), the latter only for a change the set reads (childChanged), and
// batched (batchFor). o.Workers sets are reconciled at once.
func SetupWithManager(mgr ctrl.Manager, o Options) (*Reconciler, error) {
	cache, err := sources.NewCache(o.Cache)
	if err != nil {
		return nil, err
	}
	schema, err := builtinSchema()
	if err != nil {
		return nil, err
	}
	wake := make(chan event.GenericEvent, 1024)
	forges := &ForgeLister{Reader: mgr.GetAPIReader(), Wake: wake, AllowLoopback: o.AllowLoopback}
	r := &Reconciler{
		Client:       mgr.GetClient(),
		APIReader:    mgr.GetAPIReader(),
		Dirs:         &GitLister{Reader: mgr.GetAPIReader(), Cache: cache, Timeout: o.Cache.FetchTimeout, Polls: o.Polls, Wake: wake},
		PullRequests: forges,
		Comments:     forges,
		Schema:       schema,
		accounts:     &asAccounts{config: mgr.GetConfig(), scheme: client.Options{Scheme: mgr.GetScheme(), Mapper: mgr.GetRESTMapper()}},
	}
	dr := diffRenderer{reader: mgr.GetAPIReader(), mapper: mgr.GetRESTMapper(), as: r.accountClient, pool: o.RenderPool}
	r.diffs = &previewDiffs{compute: dr.previewDiff, wake: func(set client.ObjectKey) { wakeSet(wake, set) }}
	workers := o.Workers
	if workers <= 0 {
		workers = DefaultWorkers
	}
	err = ctrl.NewControllerManagedBy(mgr).
		Named("synctargetset").
		WithOptions(controller.Options{MaxConcurrentReconciles: workers}).
		For(&convergev1.SyncTargetSet{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Watches(&convergev1.SyncTarget{}, enqueueSetOfChild(mgr.GetScheme(), mgr.GetRESTMapper(), r.sizes.batch), builder.WithPredicates(childChanged)).
		WatchesRawSource(source.Channel(wake, &handler.EnqueueRequestForObject{})).
		Complete(r)
	return r, err
}

// forgetSources ends the subscriptions of a set's Git directory listings when the set is
// gone (generation 0) or its spec changed since they were made: its next listing subscribes
// to what its generators follow now.
func (r *Reconciler) forgetSources(set client.ObjectKey, generation int64) {
	if !r.listed.changed(set, generation) {
		return
	}
	if l, ok := r.Dirs.(*GitLister); ok {
		l.Forget(set)
	}
	if l, ok := r.PullRequests.(*ForgeLister); ok {
		l.Forget(set)
	}
	if r.diffs != nil {
		r.diffs.forget(set)
	}
}

// CacheDir is where the daemon keeps the checkouts of the gitDirectories generator: a
// directory of the SyncTargets' cache whose name no checkout of it can have.
func CacheDir(checkouts string) string { return filepath.Join(checkouts, "sets") }

// Reconcile generates, validates and writes the SyncTargets of one set.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	set := &convergev1.SyncTargetSet{}
	if err := r.Client.Get(ctx, req.NamespacedName, set); err != nil {
		if apierrors.IsNotFound(err) {
			r.sizes.forget(req.NamespacedName)
			r.forgetSources(req.NamespacedName, 0)
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !set.DeletionTimestamp.IsZero() {
		r.forgetSources(req.NamespacedName, 0)
		return ctrl.Result{}, r.finalize(ctx, set)
	}
	r.forgetSources(req.NamespacedName, set.Generation)
	if err := r.syncFinalizer(ctx, set); err != nil {
		return ctrl.Result{}, err
	}
	return r.sync(ctx, set)
}

// syncFinalizer holds the set with preserveOnDeletion, or that creates its previews'
// namespaces, and lets it go without.
func (r *Reconciler) syncFinalizer(ctx context.Context, set *convergev1.SyncTargetSet) error {
	has := controllerutil.ContainsFinalizer(set, Finalizer)
	want := set.Spec.PreserveOnDeletion || namespaceCreator(set) != nil
	if has == want {
		return nil
	}
	if want {
		controllerutil.AddFinalizer(set, Finalizer)
	} else {
		controllerutil.RemoveFinalizer(set, Finalizer)
	}
	return r.Client.Update(ctx, set)
}

// finalize releases the SyncTargets of a set with preserveOnDeletion, or deletes the
// previews' namespaces the set created, then lets the set go; without preserveOnDeletion
// the garbage collector deletes its SyncTargets through their owner reference.
func (r *Reconciler) finalize(ctx context.Context, set *convergev1.SyncTargetSet) error {
	if !controllerutil.ContainsFinalizer(set, Finalizer) {
		return nil
	}
	if set.Spec.PreserveOnDeletion {
		owned, err := r.owned(ctx, set)
		if err != nil {
			return err
		}
		for _, st := range owned {
			if err := r.release(ctx, set, st); err != nil {
				return err
			}
		}
	} else if err := r.dropNamespaces(ctx, set, nil); err != nil {
		return err
	}
	controllerutil.RemoveFinalizer(set, Finalizer)
	return r.Client.Update(ctx, set)
}

// sync is one pass: generate, render, validate every rendering, then write the rollout's
// share and delete (or release) what is no longer generated.
func (r *Reconciler) sync(ctx context.Context, set *convergev1.SyncTargetSet) (ctrl.Result, error) {
	if err := checkPreviewIdentity(set); err != nil {
		return ctrl.Result{}, r.fail(ctx, set, convergev1.TemplateInvalidReason, err)
	}
	gen, err := Generate(ctx, Env{Namespace: set.Namespace, Set: set.Name, Secrets: r.APIReader, Dirs: r.Dirs,
		PullRequests: r.PullRequests}, set.Spec.Generators)
	if err != nil {
		reason := convergev1.GenerationFailedReason
		if errors.Is(err, sources.ErrVerificationFailed) {
			reason = convergev1.VerificationFailedReason
		}
		return ctrl.Result{RequeueAfter: retryAfter}, r.fail(ctx, set, reason, err)
	}
	targets, stale, err := r.targets(ctx, set, gen.Params)
	if err != nil {
		return r.renderFailed(ctx, set, err)
	}
	r.sizes.set(client.ObjectKeyFromObject(set), len(targets))
	AssignSteps(targets, set.Spec.Strategy)
	if err := r.validate(ctx, set, targets); err != nil {
		return ctrl.Result{}, r.fail(ctx, set, convergev1.TemplateInvalidReason, err)
	}
	plan := PlanRollout(targets, set.Spec.Strategy)
	if err := r.ensureNamespaces(ctx, set, plan.Apply); err != nil {
		if foreign := (*foreignNamespaceError)(nil); errors.As(err, &foreign) {
			return ctrl.Result{}, r.fail(ctx, set, convergev1.TemplateInvalidReason, err)
		}
		// Not allowed yet, or the API server away: tried again.
		return ctrl.Result{RequeueAfter: retryAfter}, r.fail(ctx, set, convergev1.GenerationFailedReason, err)
	}
	if err := r.write(ctx, set, plan.Apply); err != nil {
		if errors.Is(err, errNotOurs) || apierrors.IsInvalid(err) {
			return ctrl.Result{}, r.fail(ctx, set, convergev1.TemplateInvalidReason, err)
		}
		return ctrl.Result{}, err
	}
	for _, st := range stale {
		if err := r.remove(ctx, set, st); err != nil {
			return ctrl.Result{}, err
		}
	}
	if len(stale) > 0 && !set.Spec.PreserveOnDeletion {
		if err := r.dropNamespaces(ctx, set, targets); err != nil {
			return ctrl.Result{}, err
		}
	}
	if err := r.report(ctx, set, targets, plan, gen); err != nil {
		return ctrl.Result{}, err
	}
	r.comment(ctx, set, gen, targets)
	return ctrl.Result{RequeueAfter: gen.Recheck}, nil
}

// renderFailed reports a set whose templates did not render: TemplateInvalid, and nothing
// is written. A render that ran out of time is tried again after retryAfter (a busy
// machine may have slowed it); one the reconcile's end stopped is the reconcile's error.
func (r *Reconciler) renderFailed(ctx context.Context, set *convergev1.SyncTargetSet, err error) (ctrl.Result, error) {
	if ctx.Err() != nil {
		return ctrl.Result{}, err
	}
	res := ctrl.Result{}
	if errors.Is(err, ErrRenderDeadline) {
		res.RequeueAfter = retryAfter
	}
	return res, r.fail(ctx, set, convergev1.TemplateInvalidReason, err)
}

// targets renders every parameter set and pairs each rendering with the SyncTarget of
// that name the set owns; stale are the owned ones no longer generated.
func (r *Reconciler) targets(ctx context.Context, set *convergev1.SyncTargetSet, params []Params) ([]*Target, []*convergev1.SyncTarget, error) {
	rendered, err := Render(ctx, set, params, r.Limits)
	if err != nil {
		return nil, nil, err
	}
	owned, err := r.owned(ctx, set)
	if err != nil {
		return nil, nil, err
	}
	byName := make(map[string]*Target, len(rendered))
	targets := make([]*Target, 0, len(rendered))
	for _, rd := range rendered {
		if prev, dup := byName[rd.Name]; dup {
			return nil, nil, fmt.Errorf("parameters %s and %s both generate the SyncTarget %q", prev.Params, rd.Params, rd.Name)
		}
		t := &Target{Rendered: rd, Live: owned[rd.Name]}
		byName[rd.Name] = t
		targets = append(targets, t)
	}
	var stale []*convergev1.SyncTarget
	for name, st := range owned {
		if byName[name] == nil {
			stale = append(stale, st)
		}
	}
	return targets, stale, nil
}

// owned lists the SyncTargets of the set's namespace with its label whose controller is
// this set, by name.
func (r *Reconciler) owned(ctx context.Context, set *convergev1.SyncTargetSet) (map[string]*convergev1.SyncTarget, error) {
	list := &convergev1.SyncTargetList{}
	if err := r.Client.List(ctx, list, client.InNamespace(set.Namespace),
		client.MatchingLabels{convergev1.SetLabel: set.Name}); err != nil {
		return nil, err
	}
	out := make(map[string]*convergev1.SyncTarget, len(list.Items))
	for i := range list.Items {
		st := &list.Items[i]
		if controlledBy(st, set) {
			out[st.Name] = st
		}
	}
	return out, nil
}
