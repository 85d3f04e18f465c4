package reconciler

import (
	"bytes"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/converge-gitops/converge/sync/apply"
)

// targetState is what the reconciler remembers of one SyncTarget between reconciles, in
// memory only: everything here can be lost (a restart) at the cost of some extra work.
// controller-runtime never reconciles one SyncTarget twice at once, so the fields need
// no lock of their own.
type targetState struct {
	// lastWrite is the resourceVersion of our last status write: a cache still behind
	// it must not be acted on.
	lastWrite string
	// rendered is what the last successful sync applied, for self-healing and for
	// applying only what changed; nil when unknown.
	rendered *renderedSet
	// lastFull is when every object was last applied.
	lastFull time.Time
	// request is the reconcile request being served and when it was first seen.
	request requestSeen
	// fetched is the revision the source last pointed at and when it was first seen.
	fetched revisionSeen
	// push is the announced push (the converge.dev/pushedAt value) being served and when
	// it was first seen; pushHandled is the last one served.
	push        requestSeen
	pushHandled string
	// firstLook is when a SyncTarget that has attempted no revision yet was first seen:
	// its first revision is resolved by a poll that started after it.
	firstLook time.Time
	// variables is the digest of the spec.postBuild variables read from ConfigMaps and
	// Secrets that the last attempt used; "" when there are none or nothing is known.
	variables string
}

// requestSeen is a reconcile request (the converge.dev/requestedAt value) and when the
// reconciler first saw it.
type requestSeen struct {
	value string
	at    time.Time
}

// revisionSeen is a revision and when it was first fetched.
type revisionSeen struct {
	revision string
	at       time.Time
}

// states holds the targetState of every SyncTarget the reconciler has seen.
type states struct {
	mu sync.Mutex
	m  map[client.ObjectKey]*targetState
}

// get returns the state of key, new and empty the first time.
func (s *states) get(key client.ObjectKey) *targetState {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil {
		s.m = map[client.ObjectKey]*targetState{}
	}
	ts, ok := s.m[key]
	if !ok {
		ts = &targetState{}
		s.m[key] = ts
	}
	return ts
}

// forget drops the state of a SyncTarget that is gone.
func (s *states) forget(key client.ObjectKey) {
	s.mu.Lock()
	delete(s.m, key)
	s.mu.Unlock()
}

// len is the number of SyncTargets remembered.
func (s *states) len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.m)
}

// renderedSet is what the last successful sync of a SyncTarget applied, kept so that a
// drifted object can be restored without rendering or applying anything else. Objects are
// kept as JSON by inventory ID: a daemon serving a thousand SyncTargets holds every object
// they apply, and JSON takes a fraction of the memory of decoded maps.
type renderedSet struct {
	revision   string
	generation int64
	objects    map[string][]byte
}

// newRenderedSet encodes objects; nil if one cannot be (nothing is kept then).
func newRenderedSet(revision string, generation int64, objects []*unstructured.Unstructured) *renderedSet {
	set := &renderedSet{revision: revision, generation: generation, objects: make(map[string][]byte, len(objects))}
	for _, o := range objects {
		raw, err := o.MarshalJSON()
		if err != nil {
			return nil
		}
		set.objects[apply.ObjectID(o)] = raw
	}
	return set
}

// unchanged reports whether o is what the set holds under its ID.
func (s *renderedSet) unchanged(o *unstructured.Unstructured) bool {
	prev, ok := s.objects[apply.ObjectID(o)]
	if !ok {
		return false
	}
	raw, err := o.MarshalJSON()
	return err == nil && bytes.Equal(prev, raw)
}

// decode returns the objects of the set with the given IDs (all of them when ids is nil),
// skipping IDs it does not hold.
func (s *renderedSet) decode(ids map[string]bool) ([]*unstructured.Unstructured, error) {
	var out []*unstructured.Unstructured
	for id, raw := range s.objects {
		if ids != nil && !ids[id] {
			continue
		}
		o := &unstructured.Unstructured{}
		if err := o.UnmarshalJSON(raw); err != nil {
			return nil, err
		}
		out = append(out, o)
	}
	return out, nil
}
