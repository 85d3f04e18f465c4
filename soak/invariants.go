// Package soak holds the checks of converge's promises that a long run under faults
// holds it to: each takes what was observed of the cluster, the daemon and its outputs,
// and returns the violations it finds, naming the invariant, the object and what broke.
package soak

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"slices"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
)

// Invariant numbers, as the soak's report names them.
const (
	NoHalfApplied     = 1
	ForeignUntouched  = 2
	FailedRolledBack  = 3
	DriftRestored     = 4
	HistoryConsistent = 5
	NoSecretLeaked    = 6
	Converges         = 7
	BoundedResources  = 8
)

var invariantNames = map[int]string{
	NoHalfApplied:     "no half-applied revision",
	ForeignUntouched:  "objects converge does not own are untouched",
	FailedRolledBack:  "a failed revision is rolled back or says why not",
	DriftRestored:     "drift on an owned object is restored within its bound",
	HistoryConsistent: "history is ordered, complete and timed",
	NoSecretLeaked:    "no Secret value in status, events, logs or notifications",
	Converges:         "everything converges once faults stop",
	BoundedResources:  "the daemon's memory and goroutines stay bounded",
}

// Violation is one broken promise.
type Violation struct {
	Invariant int
	// Object names what broke it: namespace/name of a SyncTarget, a log file, an event.
	Object string
	Detail string
}

func (v Violation) String() string {
	return fmt.Sprintf("invariant %d (%s) broken by %s: %s", v.Invariant, invariantNames[v.Invariant], v.Object, v.Detail)
}

// CheckHistory compares two observations of one SyncTarget's history, prev then next
// (newest entry first, as the status keeps it; limit is the SyncTarget's history limit).
// next must be entries added since prev followed by prev's own, cut at limit: an entry of
// prev missing, reordered or rewritten is a lost entry. Every entry of next must be
// finished, timed (a duration, a finish not before its start) and no newer than the one
// before it.
func CheckHistory(object string, prev, next []convergev1.HistoryEntry, limit int) []Violation {
	var out []Violation
	bad := func(format string, args ...any) {
		out = append(out, Violation{Invariant: HistoryConsistent, Object: object, Detail: fmt.Sprintf(format, args...)})
	}
	if len(next) > limit {
		bad("%d entries, more than the limit of %d", len(next), limit)
	}
	for i, e := range next {
		switch {
		case e.FinishedAt == nil || e.Duration == nil:
			bad("entry %d (%s, started %s) has no finish or duration", i, e.Revision, e.StartedAt.UTC())
		case e.FinishedAt.Before(&e.StartedAt):
			bad("entry %d (%s) finished at %s, before it started at %s", i, e.Revision, e.FinishedAt.UTC(), e.StartedAt.UTC())
		}
		if i > 0 && next[i-1].StartedAt.Before(&e.StartedAt) {
			bad("entry %d (%s, started %s) is newer than entry %d before it (started %s)",
				i, e.Revision, e.StartedAt.UTC(), i-1, next[i-1].StartedAt.UTC())
		}
	}
	if !continues(prev, next, limit) {
		bad("the history lost or rewrote entries: it was %s, then %s", summary(prev), summary(next))
	}
	return out
}

// continues says whether next is some new entries followed by prev's, cut where next
// ends; prev's may be cut only when next is full (limit entries).
func continues(prev, next []convergev1.HistoryEntry, limit int) bool {
	for added := 0; added <= len(next); added++ {
		kept := next[added:]
		if len(kept) > len(prev) || !slices.EqualFunc(kept, prev[:len(kept)], sameEntry) {
			continue
		}
		if len(kept) == len(prev) || len(next) == limit {
			return true
		}
	}
	return false
}

func sameEntry(a, b convergev1.HistoryEntry) bool {
	return a.Revision == b.Revision && a.StartedAt.Equal(&b.StartedAt) && a.Result == b.Result &&
		a.Message == b.Message && a.Created == b.Created && a.Configured == b.Configured && a.Deleted == b.Deleted
}

func summary(h []convergev1.HistoryEntry) string {
	var b bytes.Buffer
	b.WriteByte('[')
	for i, e := range h {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s %s@%s", e.Result, e.Revision, e.StartedAt.UTC().Format("15:04:05"))
	}
	b.WriteByte(']')
	return b.String()
}

// minSecret is the shortest Secret value looked for: shorter ones would be found by
// chance in any text (the soak's own Secrets hold random values far longer).
const minSecret = 8

// FindSecrets reports each Secret value found in text, as written or base64-encoded
// (the form a Secret's data takes in YAML and JSON). where names the text: a SyncTarget's
// status, an event, a log file, a notification. The report names the Secret's key, never
// the value.
func FindSecrets(where string, text []byte, secrets map[string][]byte) []Violation {
	var out []Violation
	keys := make([]string, 0, len(secrets))
	for k := range secrets {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		v := secrets[k]
		if len(v) < minSecret {
			continue
		}
		for _, form := range []struct {
			name  string
			value []byte
		}{{"as written", v}, {"base64-encoded", []byte(base64.StdEncoding.EncodeToString(v))}} {
			if at := bytes.Index(text, form.value); at >= 0 {
				out = append(out, Violation{Invariant: NoSecretLeaked, Object: where,
					Detail: fmt.Sprintf("the value of Secret key %s, %s, at byte %d", k, form.name, at)})
			}
		}
	}
	return out
}
