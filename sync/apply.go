package sync

import (
	"context"
	"fmt"
	"sort"
	gosync "sync"
	"time"

	"github.com/fluxcd/cli-utils/pkg/kstatus/polling"
	kstatus "github.com/fluxcd/cli-utils/pkg/kstatus/status"
	"github.com/fluxcd/cli-utils/pkg/object"
	"github.com/fluxcd/pkg/ssa"
	ssaerrors "github.com/fluxcd/pkg/ssa/errors"
	"github.com/fluxcd/pkg/ssa/normalize"
	"github.com/fluxcd/pkg/ssa/utils"
	"golang.org/x/sync/errgroup"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
)

// FieldManager is the server-side apply field manager of everything converge applies.
const FieldManager = "converge"

// ForceAnnotation set to "enabled" on an object lets converge delete and recreate it when
// a change touches an immutable field; without it such a change is reported, not forced.
const ForceAnnotation = "converge.dev/force"

// defaultApplyConcurrency is used when Applier.Concurrency is not set.
const defaultApplyConcurrency = 16

// ApplyResult counts what an apply did.
type ApplyResult struct {
	ChangeSet  *ssa.ChangeSet
	Created    int
	Configured int
	Unchanged  int
	// Observed are the objects as the API server returned them: written, or dry-run when
	// nothing was to be written. A health check starts from them instead of reading them again.
	Observed []*unstructured.Unstructured
}

// Applier applies rendered objects with server-side apply, in stages: CRDs, Namespaces
// and ClusterRoles first (and waited for when the API server's answer does not show them
// ready already), then class definitions, then the rest. Every object of a stage is dry-run
// before any object of it is written, so an invalid object leaves the stage untouched.
//
// Within a stage everything runs concurrently: the dry-runs, then the writes of the
// objects that differ. What the cluster holds is given by the caller (see checkOwnership)
// or learnt from one list per kind and namespace of the objects the SyncTarget already
// owns, so that an apply costs about one dry-run per object plus one write per change —
// not a read, a dry-run and a sequential write per object as fluxcd/pkg/ssa's ApplyAll does.
type Applier struct {
	// Concurrency of the dry-runs and writes of one stage (default 16).
	Concurrency int
}

var (
	forceSelector     = map[string]string{ForceAnnotation: "enabled"}
	exclusionSelector = map[string]string{convergev1.ReconcileAnnotation: convergev1.DisabledValue}
)

// Apply applies objects through c (an impersonating client when the SyncTarget names a
// service account). The objects must carry their owner labels already. live holds what
// the caller read of them already; nil has Apply list what the SyncTarget owns itself.
func (a Applier) Apply(ctx context.Context, c client.Client, objects []*unstructured.Unstructured, live liveObjects,
	timeout time.Duration) (ApplyResult, error) {
	var defs, classes, rest []*unstructured.Unstructured
	for _, o := range objects {
		switch {
		case utils.IsClusterDefinition(o):
			defs = append(defs, o)
		case utils.IsClassDefinition(o):
			classes = append(classes, o)
		default:
			rest = append(rest, o)
		}
	}
	cs := ssa.NewChangeSet()
	var observed []*unstructured.Unstructured
	var err error
	for _, stage := range []struct {
		objects []*unstructured.Unstructured
		wait    bool
	}{{defs, true}, {classes, true}, {rest, false}} {
		if len(stage.objects) == 0 {
			continue
		}
		var entries []ssa.ChangeSetEntry
		var got []*unstructured.Unstructured
		entries, got, err = a.applyStage(ctx, c, stage.objects, live)
		cs.Append(entries)
		observed = append(observed, got...)
		if err != nil {
			break
		}
		if stage.wait {
			if err = waitForStage(ctx, c, stage.objects, entries, got, timeout); err != nil {
				break
			}
		}
	}
	res := ApplyResult{ChangeSet: cs, Observed: observed}
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
		return res, redactSecretValues(fmt.Errorf("apply failed: %w", err), objects)
	}
	return res, nil
}

