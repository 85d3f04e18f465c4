package diff

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	gosync "sync"

	"github.com/fluxcd/cli-utils/pkg/object"
	ssaerrors "github.com/fluxcd/pkg/ssa/errors"
	"github.com/fluxcd/pkg/ssa/normalize"
	ssautils "github.com/fluxcd/pkg/ssa/utils"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
	"github.com/converge-gitops/converge/sync/apply"
)

// Action is what an apply would do to one object.
type Action string

// Actions, in the words of the summary line.
const (
	Create    Action = "create"
	Change    Action = "change"
	Prune     Action = "prune"
	Unchanged Action = "unchanged"
	// Skip: the object carries converge.dev/reconcile: disabled, the daemon leaves it alone.
	Skip Action = "skip"
)

// Object is the verdict on one object: what an apply would do and the unified diff of
// its live state against its state after the apply, Secret values masked.
type Object struct {
	Action     Action `json:"action"`
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Namespace  string `json:"namespace,omitempty"`
	Name       string `json:"name"`
	// Note says why the object could not be dry-run, or what else the reader should know.
	Note string `json:"note,omitempty"`
	// Diff is the unified diff of the live object against the object after the apply,
	// without managedFields, resourceVersion, generation, uid, creationTimestamp and
	// status; empty for unchanged and skipped objects.
	Diff string `json:"diff,omitempty"`
}

// Ref names the object as every converge message does: "apps/v1 Deployment shop/web".
func (o Object) Ref() string {
	name := o.Name
	if o.Namespace != "" {
		name = o.Namespace + "/" + o.Name
	}
	return o.APIVersion + " " + o.Kind + " " + name
}

// Result lists every rendered object, and every object a prune would delete, in a
// stable order: CRDs, then Namespaces, then the rest by group, kind, namespace and name.
type Result struct {
	Objects []Object
}

// Summary counts the objects of a Result by action.
type Summary struct {
	Create, Change, Prune, Unchanged, Skip int
}

// Summary counts the objects by action.
func (r *Result) Summary() Summary {
	var s Summary
	for _, o := range r.Objects {
		switch o.Action {
		case Create:
			s.Create++
		case Change:
			s.Change++
		case Prune:
			s.Prune++
		case Unchanged:
			s.Unchanged++
		case Skip:
			s.Skip++
		}
	}
	return s
}

// HasChanges is true when an apply would create, change or prune anything.
func (r *Result) HasChanges() bool {
	s := r.Summary()
	return s.Create+s.Change+s.Prune > 0
}

// String is the summary line: "3 to create, 2 to change, 1 to prune, 40 unchanged".
func (s Summary) String() string {
	line := fmt.Sprintf("%d to create, %d to change, %d to prune, %d unchanged", s.Create, s.Change, s.Prune, s.Unchanged)
	if s.Skip > 0 {
		line += fmt.Sprintf(", %d skipped (reconcile disabled)", s.Skip)
	}
	return line
}

// Options say whose objects these are and what the daemon would prune.
type Options struct {
	// Owner is the SyncTarget the objects are rendered for; zero for a plain directory,
	// which never prunes.
	Owner types.NamespacedName
	// Prune is the SyncTarget's spec.prune: list the objects of Inventory that are no
	// longer rendered, that Owner owns and that do not opt out of pruning.
	Prune bool
	// Inventory is the SyncTarget's status.inventory: what the daemon applied last.
	Inventory *convergev1.ResourceInventory
	// AllowEmpty is spec.allowEmpty: without it the daemon refuses to prune everything
	// because a revision renders nothing, and so does Compute.
	AllowEmpty bool
	// Concurrency bounds the requests in flight (default 8).
	Concurrency int
}

// OptionsFor returns the Options of a SyncTarget.
func OptionsFor(st *convergev1.SyncTarget) Options {
	return Options{
		Owner:      types.NamespacedName{Namespace: st.Namespace, Name: st.Name},
		Prune:      st.Spec.Prune,
		Inventory:  st.Status.Inventory,
		AllowEmpty: st.Spec.AllowEmpty,
	}
}

