package health

import (
	"context"
	"errors"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
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

// stream lists and then watches the objects of one resource, narrowed by a label or
// field selector, and sends their statuses. Its fields are fixed once it runs, except
// names, which only its own goroutine touches.
type stream struct {
	resource
	src           source
	labelSelector string
	fieldSelector string
	rule          *exprRule
	// since discounts failures reported before the apply being waited for (discountStale).
	since time.Time
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
	f := &stream{resource: s.resource, src: s.src, rule: s.rule, names: names}
	if len(names) == 1 {
		for name := range names {
			f.fieldSelector = "metadata.name=" + name
		}
	}
	return f
}

// cursor is where a running stream stands: whether it has listed, the resource version
// to watch from, the pause before the next retry and the last list error it reported.
type cursor struct {
	clk     clock.Clock
	listed  bool
	rv      string
	backoff time.Duration
	lastErr string
}

// pause waits before a retry, longer each time, and reports whether to go on.
func (c *cursor) pause(ctx context.Context) bool {
	ok := sleep(ctx, c.clk, c.backoff)
	c.backoff = min(2*c.backoff, maxBackoff)
	return ok
}

// retry goes on after a watch that failed: from a fresh list, at once when the version
// to watch from expired, else after a pause. Statuses stay as last seen meanwhile.
func (c *cursor) retry(ctx context.Context, err error) bool {
	if ctx.Err() != nil {
		return false
	}
	c.listed = false
	return expired(err) || c.pause(ctx)
}

// run lists, then watches from the list's resource version, re-watching when a watch
// ends and re-listing when it failed or its version expired, until ctx ends, send fails
// or no object is left to look after. A source that cannot watch is listed again every
// pollInterval instead.
func (s *stream) run(ctx context.Context, clk clock.Clock, send func(update) bool) {
	cur := &cursor{clk: clk, listed: s.startRV != "", rv: s.startRV, backoff: initialBackoff}
	for ctx.Err() == nil && len(s.names) > 0 {
		if !cur.listed && !s.relist(ctx, cur, send) {
			return
		}
		if cur.listed && len(s.names) > 0 && !s.follow(ctx, cur, send) {
			return
		}
	}
}

// relist lists the stream's objects and sends their statuses, to be watched from the
// list's version. A list that fails makes the objects Unknown, saying why (once per
// distinct error), and pauses. It reports whether to go on.
func (s *stream) relist(ctx context.Context, cur *cursor, send func(update) bool) bool {
	objs, rv, err := s.list(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return false
		}
		// The objects' status is unknown until a list succeeds: say why.
		if msg := "cannot list " + s.gvr.Resource + ": " + err.Error(); msg != cur.lastErr {
			cur.lastErr = msg
			if !send(s.all(Unknown, msg)) {
				return false
			}
		}
		return cur.pause(ctx)
	}
	cur.lastErr, cur.listed, cur.rv = "", true, rv
	return send(s.fromList(objs))
}

// follow watches from the cursor's version until the watch ends, then sets the cursor for
// what comes next: a re-watch from the last version seen (after a pause when the watch
// brought no event), or a fresh list. It reports whether to go on.
func (s *stream) follow(ctx context.Context, cur *cursor, send func(update) bool) bool {
	w, err := s.watch(ctx, cur.rv)
	if errors.Is(err, errNoWatch) {
		cur.listed = false
		return sleep(ctx, cur.clk, pollInterval)
	}
	if err != nil {
		return cur.retry(ctx, err)
	}
	next, events, err := s.consume(ctx, w, cur.rv, send)
	switch {
	case ctx.Err() != nil:
		return false
	case err != nil:
		return cur.retry(ctx, err)
	case events == 0:
		// A watch that ends without a single event: don't spin.
		cur.rv = next
		return cur.pause(ctx)
	}
	cur.rv, cur.backoff = next, initialBackoff
	return true
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
	items, rv, err := s.src.list(ctx, s.resource, s.listOptions())
	if err != nil {
		return nil, "", err
	}
	objs := make([]*unstructured.Unstructured, 0, len(items))
	for _, item := range items {
		u, err := s.object(item)
		if err != nil {
			return nil, "", err
		}
		objs = append(objs, u)
	}
	return objs, rv, nil
}

// watch opens a watch from rv, with bookmarks so that a re-watch starts from recent.
func (s *stream) watch(ctx context.Context, rv string) (watch.Interface, error) {
	opts := s.listOptions()
	opts.ResourceVersion = rv
	opts.AllowWatchBookmarks = true
	return s.src.watch(ctx, s.resource, opts)
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
	default: // a typed object (a client's scheme knew the kind): read in full all the same
		m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
		if err != nil {
			return nil, fmt.Errorf("unexpected %T in a watch of %s: %w", obj, s.gvr.Resource, err)
		}
		u = &unstructured.Unstructured{Object: m}
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
