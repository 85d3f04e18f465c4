package notify

import (
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
)

// Message is what a notification says; spec.summary templates are executed over it.
type Message struct {
	// Event is what happened: Succeeded, Failed, RolledBack, Stalled, DriftCorrected or
	// Progressing.
	Event convergev1.NotificationEvent `json:"event"`
	// Namespace and Target name the SyncTarget.
	Namespace string `json:"namespace"`
	Target    string `json:"target"`
	// Revision is the revision concerned, as <ref>@sha1:<hex> (may be empty for a stall
	// before any revision was fetched).
	Revision string `json:"revision,omitempty"`
	// Commit is the commit SHA of the revision.
	Commit string `json:"commit,omitempty"`
	// Message is what converge said: the history entry's or condition's message.
	Message string `json:"message"`
	// Created, Configured and Deleted count the objects of a sync that ended.
	Created    int32 `json:"created"`
	Configured int32 `json:"configured"`
	Deleted    int32 `json:"deleted"`
}

// field is the cursor field an item advances.
type field int

const (
	fieldResult field = iota
	fieldProgressing
	fieldStalled
	fieldDrift
)

// item is one notification to deliver (send) or only to mark as seen (an event the
// Notifier does not report, or one that happened while it was suspended).
type item struct {
	target string
	field  field
	key    string
	msg    Message
	send   bool
	// source is the SyncTarget's spec.source.url: forges are derived from it.
	source string
}

// pendingFor lists what happened to st since cur, oldest first: history entries newer
// than the cursor, then the start of a deploy, a stall, and the newest drift correction
// among the DriftCorrected Events drift. Nothing older than since (when the Notifier
// was created) is reported.
func pendingFor(n *convergev1.Notifier, st *convergev1.SyncTarget, cur convergev1.NotificationCursor, since time.Time,
	drift []corev1.Event) []item {
	var out []item
	add := func(f field, key string, m Message) {
		m.Namespace, m.Target, m.Commit = st.Namespace, st.Name, commitOf(m.Revision)
		out = append(out, item{target: st.Name, field: f, key: key, msg: m, source: st.Spec.Source.URL,
			send: !n.Spec.Suspend && n.Reports(m.Event)})
	}
	for _, e := range newResults(st.Status.History, cur.Result, since) {
		add(fieldResult, resultKey(e), Message{Event: convergev1.NotificationEvent(e.Result), Revision: e.Revision,
			Message: e.Message, Created: e.Created, Configured: e.Configured, Deleted: e.Deleted})
	}
	if key, rev, msg, ok := progressing(st, since); ok && key != cur.Progressing {
		add(fieldProgressing, key, Message{Event: convergev1.EventProgressing, Revision: rev, Message: msg})
	}
	if c := apimeta.FindStatusCondition(st.Status.Conditions, convergev1.StalledCondition); c != nil &&
		c.Status == metav1.ConditionTrue && !c.LastTransitionTime.Time.Before(since) {
		if key := c.Reason + "@" + stamp(c.LastTransitionTime); key != cur.Stalled {
			rev := st.Status.LastAttemptedRevision
			if rev == "" {
				rev = st.Status.LastFetchedRevision
			}
			add(fieldStalled, key, Message{Event: convergev1.EventStalled, Revision: rev, Message: c.Message})
		}
	}
	if key, m, ok := driftItem(st, drift, cur, since); ok {
		add(fieldDrift, key, m)
	}
	return out
}

// newResults returns the history entries newer than the one whose key is cursor, oldest
// first. Without a cursor, or when the cursor's entry left the history, the entries that
// started after the cursor's time (and finished after since) are new.
func newResults(history []convergev1.HistoryEntry, cursor string, since time.Time) []convergev1.HistoryEntry {
	after := since.Add(-time.Nanosecond)
	if t, ok := keyTime(cursor); ok && t.After(after) {
		after = t
	}
	var out []convergev1.HistoryEntry
	for _, e := range history {
		if cursor != "" && resultKey(e) == cursor {
			break
		}
		finished := e.StartedAt.Time
		if e.FinishedAt != nil {
			finished = e.FinishedAt.Time
		}
		if finished.Before(since) || (cursor != "" && !e.StartedAt.After(after)) {
			break
		}
		out = append(out, e)
	}
	for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
		out[i], out[j] = out[j], out[i]
	}
	return out
}

// progressing reports a deploy under way: Reconciling with reason Progressing and a
// message about the revision last attempted ("applying <rev>", "waiting for ... of
// <rev>"), not the rollback's redeploy of the healthy revision nor a fetch.
func progressing(st *convergev1.SyncTarget, since time.Time) (key, rev, msg string, ok bool) {
	c := apimeta.FindStatusCondition(st.Status.Conditions, convergev1.ReconcilingCondition)
	rev = st.Status.LastAttemptedRevision
	if c == nil || c.Status != metav1.ConditionTrue || c.Reason != convergev1.ProgressingReason || rev == "" ||
		!strings.Contains(c.Message, rev) || c.LastTransitionTime.Time.Before(since) {
		return "", "", "", false
	}
	return rev + "@" + stamp(c.LastTransitionTime), rev, c.Message, true
}

// resultKey identifies a history entry: when it started, and its revision.
func resultKey(e convergev1.HistoryEntry) string {
	return stamp(e.StartedAt) + "/" + e.Revision
}

func stamp(t metav1.Time) string { return t.UTC().Format(time.RFC3339) }

// keyTime is the time a result key starts with.
func keyTime(key string) (time.Time, bool) {
	ts, _, ok := strings.Cut(key, "/")
	if !ok {
		return time.Time{}, false
	}
	t, err := time.Parse(time.RFC3339, ts)
	return t, err == nil
}

// commitOf is the commit SHA of a revision "<ref>@sha1:<hex>" (or sha256).
func commitOf(revision string) string {
	i := strings.LastIndex(revision, "@")
	if i < 0 {
		return ""
	}
	_, hex, ok := strings.Cut(revision[i+1:], ":")
	if !ok {
		return ""
	}
	return hex
}

// advance records in cur that it was delivered (or seen).
func (it item) advance(cur *convergev1.NotificationCursor) {
	switch it.field {
	case fieldResult:
		cur.Result = it.key
	case fieldProgressing:
		cur.Progressing = it.key
	case fieldStalled:
		cur.Stalled = it.key
	case fieldDrift:
		cur.Drift = it.key
	}
}
