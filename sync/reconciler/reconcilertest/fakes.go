// Package reconcilertest has fakes of the reconciler's dependencies — source, renderer,
// health, applier and the clusters, the daemon's own and remote ones — so that the reconcile flow can be driven in plain unit tests, with a
// fake clock and a fake client, and envtest is kept for what needs a real API server.
package reconcilertest

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"

	"github.com/fluxcd/pkg/ssa"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
	"github.com/converge-gitops/converge/sources"
	"github.com/converge-gitops/converge/sync/apply"
	"github.com/converge-gitops/converge/sync/cluster"
	"github.com/converge-gitops/converge/sync/postbuild"
	"github.com/converge-gitops/converge/sync/render"
)

// checkoutPrefix starts the directory a Fetcher checks a revision out to: the Renderer
// reads the revision back from it.
const checkoutPrefix = "checkout:"

// Fetcher is a source whose ref points at one revision, which a test moves with Push.
// Revisions check out to a directory name the Renderer knows (or to Dir when set).
type Fetcher struct {
	// Dir, when set, is the checkout of every revision (a real tree for a real renderer).
	Dir string

	mu         sync.Mutex
	revision   string
	err        error
	unverified map[string]error
	forgotten  []client.ObjectKey
	resolves   int
}

// NewFetcher returns a Fetcher whose source points at revision.
func NewFetcher(revision string) *Fetcher {
	return &Fetcher{revision: revision, unverified: map[string]error{}}
}

// Push points the source at revision.
func (f *Fetcher) Push(revision string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.revision, f.err = revision, nil
}

// Fail makes the source fail to resolve with err until the next Push.
func (f *Fetcher) Fail(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.err = err
}

// Unverified makes the signatures of revision fail to verify with err.
func (f *Fetcher) Unverified(revision string, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.unverified[revision] = err
}

// Resolves counts the calls of Resolve and ResolveFresh.
func (f *Fetcher) Resolves() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.resolves
}

// Forgotten lists the SyncTargets Forget was called for.
func (f *Fetcher) Forgotten() []client.ObjectKey {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]client.ObjectKey(nil), f.forgotten...)
}

// Resolve returns the revision the source points at.
func (f *Fetcher) Resolve(context.Context, *convergev1.SyncTarget) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.resolves++
	return f.revision, f.err
}

// ResolveFresh is Resolve: the fake source is always fresh.
func (f *Fetcher) ResolveFresh(ctx context.Context, st *convergev1.SyncTarget, _ time.Time) (string, bool, error) {
	rev, err := f.Resolve(ctx, st)
	return rev, true, err
}

// Checkout returns Dir, or a name that the Renderer reads revision from.
func (f *Fetcher) Checkout(_ context.Context, _ *convergev1.SyncTarget, revision string) (string, error) {
	if f.Dir != "" {
		return f.Dir, nil
	}
	return checkoutPrefix + revision, nil
}

// Verify fails for the revisions given to Unverified.
func (f *Fetcher) Verify(_ context.Context, _ *convergev1.SyncTarget, revision string) (sources.Verification, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return sources.Verification{}, f.unverified[revision]
}

// CommitTime knows no commit times.
func (f *Fetcher) CommitTime(*convergev1.SyncTarget, string) (time.Time, bool) {
	return time.Time{}, false
}

// Forget records key.
func (f *Fetcher) Forget(key client.ObjectKey) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.forgotten = append(f.forgotten, key)
}

// Wakeups is nil: the fake source wakes nobody.
func (f *Fetcher) Wakeups() <-chan event.GenericEvent { return nil }

// Renderer renders the objects a test gave each revision, with the owner labels and
// target namespace the daemon's renderer would set.
type Renderer struct {
	mu      sync.Mutex
	objects map[string][]*unstructured.Unstructured
	errs    map[string]error
	renders int
	caps    []cluster.Capabilities
}

// NewRenderer returns a Renderer that knows no revision yet.
func NewRenderer() *Renderer {
	return &Renderer{objects: map[string][]*unstructured.Unstructured{}, errs: map[string]error{}}
}

// Set makes revision render objects.
func (r *Renderer) Set(revision string, objects ...*unstructured.Unstructured) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.objects[revision] = objects
}

// Break makes revision fail to render with err.
func (r *Renderer) Break(revision string, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.errs[revision] = err
}

// Renders counts the calls of Render.
func (r *Renderer) Renders() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.renders
}

// Capabilities are the cluster capabilities each Render of a chart found, in order.
func (r *Renderer) Capabilities() []cluster.Capabilities {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]cluster.Capabilities(nil), r.caps...)
}

// Render returns copies of the objects of the revision checked out at root, "${name}" in
// their annotations and string data replaced by the variables of vars; a SyncTarget with
// spec.chart or spec.helm renders as a chart.
func (r *Renderer) Render(_ context.Context, st *convergev1.SyncTarget, to cluster.Destination, root string,
	vars postbuild.Variables) (*render.Result, error) {
	chart := st.IsChart() || st.Spec.Helm != nil
	if chart && to.Capabilities != nil {
		caps, err := to.Capabilities()
		if err != nil {
			return nil, err
		}
		r.mu.Lock()
		r.caps = append(r.caps, caps)
		r.mu.Unlock()
	}
	objects, err := r.objectsOf(st, root, vars)
	if err != nil {
		return nil, err
	}
	return &render.Result{Objects: objects, Chart: chart}, nil
}

