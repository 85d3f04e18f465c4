package health

import (
	"context"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/metadata"
	"k8s.io/utils/clock"
)

const (
	// initialBackoff and maxBackoff space the retries of a list or watch that failed
	// (an API server restarting, RBAC not there yet).
	initialBackoff = 500 * time.Millisecond
	maxBackoff     = 30 * time.Second
)

// update is what a stream tells the waiting loop: new statuses, and objects it stops
// looking after because its label selector does not find them (handOff, by name).
type update struct {
	from    *stream
	results []result
	handOff map[string]int
	// applied is closed once the update is applied (set by send).
	applied chan struct{}
}

// result is the status of the object at index in the report.
type result struct {
	index   int
	status  Status
	message string
}

// stream lists and then watches the objects of one kind in one namespace, narrowed by a
// label or field selector, and sends their statuses. Its fields are fixed once it runs,
// except names, which only its own goroutine touches.
type stream struct {
	gvr           schema.GroupVersionResource
	gvk           schema.GroupVersionKind
	namespace     string
	labelSelector string
	fieldSelector string
	// metadataOnly streams read objects as metadata (see statusless).
	metadataOnly bool
	rule         *exprRule
	// since discounts failures reported before the apply being waited for (discountStale).
	since    time.Time
	dynamic  dynamic.Interface
	metadata metadata.Interface
	// names maps the name of each object this stream looks after to its report index.
	names map[string]int
	// startRV, when set, is the resource version of the stream's one object as the caller
	// observed it (Options.Observed), its status taken from there already: the stream
	// watches from it without a first list. An expired version lists as usual.
	startRV string
}

// fallback returns a stream for objects a labelled stream handed off: the same kind and
// namespace without the label selector, by name when there is only one.
func (s *stream) fallback(names map[string]int) *stream {
	f := &stream{
		gvr:          s.gvr,
		gvk:          s.gvk,
		namespace:    s.namespace,
		metadataOnly: s.metadataOnly,
		rule:         s.rule,
		dynamic:      s.dynamic,
		metadata:     s.metadata,
		names:        names,
	}
	if len(names) == 1 {
		for name := range names {
			f.fieldSelector = "metadata.name=" + name
		}
	}
	return f
}

// run lists, then watches from the list's resource version, re-watching when a watch
// ends and re-listing when it failed or its version expired, until ctx ends, send fails
// or no object is left to look after.
func (s *stream) run(ctx context.Context, clk clock.Clock, send func(update) bool) {
	var (
		rv      = s.startRV
		backoff = initialBackoff
		lastErr string
	)
	// pause waits before a retry, longer each time, and reports whether to go on.
	pause := func() bool {
		ok := sleep(ctx, clk, backoff)
		backoff = min(2*backoff, maxBackoff)
		return ok
	}
	for ctx.Err() == nil && len(s.names) > 0 {
		if rv == "" {
			objs, listRV, err := s.list(ctx)
			if err != nil {
				if ctx.Err() != nil {
					return
				}
				// The objects' status is unknown until a list succeeds: say why.
				if msg := "cannot list " + s.gvr.Resource + ": " + err.Error(); msg != lastErr {
					lastErr = msg
					if !send(s.all(Unknown, msg)) {
						return
					}
				}
				if !pause() {
					return
				}
				continue
			}
			lastErr = ""
			if !send(s.fromList(objs)) || len(s.names) == 0 {
				return
			}
			rv = listRV
		}
		w, err := s.watch(ctx, rv)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			// Statuses stay as last seen; a fresh list after the pause catches up.
			rv = ""
			if !expired(err) && !pause() {
				return
			}
			continue
		}
		next, events, err := s.consume(ctx, w, rv, send)
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			rv = ""
			if !expired(err) && !pause() {
				return
			}
		case events == 0:
			// A watch that ends without a single event: don't spin.
			rv = next
			if !pause() {
				return
			}
		default:
			rv = next
			backoff = initialBackoff
		}
	}
}

// expired reports an error meaning the resource version to watch from is too old: a
// fresh list is needed, at once.
func expired(err error) bool {
	return apierrors.IsResourceExpired(err) || apierrors.IsGone(err)
}

// consume reads one watch until it ends, sending a status for every event about one of
// the stream's objects. It returns the last resource version seen, the number of events
// and the error an Error event carried.
func (s *stream) consume(ctx context.Context, w watch.Interface, rv string, send func(update) bool) (string, int, error) {
	defer w.Stop()
	events := 0
	for {
		var ev watch.Event
		var ok bool
		select {
		case <-ctx.Done():
			return rv, events, nil
		case ev, ok = <-w.ResultChan():
		}
		if !ok {
			return rv, events, nil
		}
		events++
		if ev.Type == watch.Error {
			return rv, events, apierrors.FromObject(ev.Object)
		}
		u, err := s.object(ev.Object)
		if err != nil {
			return rv, events, err
		}
		if v := u.GetResourceVersion(); v != "" {
			rv = v
		}
		if ev.Type == watch.Bookmark {
			continue
		}
		idx, mine := s.names[u.GetName()]
		if !mine {
			continue
		}
		var up update
		switch {
		case ev.Type == watch.Deleted && s.labelSelector != "":
			// Deleted, or no longer carrying the labels: look it up by name from now on.
			delete(s.names, u.GetName())
			up = update{from: s, handOff: map[string]int{u.GetName(): idx}}
		case ev.Type == watch.Deleted:
			up = update{results: []result{{index: idx, status: NotFound, message: "deleted"}}}
		default:
			st, msg := computeStatus(u, s.rule)
			st, msg = discountStale(u, st, msg, s.since)
			up = update{results: []result{{index: idx, status: st, message: msg}}}
		}
		if !send(up) {
			return rv, events, nil
		}
		if len(s.names) == 0 {
			return rv, events, nil
		}
	}
}