// Compute compares objects, rendered with their owner labels, with the cluster: each is
// dry-run applied server-side with the daemon's field manager, forcing ownership as the
// daemon does, in the daemon's stages (CRDs, Namespaces and ClusterRoles, then classes,
// then the rest). An object whose kind a CRD of the same render defines, or whose
// namespace a Namespace of the same render creates, cannot be dry-run yet: it is
// reported as created, with a note. Any other failure — a dry-run the API server
// rejects, an unknown kind, an immutable field the daemon would not force — is an error,
// as it would fail the daemon's apply.
//
// Compute reads and dry-runs only; it never writes to the cluster.
func Compute(ctx context.Context, c client.Client, objects []*unstructured.Unstructured, opts Options) (*Result, error) {
	if opts.Concurrency <= 0 {
		opts.Concurrency = 8
	}
	e := &engine{c: c, opts: opts, kinds: map[schema.GroupKind]bool{}, namespaces: map[string]bool{}}
	for _, o := range objects {
		switch {
		case ssautils.IsCRD(o):
			group, _, _ := unstructured.NestedString(o.Object, "spec", "group")
			kind, _, _ := unstructured.NestedString(o.Object, "spec", "names", "kind")
			e.kinds[schema.GroupKind{Group: group, Kind: kind}] = true
		case ssautils.IsNamespace(o):
			e.namespaces[o.GetName()] = true
		}
	}

	var defs, classes, rest []*unstructured.Unstructured
	for _, o := range objects {
		switch {
		case ssautils.IsClusterDefinition(o):
			defs = append(defs, o)
		case ssautils.IsClassDefinition(o):
			classes = append(classes, o)
		default:
			rest = append(rest, o)
		}
	}
	res := &Result{}
	for _, stage := range [][]*unstructured.Unstructured{defs, classes, rest} {
		out, err := e.stage(ctx, stage)
		if err != nil {
			return nil, err
		}
		res.Objects = append(res.Objects, out...)
	}
	if opts.Prune && opts.Owner.Name != "" {
		pruned, err := e.prune(ctx, objects)
		if err != nil {
			return nil, err
		}
		res.Objects = append(res.Objects, pruned...)
	}
	sortObjects(res.Objects)
	return res, nil
}

type engine struct {
	c    client.Client
	opts Options
	// kinds are defined by a CRD of the render, namespaces created by a Namespace of it.
	kinds      map[schema.GroupKind]bool
	namespaces map[string]bool
}

