package health

import (
	"context"
	"errors"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
)

// Checker waits for objects to become ready. It is safe for concurrent use; one per
// process (or per impersonated identity) is enough.
type Checker struct {
	src    source
	mapper meta.RESTMapper
	clock  clock.Clock

	// observe, when set, is called with a copy of the report every time an object's
	// status changes during a wait (tests use it to act once a wait is under way).
	observe func(Report)
}

// Option customises a Checker.
type Option func(*Checker)

// WithClock sets the clock used for the timeout and for retry back-off.
func WithClock(c clock.Clock) Option {
	return func(ch *Checker) { ch.clock = c }
}

// New returns a Checker talking to the API server of cfg, with its own dynamic and
// metadata clients and a lazily filled discovery REST mapper.
func New(cfg *rest.Config, opts ...Option) (*Checker, error) {
	httpClient, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("creating the HTTP client: %w", err)
	}
	dyn, err := dynamic.NewForConfigAndClient(cfg, httpClient)
	if err != nil {
		return nil, fmt.Errorf("creating the dynamic client: %w", err)
	}
	md, err := metadata.NewForConfigAndClient(cfg, httpClient)
	if err != nil {
		return nil, fmt.Errorf("creating the metadata client: %w", err)
	}
	mapper, err := apiutil.NewDynamicRESTMapper(cfg, httpClient)
	if err != nil {
		return nil, fmt.Errorf("creating the REST mapper: %w", err)
	}
	return NewForClients(dyn, md, mapper, opts...), nil
}

// NewForClients returns a Checker using existing clients, e.g. the manager's REST mapper.
// md may be nil; kinds without status (ConfigMaps, Secrets, RBAC…) are then watched
// through dyn in full instead of as metadata only.
func NewForClients(dyn dynamic.Interface, md metadata.Interface, mapper meta.RESTMapper, opts ...Option) *Checker {
	return newChecker(clientGoSource{dynamic: dyn, metadata: md}, mapper, opts...)
}

// NewForClient returns a Checker reading through c, with c's identity and REST mapper:
// what a caller holding only a controller-runtime client (an apply) waits with. c must
// read from the API server, not from a cache. A client.WithWatch is watched as with New;
// through another client each (kind, namespace) group is listed again every 200ms
// instead, with the same statuses, timeout and errors.
func NewForClient(c client.Client, opts ...Option) *Checker {
	return newChecker(runtimeSource{client: c}, c.RESTMapper(), opts...)
}

func newChecker(src source, mapper meta.RESTMapper, opts ...Option) *Checker {
	c := &Checker{src: src, mapper: mapper, clock: clock.RealClock{}}
	for _, o := range opts {
		o(c)
	}
	return c
}

// Wait watches objects until every one is Current (nil error), one is Failed (an *Error
// wrapping ErrFailed, returned as soon as it is seen) or opts.Timeout expires (an *Error
// wrapping ErrTimeout). An object that does not exist is NotFound, which is not ready.
// When ctx ends first, Wait returns promptly with an error wrapping ctx's error. Every
// watch it opened is stopped before it returns. The report holds the last status seen of
// each distinct object, in the order given.
//
// Invalid input is an error before anything is watched: an expression of opts.Exprs that
// does not compile (wrapping ErrInvalidExpr), an object without name or kind, a
// namespaced object without namespace. A kind the API server does not serve makes its
// objects Failed.
func (c *Checker) Wait(ctx context.Context, objects []ObjectRef, opts Options) (Report, error) {
	start := c.clock.Now()
	report, streams, err := c.prepare(objects, opts)
	if err != nil || len(report.Objects) == 0 {
		return report, err
	}
	w := &waitRun{checker: c, opts: opts, start: start, report: report, updates: make(chan update)}
	w.ctx, w.cancel = context.WithCancel(ctx)
	defer w.stop()
	return w.run(ctx, streams)
}

// prepare checks the input and plans the streams: the report starts with every object
// Unknown, or Current when opts.Observed shows it so, or Failed when its kind is not
// served. A report of no object needs no stream.
func (c *Checker) prepare(objects []ObjectRef, opts Options) (Report, []*stream, error) {
	rules, err := compileRules(programs, opts.Exprs)
	if err != nil {
		return Report{}, nil, err
	}
	refs, err := distinct(objects)
	if err != nil {
		return Report{}, nil, err
	}
	report := Report{Objects: make([]ObjectStatus, len(refs))}
	for i, r := range refs {
		report.Objects[i] = ObjectStatus{Ref: r, Status: Unknown, Message: "not observed yet"}
	}
	if len(refs) == 0 {
		return report, nil, nil
	}
	settle(report.Objects, rules, opts)
	streams, err := c.plan(report.Objects, rules, opts)
	return report, streams, err
}

// distinct checks the references and drops repeated ones, keeping the first.
func distinct(objects []ObjectRef) ([]ObjectRef, error) {
	seen := make(map[ObjectRef]bool, len(objects))
	out := make([]ObjectRef, 0, len(objects))
	var errs []error
	for _, r := range objects {
		if r.Name == "" || r.GVK.Kind == "" || r.GVK.Version == "" {
			errs = append(errs, fmt.Errorf("invalid object reference %q: apiVersion, kind and name are required", r.String()))
			continue
		}
		if seen[r] {
			continue
		}
		seen[r] = true
		out = append(out, r)
	}
	return out, errors.Join(errs...)
}