func (r *Renderer) objectsOf(st *convergev1.SyncTarget, root string, vars postbuild.Variables) ([]*unstructured.Unstructured, error) {
	revision, ok := strings.CutPrefix(root, checkoutPrefix)
	if !ok {
		return nil, fmt.Errorf("%s is no checkout of the fake fetcher", root)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.renders++
	if err := r.errs[revision]; err != nil {
		return nil, err
	}
	objects, ok := r.objects[revision]
	if !ok {
		return nil, fmt.Errorf("revision %s renders nothing the test knows", revision)
	}
	out := make([]*unstructured.Unstructured, len(objects))
	for i, o := range objects {
		c := o.DeepCopy()
		if ns := st.Spec.TargetNamespace; ns != "" && c.GetNamespace() == "" {
			c.SetNamespace(ns)
		}
		labels := c.GetLabels()
		if labels == nil {
			labels = map[string]string{}
		}
		labels[convergev1.NameLabel], labels[convergev1.NamespaceLabel] = st.Name, st.Namespace
		c.SetLabels(labels)
		substitute(c, vars.Substitution)
		out[i] = c
	}
	return out, nil
}

// Object returns an object of kind (v1 ConfigMap when empty) named name in namespace,
// with data, for a Renderer.
func Object(kind, namespace, name string, data map[string]any) *unstructured.Unstructured {
	if kind == "" {
		kind = "ConfigMap"
	}
	o := &unstructured.Unstructured{Object: map[string]any{"data": data}}
	o.SetAPIVersion("v1")
	o.SetKind(kind)
	o.SetNamespace(namespace)
	o.SetName(name)
	return o
}

// UnhealthyAnnotation on a rendered object makes Health find it failed.
const UnhealthyAnnotation = "test.converge.dev/unhealthy"

// Health finds every object healthy but those annotated UnhealthyAnnotation; Hook, when
// set, runs first, in the reconcile's goroutine, and its error (or nil) is the verdict.
type Health struct {
	Hook func(ctx context.Context, objects []*unstructured.Unstructured) error
}

// Wait implements the reconciler's HealthChecker.
func (h *Health) Wait(ctx context.Context, _ cluster.Cluster, _ *convergev1.SyncTarget, objects, _ []*unstructured.Unstructured,
	_ time.Time, _ time.Duration, _ func()) error {
	if h.Hook != nil {
		return h.Hook(ctx, objects)
	}
	for _, o := range objects {
		if why := o.GetAnnotations()[UnhealthyAnnotation]; why != "" {
			return fmt.Errorf("%s %s/%s: %s", o.GetKind(), o.GetNamespace(), o.GetName(), why)
		}
	}
	return nil
}

// Applier writes objects through the client as they are (create, or update of the live
// object), without dry-run or server-side apply: the flow's tests need what is live, not
// how it got there.
type Applier struct{}

// Apply implements the reconciler's Applier.
func (Applier) Apply(ctx context.Context, c client.Client, objects []*unstructured.Unstructured, _ apply.Live,
	_ time.Duration, _ apply.Options) (apply.Result, error) {
	res := apply.Result{ChangeSet: ssa.NewChangeSet()}
	for _, o := range objects {
		o = o.DeepCopy()
		live := &unstructured.Unstructured{}
		live.SetGroupVersionKind(o.GroupVersionKind())
		err := c.Get(ctx, client.ObjectKeyFromObject(o), live)
		action := ssa.CreatedAction
		switch {
		case apierrors.IsNotFound(err):
			err = c.Create(ctx, o)
			res.Created++
		case err == nil:
			o.SetResourceVersion(live.GetResourceVersion())
			err = c.Update(ctx, o)
			action = ssa.ConfiguredAction
			res.Configured++
		}
		if err != nil {
			return res, err
		}
		res.ChangeSet.Add(apply.ChangeSetEntry(o, action))
		res.Observed = append(res.Observed, o)
	}
	return res, nil
}

// substitute replaces "${name}" in o's annotations and string data by sub's variables.
func substitute(o *unstructured.Unstructured, sub *render.Substitution) {
	if sub == nil {
		return
	}
	expand := func(v string) string {
		for name, value := range sub.Vars {
			v = strings.ReplaceAll(v, "${"+name+"}", value)
		}
		return v
	}
	if a := o.GetAnnotations(); a != nil {
		for k, v := range a {
			a[k] = expand(v)
		}
		o.SetAnnotations(a)
	}
	if data, ok := o.Object["data"].(map[string]any); ok {
		for k, v := range data {
			if s, ok := v.(string); ok {
				data[k] = expand(s)
			}
		}
	}
}
