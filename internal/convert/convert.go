package convert

import (
	"context"
	"fmt"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/controller-runtime/pkg/client"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
	"github.com/converge-gitops/converge/internal/crdvalidate"
)

// API groups of the objects converted.
const (
	fluxSourceGroup       = "source.toolkit.fluxcd.io"
	fluxKustomizeGroup    = "kustomize.toolkit.fluxcd.io"
	fluxHelmGroup         = "helm.toolkit.fluxcd.io"
	fluxNotificationGroup = "notification.toolkit.fluxcd.io"
	argoGroup             = "argoproj.io"
)

// notePrefix starts every comment about a field that has no equivalent or behaves differently.
const notePrefix = "converge convert: "

// Note is a comment on a field of a converted object: Path is the dotted path of the field
// in the output (e.g. spec.source.ref); when that field is absent, the comment goes on its
// nearest present parent.
type Note struct {
	Path string
	Text string
}

// Object is one converge object made from one or more input objects.
type Object struct {
	// From names the input objects, e.g. "Kustomization flux-system/apps".
	From []string
	// Object is a *SyncTarget, *SyncTargetSet or *Notifier of api/v1alpha1.
	Object client.Object
	// Notes are the comments on its fields.
	Notes []Note
}

// Problem is something of the input that could not be carried over.
type Problem struct {
	// From names the input object, e.g. "HelmRelease podinfo/podinfo".
	From string
	// Field is the path of the field in the input, empty for the whole object.
	Field string
	// Reason says why, and what to do instead.
	Reason string
	// Warning marks a remark that loses nothing (an unused source, a skipped file).
	Warning bool
}

// String is the problem on one line, its unprintable characters escaped: the names and
// field names it holds come from the input.
func (p Problem) String() string {
	s := p.From
	if p.Field != "" {
		s += ": " + p.Field
	}
	return escape(s + ": " + p.Reason)
}

// Result is the outcome of a conversion.
type Result struct {
	Objects  []Object
	Problems []Problem
}

// Failed reports whether anything could not be carried over (a Problem that is not a warning).
func (r *Result) Failed() bool {
	for _, p := range r.Problems {
		if !p.Warning {
			return true
		}
	}
	return false
}

// CleanUpOtherTools annotates every SyncTarget of the result, and the SyncTarget template
// of every SyncTargetSet, with converge.dev/clean-up-other-tools: enabled, so that taking
// over the objects Flux or Argo CD made also removes the labels and annotations they left.
func (r *Result) CleanUpOtherTools() {
	for _, o := range r.Objects {
		switch obj := o.Object.(type) {
		case *convergev1.SyncTarget:
			obj.SetAnnotations(withCleanUp(obj.GetAnnotations()))
		case *convergev1.SyncTargetSet:
			obj.Spec.Template.Metadata.Annotations = withCleanUp(obj.Spec.Template.Metadata.Annotations)
		}
	}
}

func withCleanUp(annotations map[string]string) map[string]string {
	if annotations == nil {
		annotations = map[string]string{}
	}
	annotations[convergev1.CleanUpOtherToolsAnnotation] = convergev1.EnabledValue
	return annotations
}

// key identifies an input object.
type key struct{ group, kind, namespace, name string }

func keyOf(u *unstructured.Unstructured) key {
	return key{u.GroupVersionKind().Group, u.GetKind(), u.GetNamespace(), u.GetName()}
}

// String is e.g. "Kustomization flux-system/apps"; a namespace or name that is not plain
// text is Go-quoted.
func (k key) String() string {
	if k.namespace == "" {
		return k.kind + " " + quoteName(k.name)
	}
	return k.kind + " " + quoteName(k.namespace) + "/" + quoteName(k.name)
}

// badName is the field of u's metadata that the API server would refuse, "" when none:
// such an object was never in a cluster, and what it converts into would not be either.
func badName(u *unstructured.Unstructured) string {
	if len(validation.IsDNS1123Subdomain(u.GetName())) > 0 {
		return "metadata.name"
	}
	if ns := u.GetNamespace(); ns != "" && len(validation.IsDNS1123Label(ns)) > 0 {
		return "metadata.namespace"
	}
	return ""
}