// applyStage dry-runs every object, then writes those that differ from the cluster. It
// returns, in the order of the entries, the objects as the API server last returned them
// (nil for a skipped one). On error the entries and objects written so far are returned.
func (a Applier) applyStage(ctx context.Context, c client.Client, objects []*unstructured.Unstructured,
	live liveObjects) ([]ssa.ChangeSetEntry, []*unstructured.Unstructured, error) {
	sort.Sort(ssa.SortableUnstructureds(objects))
	concurrency := a.Concurrency
	if concurrency <= 0 {
		concurrency = defaultApplyConcurrency
	}
	if live == nil {
		live = listOwned(ctx, c, objects)
	}

	entries := make([]ssa.ChangeSetEntry, len(objects))
	observed := make([]*unstructured.Unstructured, len(objects))
	write := make([]bool, len(objects))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(concurrency)
	for i, o := range objects {
		g.Go(func() error {
			action, dryRun, err := plan(gctx, c, o, live.get(o))
			if err != nil {
				return err
			}
			entries[i] = changeSetEntry(o, action)
			observed[i] = dryRun
			write[i] = action == ssa.CreatedAction || action == ssa.ConfiguredAction
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, nil, err
	}

	var mu gosync.Mutex
	written := make([]bool, len(objects))
	g, gctx = errgroup.WithContext(ctx)
	g.SetLimit(concurrency)
	for i, o := range objects {
		if !write[i] {
			continue
		}
		g.Go(func() error {
			applied := o.DeepCopy()
			//nolint:staticcheck // client.Apply as a patch type: like fluxcd/pkg/ssa, for unstructured objects
			if err := c.Patch(gctx, applied, client.Apply, client.ForceOwnership, client.FieldOwner(FieldManager)); err != nil {
				return fmt.Errorf("%s apply failed: %w", utils.FmtUnstructured(applied), err)
			}
			mu.Lock()
			written[i] = true
			observed[i] = applied
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

// waitForStage waits until the objects of a stage that later stages may depend on are
// ready. A Namespace or ClusterRole is ready once it exists, as the API server's answer
// shows; a new CRD needs a moment to be Established: only such objects are polled. Then,
// as an Established CRD is not always in discovery yet, the kinds of the stage's CRDs are
// waited for too, or the objects of those kinds that come next would fail their dry-run
// with "no matches for kind".
func waitForStage(ctx context.Context, c client.Client, objects []*unstructured.Unstructured,
	entries []ssa.ChangeSetEntry, got []*unstructured.Unstructured, timeout time.Duration) error {
	var unready []ssa.ChangeSetEntry
	for i, e := range entries {
		if !isCurrent(got[i]) {
			unready = append(unready, e)
		}
	}
	if len(unready) > 0 {
		poller := polling.NewStatusPoller(c, c.RESTMapper(), polling.Options{})
		rm := ssa.NewResourceManager(c, poller, ssa.Owner{Field: FieldManager, Group: convergev1.GroupVersion.Group})
		set := (&ssa.ChangeSet{Entries: unready}).ToObjMetadataSet()
		if err := rm.WaitForSet(set, ssa.WaitOptions{Interval: 200 * time.Millisecond, Timeout: timeout}); err != nil {
			return err
		}
	}
	return waitForKinds(ctx, c.RESTMapper(), objects, timeout)
}

// waitForKinds waits until the REST mapper knows every served version of the kinds the
// CRDs among objects define.
func waitForKinds(ctx context.Context, mapper meta.RESTMapper, objects []*unstructured.Unstructured, timeout time.Duration) error {
	type kind struct {
		gk      schema.GroupKind
		version string
	}
	var kinds []kind
	for _, o := range objects {
		if o.GroupVersionKind().GroupKind() != (schema.GroupKind{Group: "apiextensions.k8s.io", Kind: "CustomResourceDefinition"}) {
			continue
		}
		group, _, _ := unstructured.NestedString(o.Object, "spec", "group")
		name, _, _ := unstructured.NestedString(o.Object, "spec", "names", "kind")
		versions, _, _ := unstructured.NestedSlice(o.Object, "spec", "versions")
		for _, v := range versions {
			m, _ := v.(map[string]any)
			version, _ := m["name"].(string)
			if served, _ := m["served"].(bool); served && version != "" {
				kinds = append(kinds, kind{schema.GroupKind{Group: group, Kind: name}, version})
			}
		}
	}
	var missing kind
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		for _, k := range kinds {
			if _, err := mapper.RESTMapping(k.gk, k.version); err != nil {
				missing = k
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("%s %s/%s is not served yet: %w", missing.gk.Kind, missing.gk.Group, missing.version, err)
	}
	return nil
}

// isCurrent reports whether kstatus finds o (as the API server returned it) ready.
func isCurrent(o *unstructured.Unstructured) bool {
	if o == nil {
		return false
	}
	res, err := kstatus.Compute(o)
	return err == nil && res.Status == kstatus.CurrentStatus
}

// plan dry-runs o and says what applying it would do, with the dry-run's result (nil when
// o is skipped). existing is the live object when it is known already (nil otherwise: it
// is then read only when the dry-run shows it exists).
func plan(ctx context.Context, c client.Client, o *unstructured.Unstructured, existing *unstructured.Unstructured) (ssa.Action, *unstructured.Unstructured, error) {
	utils.RemoveCABundleFromCRD(o)
	if utils.AnyInMetadata(o, exclusionSelector) || (existing != nil && utils.AnyInMetadata(existing, exclusionSelector)) {
		return ssa.SkippedAction, nil, nil
	}
	read := func() (*unstructured.Unstructured, error) {
		if existing != nil {
			return existing, nil
		}
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(o.GroupVersionKind())
		if err := c.Get(ctx, client.ObjectKeyFromObject(o), u); err != nil {
			if apierrors.IsNotFound(err) {
				return nil, nil
			}
			return nil, err
		}
		existing = u
		return u, nil
	}

	dryRun := o.DeepCopy()
	err := dryRunApply(ctx, c, dryRun)
	if err != nil {
		live, getErr := read()
		if getErr == nil && live != nil && utils.AnyInMetadata(live, exclusionSelector) {
			return ssa.SkippedAction, nil, nil
		}
		if getErr == nil && live != nil && ssaerrors.IsImmutableError(err) &&
			(utils.AnyInMetadata(o, forceSelector) || utils.AnyInMetadata(live, forceSelector)) {
			if err := recreate(ctx, c, live); err != nil {
				return "", nil, fmt.Errorf("%s immutable field detected: %w", utils.FmtUnstructured(o), err)
			}
			dryRun = o.DeepCopy()
			err = dryRunApply(ctx, c, dryRun)
		}
		if err != nil {
			return "", nil, ssaerrors.NewDryRunErr(err, dryRun)
		}
	}
	if dryRun.GetResourceVersion() == "" {
		return ssa.CreatedAction, dryRun, nil
	}
	live, err := read()
	if err != nil {
		return "", nil, fmt.Errorf("%s: reading the live object: %w", utils.FmtUnstructured(o), err)
	}
	if live == nil {
		return ssa.CreatedAction, dryRun, nil // deleted since the dry-run
	}
	if utils.AnyInMetadata(live, exclusionSelector) {
		return ssa.SkippedAction, nil, nil
	}
	if drifted(live, dryRun) {
		return ssa.ConfiguredAction, dryRun, nil
	}
	return ssa.UnchangedAction, dryRun, nil
}

func dryRunApply(ctx context.Context, c client.Client, o *unstructured.Unstructured) error {
	// The dry-run result is read back into o: the Patch form of server-side apply does that
	// for unstructured objects, as fluxcd/pkg/ssa relies on too.
	//nolint:staticcheck // see above
	return c.Patch(ctx, o, client.Apply, client.DryRunAll, client.ForceOwnership, client.FieldOwner(FieldManager))
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

// drifted reports whether applying would change live: the dry-run result differs in its
// labels, annotations or anything outside metadata and status.
func drifted(live, dryRun *unstructured.Unstructured) bool {
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

func changeSetEntry(o *unstructured.Unstructured, action ssa.Action) ssa.ChangeSetEntry {
	return ssa.ChangeSetEntry{
		ObjMetadata:  object.UnstructuredToObjMetadata(o),
		GroupVersion: o.GroupVersionKind().Version,
		Subject:      utils.FmtUnstructured(o),
		Action:       action,
	}
}

// liveObjects are the objects a SyncTarget owns already, by kind, namespace and name.
type liveObjects map[schema.GroupVersionKind]map[client.ObjectKey]*unstructured.Unstructured

func (l liveObjects) get(o *unstructured.Unstructured) *unstructured.Unstructured {
	return l[o.GroupVersionKind()][client.ObjectKeyFromObject(o)]
}

func (l liveObjects) add(gvk schema.GroupVersionKind, o *unstructured.Unstructured) {
	if l[gvk] == nil {
		l[gvk] = map[client.ObjectKey]*unstructured.Unstructured{}
	}
	o.SetGroupVersionKind(gvk)
	l[gvk][client.ObjectKeyFromObject(o)] = o
}

// listOwned lists, per kind and namespace of objects, the live objects labelled for the
// owner the objects carry. A list that fails (a kind not served yet, no right to list)
// only means the objects concerned are read one by one when needed.
func listOwned(ctx context.Context, c client.Client, objects []*unstructured.Unstructured) liveObjects {
	live := liveObjects{}
	if len(objects) == 0 {
		return live
	}
	owner := map[string]string{}
	for _, k := range []string{convergev1.NameLabel, convergev1.NamespaceLabel} {
		v, ok := objects[0].GetLabels()[k]
		if !ok {
			return live
		}
		owner[k] = v
	}
	type scope struct {
		gvk       schema.GroupVersionKind
		namespace string
	}
	counts := map[scope]int{}
	for _, o := range objects {
		counts[scope{o.GroupVersionKind(), o.GetNamespace()}]++
	}
	for s, n := range counts {
		if n < 2 {
			continue // a single object costs a read either way
		}
		list := &unstructured.UnstructuredList{}
		list.SetGroupVersionKind(s.gvk.GroupVersion().WithKind(s.gvk.Kind + "List"))
		opts := []client.ListOption{client.MatchingLabels(owner)}
		if s.namespace != "" {
			opts = append(opts, client.InNamespace(s.namespace))
		}
		if err := c.List(ctx, list, opts...); err != nil {
			continue
		}
		for i := range list.Items {
			live.add(s.gvk, &list.Items[i])
		}
	}
	return live
}