// stage dry-runs the objects of one stage, at most Concurrency at a time, and returns
// their verdicts in order, or the first error in order.
func (e *engine) stage(ctx context.Context, objects []*unstructured.Unstructured) ([]Object, error) {
	out := make([]Object, len(objects))
	errs := make([]error, len(objects))
	sem := make(chan struct{}, e.opts.Concurrency)
	var wg gosync.WaitGroup
	for i, o := range objects {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			out[i], errs[i] = e.object(ctx, o.DeepCopy())
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

// object decides what an apply would do to desired.
func (e *engine) object(ctx context.Context, desired *unstructured.Unstructured) (Object, error) {
	ssautils.RemoveCABundleFromCRD(desired) // as the daemon's applier does
	ref := describe(desired)

	live := &unstructured.Unstructured{}
	live.SetGroupVersionKind(desired.GroupVersionKind())
	err := e.c.Get(ctx, client.ObjectKeyFromObject(desired), live)
	switch {
	case err == nil:
	case apierrors.IsNotFound(err):
		live = nil
	case meta.IsNoMatchError(err):
		if e.kinds[desired.GroupVersionKind().GroupKind()] {
			return verdict(Create, desired, nil, desired,
				"not dry-run: its kind is defined by a CustomResourceDefinition of this change")
		}
		return Object{}, fmt.Errorf("%s: the cluster does not know the kind %s", ref, desired.GroupVersionKind().GroupKind())
	default:
		return Object{}, fmt.Errorf("reading %s: %w", ref, err)
	}

	disabled := map[string]string{convergev1.ReconcileAnnotation: convergev1.DisabledValue}
	if ssautils.AnyInMetadata(desired, disabled) || (live != nil && ssautils.AnyInMetadata(live, disabled)) {
		return verdict(Skip, desired, nil, nil, "")
	}
	note := e.ownerNote(live)

	after := desired.DeepCopy()
	err = e.c.Apply(ctx, client.ApplyConfigurationFromUnstructured(after),
		client.DryRunAll, client.ForceOwnership, client.FieldOwner(apply.FieldManager))
	if err != nil {
		switch {
		case live == nil && desired.GetNamespace() != "" && missingNamespace(err, desired.GetNamespace()):
			if e.namespaces[desired.GetNamespace()] {
				return verdict(Create, desired, nil, desired,
					"not dry-run: its namespace is created by this change")
			}
			return Object{}, fmt.Errorf("%s: namespace %s does not exist", ref, desired.GetNamespace())
		case meta.IsNoMatchError(err) && e.kinds[desired.GroupVersionKind().GroupKind()]:
			return verdict(Create, desired, nil, desired,
				"not dry-run: its kind is defined by a CustomResourceDefinition of this change")
		case live != nil && ssaerrors.IsImmutableError(err) && forced(desired, live):
			return verdict(Change, desired, nil, nil, joinNotes(note,
				"an immutable field changes: converge deletes and recreates it ("+apply.ForceAnnotation+": enabled)"))
		}
		// The API server quotes an invalid value in its error: a Secret's must not show.
		return Object{}, apply.RedactSecretValues(fmt.Errorf("dry-run of %s failed: %w", ref, err),
			[]*unstructured.Unstructured{desired})
	}

	switch {
	case live == nil || after.GetResourceVersion() == "":
		return verdict(Create, desired, nil, after, note)
	case drifted(live, after):
		return verdict(Change, desired, live, after, note)
	default:
		return verdict(Unchanged, desired, nil, nil, note)
	}
}

// ownerNote warns when a live object carries the owner labels of another SyncTarget.
func (e *engine) ownerNote(live *unstructured.Unstructured) string {
	if live == nil || e.opts.Owner.Name == "" {
		return ""
	}
	l := live.GetLabels()
	name, ns := l[convergev1.NameLabel], l[convergev1.NamespaceLabel]
	if name == "" || apply.Owns(client.ObjectKey(e.opts.Owner), live) {
		return ""
	}
	return fmt.Sprintf("managed by SyncTarget %s/%s now", ns, name)
}

// prune lists the objects of the inventory that are no longer rendered and that the
// daemon would delete: still there, owned by this SyncTarget, not opted out.
func (e *engine) prune(ctx context.Context, objects []*unstructured.Unstructured) ([]Object, error) {
	stale := apply.Stale(e.opts.Inventory, apply.NewInventory(objects))
	if len(objects) == 0 && len(stale) > 0 && !e.opts.AllowEmpty {
		return nil, fmt.Errorf("the change renders no objects: converge refuses to prune all %d objects of the SyncTarget (set spec.allowEmpty to allow it)", len(stale))
	}
	var out []Object
	for _, entry := range stale {
		id, err := object.ParseObjMetadata(entry.ID)
		if err != nil {
			return nil, fmt.Errorf("invalid inventory entry %q: %w", entry.ID, err)
		}
		live := &unstructured.Unstructured{}
		live.SetGroupVersionKind(id.GroupKind.WithVersion(entry.Version))
		live.SetNamespace(id.Namespace)
		live.SetName(id.Name)
		err = e.c.Get(ctx, client.ObjectKeyFromObject(live), live)
		if apierrors.IsNotFound(err) || meta.IsNoMatchError(err) {
			continue // already gone
		}
		if err != nil {
			return nil, fmt.Errorf("reading %s: %w", describe(live), err)
		}
		if !apply.Owns(client.ObjectKey(e.opts.Owner), live) ||
			live.GetAnnotations()[convergev1.PruneAnnotation] == convergev1.DisabledValue {
			continue
		}
		v, err := verdict(Prune, live, live, nil, "")
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, nil
}

// verdict builds the Object for id with the diff of live against after (either nil).
func verdict(action Action, id, live, after *unstructured.Unstructured, note string) (Object, error) {
	o := Object{
		Action:     action,
		APIVersion: id.GetAPIVersion(),
		Kind:       id.GetKind(),
		Namespace:  id.GetNamespace(),
		Name:       id.GetName(),
		Note:       note,
	}
	if live == nil && after == nil {
		return o, nil
	}
	d, err := unifiedDiff(live, after)
	if err != nil {
		return Object{}, fmt.Errorf("%s: %w", describe(id), err)
	}
	o.Diff = d
	return o, nil
}

// drifted tells, as the daemon's applier does, whether applying would change live: its
// labels, its annotations, or anything but its metadata and status.
func drifted(live, after *unstructured.Unstructured) bool {
	if !apiequality.Semantic.DeepEqual(after.GetLabels(), live.GetLabels()) ||
		!apiequality.Semantic.DeepEqual(after.GetAnnotations(), live.GetAnnotations()) {
		return true
	}
	return !apiequality.Semantic.DeepEqual(bodyOf(after).Object, bodyOf(live).Object)
}

func bodyOf(u *unstructured.Unstructured) *unstructured.Unstructured {
	c := u.DeepCopy()
	unstructured.RemoveNestedField(c.Object, "metadata")
	unstructured.RemoveNestedField(c.Object, "status")
	if err := normalize.DryRunUnstructured(c); err != nil {
		return u
	}
	return c
}

// forced is true when the daemon may delete and recreate the object.
func forced(desired, live *unstructured.Unstructured) bool {
	sel := map[string]string{apply.ForceAnnotation: "enabled"}
	return ssautils.AnyInMetadata(desired, sel) || ssautils.AnyInMetadata(live, sel)
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

func joinNotes(notes ...string) string {
	var out []string
	for _, n := range notes {
		if n != "" {
			out = append(out, n)
		}
	}
	return strings.Join(out, "; ")
}

// describe names an object as every converge message does.
func describe(u *unstructured.Unstructured) string {
	return Object{APIVersion: u.GetAPIVersion(), Kind: u.GetKind(), Namespace: u.GetNamespace(), Name: u.GetName()}.Ref()
}

// rank puts CRDs first, then Namespaces, as the daemon applies them.
func rank(o Object) int {
	gv, _ := schema.ParseGroupVersion(o.APIVersion)
	switch {
	case gv.Group == "apiextensions.k8s.io" && o.Kind == "CustomResourceDefinition":
		return 0
	case gv.Group == "" && o.Kind == "Namespace":
		return 1
	}
	return 2
}

// sortObjects puts objects in the order of Result.
func sortObjects(objects []Object) {
	sort.SliceStable(objects, func(i, j int) bool { return less(objects[i], objects[j]) })
}

func less(a, b Object) bool {
	if ra, rb := rank(a), rank(b); ra != rb {
		return ra < rb
	}
	ga, _ := schema.ParseGroupVersion(a.APIVersion)
	gb, _ := schema.ParseGroupVersion(b.APIVersion)
	for _, p := range [][2]string{{ga.Group, gb.Group}, {a.Kind, b.Kind}, {a.Namespace, b.Namespace}, {a.Name, b.Name}} {
		if p[0] != p[1] {
			return p[0] < p[1]
		}
	}
	return false
}