// converter holds the input, indexed, and what the conversion produced.
type converter struct {
	objs     map[key]*unstructured.Unstructured
	used     map[key]bool
	res      Result
	problems []Problem
}

// converters of the kinds that yield converge objects; the other Flux and Argo CD kinds
// are read through them (sources, providers) or have no equivalent.
var converters = map[schemaKind]func(*converter, *unstructured.Unstructured){
	{fluxKustomizeGroup, "Kustomization"}: (*converter).kustomization,
	{fluxHelmGroup, "HelmRelease"}:        (*converter).helmRelease,
	{fluxNotificationGroup, "Alert"}:      (*converter).alert,
	{argoGroup, "Application"}:            (*converter).application,
	{argoGroup, "ApplicationSet"}:         (*converter).applicationSet,
	{fluxSourceGroup, "GitRepository"}:    nil,
	{fluxSourceGroup, "HelmRepository"}:   nil,
	{fluxSourceGroup, "OCIRepository"}:    nil,
	{fluxSourceGroup, "Bucket"}:           nil,
	{fluxNotificationGroup, "Provider"}:   nil,
	{fluxSourceGroup, "HelmChart"}:        nil,
	{fluxNotificationGroup, "Receiver"}:   (*converter).receiver,
	{argoGroup, "AppProject"}:             (*converter).appProject,
}

type schemaKind struct{ group, kind string }

// Relevant reports whether u is a Flux or Argo CD object convert reads.
func Relevant(u *unstructured.Unstructured) bool {
	switch u.GroupVersionKind().Group {
	case fluxSourceGroup, fluxKustomizeGroup, fluxHelmGroup, fluxNotificationGroup:
		return true
	case argoGroup:
		_, ok := converters[schemaKind{argoGroup, u.GetKind()}]
		return ok
	}
	return false
}

// Convert converts the Flux and Argo CD objects of in; other objects are ignored. An
// object given twice (same kind, namespace and name) is used once, the first time; one
// whose name or namespace is not a valid Kubernetes name is a problem, and not read.
// The objects of the result are sorted by kind, namespace and name, its problems by
// input object and field.
func Convert(in []*unstructured.Unstructured) Result {
	c := &converter{objs: map[key]*unstructured.Unstructured{}, used: map[key]bool{}}
	var order []key
	for _, u := range in {
		if !Relevant(u) {
			continue
		}
		k := keyOf(u)
		if field := badName(u); field != "" {
			c.problem(k.String(), field, "not a valid Kubernetes name (the API server refuses it): not converted", false)
			continue
		}
		if _, dup := c.objs[k]; dup {
			c.problem(k.String(), "", "given more than once; the first one is converted", true)
			continue
		}
		c.objs[k] = u
		order = append(order, k)
	}
	for _, k := range order {
		conv, known := converters[schemaKind{k.group, k.kind}]
		switch {
		case conv != nil:
			conv(c, c.objs[k])
		case !known:
			c.problem(k.String(), "", "this kind has no equivalent in converge", false)
		}
	}
	c.unused(order)
	c.finish()
	return c.res
}

// unused warns about the sources and providers no converted object read.
func (c *converter) unused(order []key) {
	for _, k := range order {
		conv, known := converters[schemaKind{k.group, k.kind}]
		if known && conv == nil && !c.used[k] && k.kind != "HelmChart" {
			c.problem(k.String(), "", "not used by any object of the input, so not converted", true)
		}
	}
}

func (c *converter) problem(from, field, reason string, warning bool) {
	c.problems = append(c.problems, Problem{From: from, Field: field, Reason: reason, Warning: warning})
}

// lookup returns the input object kind/ns/name of group, and marks it used.
func (c *converter) lookup(group, kind, ns, name string) *unstructured.Unstructured {
	k := key{group, kind, ns, name}
	u := c.objs[k]
	if u != nil {
		c.used[k] = true
	}
	return u
}

func (c *converter) add(o Object) {
	c.res.Objects = append(c.res.Objects, o)
}