// fromList turns a list into statuses: objects found get theirs, objects not found are
// NotFound, or handed off when a label selector may have hidden them.
func (s *stream) fromList(objs []*unstructured.Unstructured) update {
	up := update{from: s}
	seen := make(map[string]bool, len(s.names))
	for _, u := range objs {
		idx, ok := s.names[u.GetName()]
		if !ok {
			continue
		}
		seen[u.GetName()] = true
		st, msg := computeStatus(u, s.rule)
		st, msg = discountStale(u, st, msg, s.since)
		up.results = append(up.results, result{index: idx, status: st, message: msg})
	}
	for name, idx := range s.names {
		if seen[name] {
			continue
		}
		if s.labelSelector != "" {
			if up.handOff == nil {
				up.handOff = map[string]int{}
			}
			up.handOff[name] = idx
			delete(s.names, name)
			continue
		}
		up.results = append(up.results, result{index: idx, status: NotFound, message: "not found"})
	}
	return up
}

// all gives every object of the stream the same status.
func (s *stream) all(st Status, msg string) update {
	up := update{}
	for _, idx := range s.names {
		up.results = append(up.results, result{index: idx, status: st, message: truncate(msg, maxMessage)})
	}
	return up
}

func (s *stream) listOptions() metav1.ListOptions {
	return metav1.ListOptions{LabelSelector: s.labelSelector, FieldSelector: s.fieldSelector}
}

// list reads the stream's objects and the resource version to watch from.
func (s *stream) list(ctx context.Context) ([]*unstructured.Unstructured, string, error) {
	if s.metadataOnly {
		l, err := s.metadata.Resource(s.gvr).Namespace(s.namespace).List(ctx, s.listOptions())
		if err != nil {
			return nil, "", err
		}
		objs := make([]*unstructured.Unstructured, 0, len(l.Items))
		for i := range l.Items {
			u, err := s.object(&l.Items[i])
			if err != nil {
				return nil, "", err
			}
			objs = append(objs, u)
		}
		return objs, l.ResourceVersion, nil
	}
	l, err := s.dynamic.Resource(s.gvr).Namespace(s.namespace).List(ctx, s.listOptions())
	if err != nil {
		return nil, "", err
	}
	objs := make([]*unstructured.Unstructured, 0, len(l.Items))
	for i := range l.Items {
		u, err := s.object(&l.Items[i])
		if err != nil {
			return nil, "", err
		}
		objs = append(objs, u)
	}
	return objs, l.GetResourceVersion(), nil
}

// watch opens a watch from rv, with bookmarks so that a re-watch starts from recent.
func (s *stream) watch(ctx context.Context, rv string) (watch.Interface, error) {
	opts := s.listOptions()
	opts.ResourceVersion = rv
	opts.AllowWatchBookmarks = true
	if s.metadataOnly {
		return s.metadata.Resource(s.gvr).Namespace(s.namespace).Watch(ctx, opts)
	}
	return s.dynamic.Resource(s.gvr).Namespace(s.namespace).Watch(ctx, opts)
}

// object turns what a list or watch returned into an unstructured object of the
// stream's kind. Secret data is dropped on arrival: nothing here needs it.
func (s *stream) object(obj runtime.Object) (*unstructured.Unstructured, error) {
	var u *unstructured.Unstructured
	switch o := obj.(type) {
	case *unstructured.Unstructured:
		u = o
	case *metav1.PartialObjectMetadata:
		m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&o.ObjectMeta)
		if err != nil {
			return nil, fmt.Errorf("reading the metadata of a %s: %w", s.gvk.Kind, err)
		}
		u = &unstructured.Unstructured{Object: map[string]any{"metadata": m}}
	default:
		m, err := meta.Accessor(obj)
		if err != nil {
			return nil, fmt.Errorf("unexpected %T in a watch of %s", obj, s.gvr.Resource)
		}
		u = &unstructured.Unstructured{Object: map[string]any{}}
		u.SetName(m.GetName())
		u.SetNamespace(m.GetNamespace())
		u.SetResourceVersion(m.GetResourceVersion())
	}
	if s.gvk.Group == "" && s.gvk.Kind == "Secret" {
		delete(u.Object, "data")
		delete(u.Object, "stringData")
	}
	u.SetGroupVersionKind(s.gvk)
	return u, nil
}

// sleep waits d unless ctx ends first, which it reports as false.
func sleep(ctx context.Context, clk clock.Clock, d time.Duration) bool {
	t := clk.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C():
		return true
	}
}
