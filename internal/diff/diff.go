package diff

import (
	"context"
	"fmt"
	"sort"
	"strings"

	"github.com/fluxcd/pkg/ssa"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
	"github.com/converge-gitops/converge/sync/apply"
	"github.com/converge-gitops/converge/sync/hooks"
	"github.com/converge-gitops/converge/sync/target"
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
// stable order: by the stage the daemon applies them in (apply.Stage: CRDs, Namespaces
// and ClusterRoles, then *Class kinds, then the rest), then by group, kind, namespace
// and name.
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
	// MaxDeletions is spec.maxDeletions: a change that would prune more is refused by the
	// daemon, and so by Compute.
	MaxDeletions *intstr.IntOrString
	// Concurrency bounds the requests in flight (default 8).
	Concurrency int
}

// OptionsFor returns the Options of a SyncTarget.
func OptionsFor(st *convergev1.SyncTarget) Options {
	return Options{
		Owner:        types.NamespacedName{Namespace: st.Namespace, Name: st.Name},
		Prune:        st.Spec.Prune,
		Inventory:    st.Status.Inventory,
		AllowEmpty:   st.Spec.AllowEmpty,
		MaxDeletions: st.Spec.MaxDeletions,
	}
}

// recreateNote is the note of an object whose immutable field changes, forced.
const recreateNote = "an immutable field changes: converge deletes and recreates it (" + apply.ForceAnnotation + ": enabled)"

// Compute compares objects, rendered with their owner labels, with the cluster through
// the daemon's apply engine (apply.Plan): each is dry-run applied server-side with the
// daemon's field manager, forcing ownership as the daemon does, stage by stage (CRDs,
// Namespaces and ClusterRoles, then classes, then the rest). An object whose kind a CRD
// of the same render defines, or whose namespace a Namespace of the same render creates,
// cannot be dry-run yet: it is reported as created, with a note. Any other failure — a
// dry-run the API server rejects, an unknown kind, an immutable field the daemon would
// not force — is an error, as it would fail the daemon's apply. The prune listing uses
// the daemon's rules too (apply.Stale, apply.GuardEmpty, apply.Prunable).
//
// Compute reads and dry-runs only; it never writes to the cluster.
func Compute(ctx context.Context, c client.Client, objects []*unstructured.Unstructured, opts Options) (*Result, error) {
	if opts.Concurrency <= 0 {
		opts.Concurrency = 8
	}
	objects, _ = hooks.Split(objects) // a chart's hooks are run apart, never kept: no part of the set
	desired := make([]*unstructured.Unstructured, len(objects))
	for i, o := range objects {
		desired[i] = o.DeepCopy() // planning removes a CRD's CA bundle
	}
	planOpts := apply.PlanOptions{Concurrency: opts.Concurrency, Pending: apply.PendingOf(desired)}
	res := &Result{}
	for _, stage := range apply.Stages(desired) {
		decisions, err := apply.Plan(ctx, c, stage, nil, planOpts)
		if err != nil {
			return nil, err
		}
		for _, d := range decisions {
			v, err := fromDecision(d, opts.Owner)
			if err != nil {
				return nil, err
			}
			res.Objects = append(res.Objects, v)
		}
	}
	if opts.Prune && opts.Owner.Name != "" {
		pruned, err := prune(ctx, c, desired, opts)
		if err != nil {
			return nil, err
		}
		res.Objects = append(res.Objects, pruned...)
	}
	sortObjects(res.Objects)
	return res, nil
}

// fromDecision is the verdict on what the apply engine decided for one object.
func fromDecision(d apply.Decision, owner types.NamespacedName) (Object, error) {
	note := ownerNote(d.Live, owner)
	switch {
	case d.Action == ssa.SkippedAction:
		return verdict(Skip, d.Object, nil, nil, "")
	case d.Recreate:
		return verdict(Change, d.Object, nil, nil, joinNotes(note, recreateNote))
	case d.Action == ssa.CreatedAction:
		after := d.DryRun
		if after == nil {
			after = d.Object // not dry-run: see d.Note
		}
		return verdict(Create, d.Object, nil, after, joinNotes(d.Note, note))
	case d.Action == ssa.ConfiguredAction:
		return verdict(Change, d.Object, d.Live, d.DryRun, note)
	default:
		return verdict(Unchanged, d.Object, nil, nil, note)
	}
}

// ownerNote warns when a live object carries the owner labels of another SyncTarget.
func ownerNote(live *unstructured.Unstructured, owner types.NamespacedName) string {
	if live == nil || owner.Name == "" {
		return ""
	}
	l := live.GetLabels()
	name, ns := l[convergev1.NameLabel], l[convergev1.NamespaceLabel]
	if name == "" || apply.Owns(client.ObjectKey(owner), live) {
		return ""
	}
	return fmt.Sprintf("managed by SyncTarget %s/%s now", ns, name)
}

// prune lists the objects of the inventory that are no longer rendered and that the
// daemon would delete: still there, owned by this SyncTarget, not opted out.
func prune(ctx context.Context, c client.Client, objects []*unstructured.Unstructured, opts Options) ([]Object, error) {
	rules := target.Prune{Enabled: true, AllowEmpty: opts.AllowEmpty, MaxDeletions: opts.MaxDeletions}
	stale, err := rules.Stale(opts.Inventory, apply.NewInventory(objects), len(objects))
	if err != nil {
		return nil, fmt.Errorf("the change %w", err)
	}
	prunable, err := apply.Prunable(ctx, c, client.ObjectKey(opts.Owner), stale)
	if err != nil {
		return nil, err
	}
	var out []Object
	for _, p := range prunable.Objects {
		v, err := verdict(Prune, p.Live, p.Live, nil, "")
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

// rank is the stage the daemon applies o in (apply.Stage).
func rank(o Object) int {
	u := &unstructured.Unstructured{}
	u.SetAPIVersion(o.APIVersion)
	u.SetKind(o.Kind)
	return apply.Stage(u)
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