func (c *converter) finish() {
	sort.SliceStable(c.res.Objects, func(i, j int) bool {
		a, b := c.res.Objects[i].Object, c.res.Objects[j].Object
		ka := a.GetObjectKind().GroupVersionKind().Kind + "\x00" + a.GetNamespace() + "\x00" + a.GetName()
		kb := b.GetObjectKind().GroupVersionKind().Kind + "\x00" + b.GetNamespace() + "\x00" + b.GetName()
		return ka < kb
	})
	c.collisions()
	c.validate()
	sort.SliceStable(c.problems, func(i, j int) bool {
		a, b := c.problems[i], c.problems[j]
		if a.From != b.From {
			return a.From < b.From
		}
		return a.Field < b.Field
	})
	c.res.Problems = c.problems
}

// validate checks every converted object as the API server would check its create
// (package crdvalidate): one it would refuse is a problem, named after its input.
func (c *converter) validate() {
	for _, o := range c.res.Objects {
		kind := o.Object.GetObjectKind().GroupVersionKind().Kind
		errs, err := validateObject(o.Object)
		switch {
		case err != nil:
			c.problem(strings.Join(o.From, ", "), "", "the converted "+kind+" could not be checked: "+err.Error(), false)
		case len(errs) > 0:
			c.problem(strings.Join(o.From, ", "), "", "the API server would refuse the converted "+kind+": "+errs.ToAggregate().Error(), false)
		}
	}
}

// validateObject is what the API server would refuse in a create of obj.
func validateObject(obj client.Object) (field.ErrorList, error) {
	v, err := crdvalidate.For(obj.GetObjectKind().GroupVersionKind().Kind)
	if err != nil {
		return nil, err
	}
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return nil, err
	}
	delete(m, "status")
	return v.Errors(context.Background(), &unstructured.Unstructured{Object: m}), nil
}

// sink gathers the notes of one output object.
type sink struct {
	c     *converter
	notes []Note
}

// conv converts one input object (or a part of it) into a part of one output object: in
// is the prefix of the input's field paths, out the prefix of the output's.
type conv struct {
	s        *sink
	from     string
	in, out  string
	clusters bool // an ApplicationSet's clusters generator yields the parameters
}

func newConv(c *converter, u *unstructured.Unstructured) *conv {
	return &conv{s: &sink{c: c}, from: keyOf(u).String(), in: "spec.", out: "spec."}
}

// at is c for the fields of another input object (from), or another part of the same.
func (c *conv) at(from, in, out string) *conv {
	n := *c
	if from != "" {
		n.from = from
	}
	n.in, n.out = in, out
	return &n
}

// note comments the output field at path (relative to c.out).
func (c *conv) note(path, format string, args ...any) {
	c.s.notes = append(c.s.notes, Note{Path: strings.TrimSuffix(c.out+path, "."), Text: fmt.Sprintf(format, args...)})
}

// lost reports the input field at inPath (relative to c.in) as not carried over, and
// comments it at the output's path.
func (c *conv) lost(inPath, outPath, reason string) {
	field := strings.TrimSuffix(c.in+inPath, ".")
	c.note(outPath, "%s (%s): %s", field, c.kindName(), reason)
	c.s.c.problem(c.from, field, reason, false)
}

// kindName is the kind of the input object, e.g. Kustomization.
func (c *conv) kindName() string {
	kind, _, _ := strings.Cut(c.from, " ")
	return kind
}

// object finishes an output object.
func (c *conv) object(o client.Object, from ...string) {
	c.s.c.add(Object{From: from, Object: o, Notes: c.s.notes})
}

// collisions reports two input objects converted into objects of the same kind, namespace
// and name (a Kustomization and a HelmRelease of one name): the objects are sorted already.
func (c *converter) collisions() {
	objs := c.res.Objects
	for i := 1; i < len(objs); i++ {
		a, b := objs[i-1].Object, objs[i].Object
		if a.GetObjectKind().GroupVersionKind().Kind == b.GetObjectKind().GroupVersionKind().Kind &&
			a.GetNamespace() == b.GetNamespace() && a.GetName() == b.GetName() {
			c.problem(objs[i].From[0], "metadata.name", "converts to the same "+b.GetObjectKind().GroupVersionKind().Kind+
				" as "+objs[i-1].From[0]+": rename one of them, and the dependsOn that name it", false)
		}
	}
}