// settle marks Current the objects opts.Observed shows Current, so that no stream
// watches them.
func settle(objs []ObjectStatus, rules map[schema.GroupVersionKind]*exprRule, opts Options) {
	if len(opts.Observed) == 0 {
		return
	}
	byRef := observedByRef(opts.Observed)
	for i := range objs {
		u := byRef[objs[i].Ref]
		if u == nil {
			continue
		}
		st, msg := computeStatus(u, rules[objs[i].Ref.GVK])
		if st == Current {
			objs[i].Status, objs[i].Message = st, msg
		}
	}
}

func observedByRef(observed []*unstructured.Unstructured) map[ObjectRef]*unstructured.Unstructured {
	byRef := make(map[ObjectRef]*unstructured.Unstructured, len(observed))
	for _, o := range observed {
		if o != nil {
			byRef[RefForObject(o)] = o
		}
	}
	return byRef
}

// startFrom takes the status of the stream's one object from u, the object as the caller
// observed it after since, when it shows the object in progress: the stream then watches
// from u's resource version, and a list would only have said the same again.
func (s *stream) startFrom(obj *ObjectStatus, u *unstructured.Unstructured, since time.Time) {
	if u == nil || u.GetResourceVersion() == "" || since.IsZero() {
		return
	}
	st, msg := computeStatus(u, s.rule)
	st, msg = discountStale(u, st, msg, since)
	if st != InProgress {
		return
	}
	obj.Status, obj.Message = st, msg
	s.startRV = u.GetResourceVersion()
}

// groupKey is what one list and watch covers.
type groupKey struct {
	gvk       schema.GroupVersionKind
	namespace string
}

// plan resolves the resource of every kind and groups the objects into streams, one per
// (kind, namespace). Objects of a kind the API server does not serve are marked Failed.
func (c *Checker) plan(objs []ObjectStatus, rules map[schema.GroupVersionKind]*exprRule, opts Options) ([]*stream, error) {
	mappings := map[schema.GroupVersionKind]*meta.RESTMapping{}
	groups := map[groupKey]*stream{}
	var streams []*stream
	for i := range objs {
		if objs[i].Status == Current {
			continue // settled already
		}
		ref := objs[i].Ref
		m, known := mappings[ref.GVK]
		if !known {
			var err error
			m, err = c.mapper.RESTMapping(ref.GVK.GroupKind(), ref.GVK.Version)
			if err != nil && !meta.IsNoMatchError(err) {
				return nil, fmt.Errorf("finding the resource of %s %s: %w", ref.GVK.GroupVersion(), ref.GVK.Kind, err)
			}
			mappings[ref.GVK] = m // nil when not served
		}
		if m == nil {
			objs[i].Status = Failed
			objs[i].Message = fmt.Sprintf("the API server does not serve %s %s", ref.GVK.GroupVersion(), ref.GVK.Kind)
			continue
		}
		ns := ref.Namespace
		if m.Scope.Name() == meta.RESTScopeNameRoot {
			ns = ""
		} else if ns == "" {
			return nil, fmt.Errorf("invalid object reference %q: %s is namespaced and no namespace is given", ref.String(), ref.GVK.Kind)
		}
		key := groupKey{gvk: ref.GVK, namespace: ns}
		s, ok := groups[key]
		if !ok {
			rule := rules[ref.GVK]
			s = &stream{
				resource: resource{gvr: m.Resource, gvk: ref.GVK, namespace: ns,
					metadataOnly: rule == nil && statusless(ref.GVK.GroupKind())},
				src:   c.src,
				rule:  rule,
				since: opts.Since,
				names: map[string]int{},
			}
			groups[key] = s
			streams = append(streams, s)
		}
		s.names[ref.Name] = i
	}
	observed := observedByRef(opts.Observed)
	for _, s := range streams {
		switch {
		case len(s.names) == 1:
			for name, i := range s.names {
				s.fieldSelector = "metadata.name=" + name
				s.startFrom(&objs[i], observed[objs[i].Ref], opts.Since)
			}
		case opts.Selector != nil && !opts.Selector.Empty():
			s.labelSelector = opts.Selector.String()
		}
	}
	return streams, nil
}

// statusless kinds have no status to wait for: kstatus finds them Current as soon as they
// exist and are not being deleted, which their metadata tells. Watching them as metadata
// only keeps Secret data out of this process and big ConfigMaps off the wire.
func statusless(gk schema.GroupKind) bool {
	switch gk {
	case schema.GroupKind{Kind: "ConfigMap"},
		schema.GroupKind{Kind: "Secret"},
		schema.GroupKind{Kind: "ServiceAccount"},
		schema.GroupKind{Group: "rbac.authorization.k8s.io", Kind: "Role"},
		schema.GroupKind{Group: "rbac.authorization.k8s.io", Kind: "RoleBinding"},
		schema.GroupKind{Group: "rbac.authorization.k8s.io", Kind: "ClusterRole"},
		schema.GroupKind{Group: "rbac.authorization.k8s.io", Kind: "ClusterRoleBinding"}:
		return true
	}
	return false
}
