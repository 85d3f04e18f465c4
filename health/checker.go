package health

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
)

// Checker waits for objects to become ready. It is safe for concurrent use; one per
// process (or per impersonated identity) is enough.
type Checker struct {
	dynamic  dynamic.Interface
	metadata metadata.Interface
	mapper   meta.RESTMapper
	clock    clock.Clock

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
	c := &Checker{dynamic: dyn, metadata: md, mapper: mapper, clock: clock.RealClock{}}
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
	rules, err := compileRules(programs, opts.Exprs)
	if err != nil {
		return Report{}, err
	}
	refs, err := distinct(objects)
	if err != nil {
		return Report{}, err
	}
	report := Report{Objects: make([]ObjectStatus, len(refs))}
	for i, r := range refs {
		report.Objects[i] = ObjectStatus{Ref: r, Status: Unknown, Message: "not observed yet"}
	}
	if len(refs) == 0 {
		return report, nil
	}
	settle(report.Objects, rules, opts)
	streams, err := c.plan(report.Objects, rules, opts)
	if err != nil {
		return report, err
	}

	timeout := opts.timeout()
	deadline := c.clock.NewTimer(timeout)
	defer deadline.Stop()

	watchCtx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() {
		cancel()
		wg.Wait()
	}()
	// send hands an update to the loop below and waits until it is applied, so that a
	// stream whose news ended the wait opens no further watch.
	updates := make(chan update)
	send := func(u update) bool {
		u.applied = make(chan struct{})
		select {
		case updates <- u:
		case <-watchCtx.Done():
			return false
		}
		select {
		case <-u.applied:
		case <-watchCtx.Done():
		}
		return watchCtx.Err() == nil
	}
	startStream := func(s *stream) {
		wg.Go(func() { s.run(watchCtx, c.clock, send) })
	}
	var slow <-chan time.Time
	if opts.OnSlow != nil && decide(report.Objects) == waiting {
		if opts.Slow <= 0 {
			opts.OnSlow(Report{Objects: slices.Clone(report.Objects)})
		} else {
			t := c.clock.NewTimer(opts.Slow)
			defer t.Stop()
			slow = t.C()
		}
	}
	if decide(report.Objects) != anyFailed {
		for _, s := range streams {
			startStream(s)
		}
	}

	for {
		switch decide(report.Objects) {
		case allCurrent:
			report.Elapsed = c.clock.Since(start)
			return report, nil
		case anyFailed:
			report.Elapsed = c.clock.Since(start)
			return report, &Error{Err: ErrFailed, Total: len(report.Objects), NotReady: report.NotReady()}
		}
		select {
		case <-ctx.Done():
			report.Elapsed = c.clock.Since(start)
			if cause := context.Cause(ctx); cause != ctx.Err() {
				return report, fmt.Errorf("health check interrupted: %w: %w", ctx.Err(), cause)
			}
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				// A deadline of the caller's is a timeout too: say what was not ready.
				return report, &Error{Err: fmt.Errorf("health check interrupted: %w", ctx.Err()),
					Total: len(report.Objects), NotReady: report.NotReady()}
			}
			return report, fmt.Errorf("health check interrupted: %w", ctx.Err())
		case <-slow:
			slow = nil
			opts.OnSlow(Report{Objects: slices.Clone(report.Objects), Elapsed: c.clock.Since(start)})
			continue
		case <-deadline.C():
			report.Elapsed = c.clock.Since(start)
			return report, &Error{Err: ErrTimeout, Timeout: timeout, Total: len(report.Objects), NotReady: report.NotReady()}
		case u := <-updates:
			for _, r := range u.results {
				report.Objects[r.index].Status = r.status
				report.Objects[r.index].Message = r.message
			}
			if u.from != nil && len(u.handOff) > 0 {
				startStream(u.from.fallback(u.handOff))
			}
			if c.observe != nil {
				c.observe(Report{Objects: slices.Clone(report.Objects), Elapsed: c.clock.Since(start)})
			}
			if decide(report.Objects) != waiting {
				cancel()
			}
			close(u.applied)
		}
	}
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
				gvr:          m.Resource,
				gvk:          ref.GVK,
				namespace:    ns,
				rule:         rule,
				since:        opts.Since,
				names:        map[string]int{},
				dynamic:      c.dynamic,
				metadata:     c.metadata,
				metadataOnly: c.metadata != nil && rule == nil && statusless(ref.GVK.GroupKind()),
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
