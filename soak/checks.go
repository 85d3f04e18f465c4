package soak

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"time"

	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
)

// Kind is what a commit of the soak's driver is meant to do to its SyncTarget.
type Kind string

const (
	// Good renders, applies and becomes healthy.
	Good Kind = "good"
	// FailsHealth applies and never becomes healthy: it must be rolled back.
	FailsHealth Kind = "fails-health"
	// FailsRender does not render: nothing of it may be applied.
	FailsRender Kind = "fails-render"
	// PrunesTooMuch would delete more than spec.maxDeletions allows: it must stall,
	// nothing applied and nothing pruned.
	PrunesTooMuch Kind = "prunes-too-much"
	// Hostile is a chart from the hardening suites (a recursion through tpl): its render
	// must fail its own SyncTarget only.
	Hostile Kind = "hostile"
)

// Commit is one revision the driver pushed: what it is meant to do and what a SyncTarget
// that applied it must hold (object key → content, see CheckLive).
type Commit struct {
	Revision string
	Kind     Kind
	Want     map[string]string
	At       time.Time
}

// Quiet says whether a SyncTarget is between syncs: its spec observed, no sync running.
// Only then are its status and its live objects compared.
func Quiet(st *convergev1.SyncTarget) bool {
	if st.Status.ObservedGeneration != st.Generation {
		return false
	}
	r := apimeta.FindStatusCondition(st.Status.Conditions, convergev1.ReconcilingCondition)
	return r == nil || r.Status != metav1.ConditionTrue
}

// CheckLive is invariant 1: the live objects a SyncTarget owns (key → content, as the
// driver digests them) equal the render of the revision its status says is applied.
func CheckLive(target, revision string, want, live map[string]string) []Violation {
	var diffs []string
	for _, k := range slices.Sorted(maps.Keys(want)) {
		got, ok := live[k]
		switch {
		case !ok:
			diffs = append(diffs, k+" is missing")
		case got != want[k]:
			diffs = append(diffs, fmt.Sprintf("%s is %q, the revision has %q", k, got, want[k]))
		}
	}
	for _, k := range slices.Sorted(maps.Keys(live)) {
		if _, ok := want[k]; !ok {
			diffs = append(diffs, k+" is not in the revision")
		}
	}
	if len(diffs) == 0 {
		return nil
	}
	return []Violation{{Invariant: NoHalfApplied, Object: target,
		Detail: fmt.Sprintf("live objects differ from %s, the applied revision: %s", revision, strings.Join(diffs, "; "))}}
}

// Version is what says an object was changed: its UID and resourceVersion.
type Version struct{ UID, ResourceVersion string }

// CheckForeign is invariant 2: each object converge does not own (key → version when the
// driver made it) is still there, unchanged.
func CheckForeign(before, now map[string]Version) []Violation {
	var out []Violation
	for _, k := range slices.Sorted(maps.Keys(before)) {
		v, ok := now[k]
		switch {
		case !ok:
			out = append(out, Violation{Invariant: ForeignUntouched, Object: k, Detail: "deleted"})
		case v.UID != before[k].UID:
			out = append(out, Violation{Invariant: ForeignUntouched, Object: k, Detail: "deleted and created again"})
		case v.ResourceVersion != before[k].ResourceVersion:
			out = append(out, Violation{Invariant: ForeignUntouched, Object: k,
				Detail: fmt.Sprintf("changed (resourceVersion %s → %s)", before[k].ResourceVersion, v.ResourceVersion)})
		}
	}
	return out
}

// CheckOutcome is invariant 3 at a quiet point: the status of target names commits the
// driver pushed (by revision). The applied revision must be a good one: a failed revision
// is rolled back (the last healthy revision applied again) or refused (the applied one
// kept), never left applied unless Ready says the rollback is under way or failed for now
// (it is tried again; invariant 7 sees that it ends); and when the revision last attempted
// is one meant to fail, the SyncTarget says why (Ready False with a reason).
func CheckOutcome(target string, st *convergev1.SyncTarget, commits map[string]Commit) []Violation {
	var out []Violation
	bad := func(format string, args ...any) {
		out = append(out, Violation{Invariant: FailedRolledBack, Object: target, Detail: fmt.Sprintf(format, args...)})
	}
	ready := apimeta.FindStatusCondition(st.Status.Conditions, convergev1.ReadyCondition)
	if c, ok := commits[st.Status.LastAppliedRevision]; ok && c.Kind != Good && !rollingBack(ready) {
		bad("%s, a revision meant to %s, is the applied revision", c.Revision, c.Kind)
	}
	c, ok := commits[st.Status.LastAttemptedRevision]
	if !ok || c.Kind == Good {
		return out
	}
	if ready == nil || ready.Status != metav1.ConditionFalse || ready.Reason == "" {
		bad("%s (%s) was the last attempted, and Ready does not say it failed: %v", c.Revision, c.Kind, ready)
	}
	return out
}

// rollingBack reports whether Ready says a failed revision is being rolled back, or that
// its rollback failed for now ("…; rolling back to <healthy>", "…; rolling back to
// <healthy> failed too: …", or, when a later revision fails while the failed one is still
// applied, "…; applying <healthy> again in place of <failed>, which never became healthy,
// failed too: …"). A rollback that failed is tried again; invariant 7 sees that it ends.
func rollingBack(ready *metav1.Condition) bool {
	if ready == nil || ready.Status != metav1.ConditionFalse {
		return false
	}
	return strings.Contains(ready.Message, "; rolling back to ") ||
		(strings.Contains(ready.Message, " again in place of ") && strings.Contains(ready.Message, ", which never became healthy, failed too: "))
}

// Ledger keeps every history entry observed of each SyncTarget, across observations and
// failovers, so that a revision attempted twice is seen even when the status keeps only
// the last ten.
type Ledger struct {
	entries map[string]map[string]convergev1.HistoryEntry // target → revision@start → entry
}

// Add records the entries of one observation of target's history.
func (l *Ledger) Add(target string, history []convergev1.HistoryEntry) {
	if l.entries == nil {
		l.entries = map[string]map[string]convergev1.HistoryEntry{}
	}
	m := l.entries[target]
	if m == nil {
		m = map[string]convergev1.HistoryEntry{}
		l.entries[target] = m
	}
	for _, e := range history {
		m[e.Revision+"@"+e.StartedAt.UTC().Format(time.RFC3339Nano)] = e
	}
}

// Entries lists what was recorded of target's revision, oldest first.
func (l *Ledger) Entries(target, revision string) []convergev1.HistoryEntry {
	var out []convergev1.HistoryEntry
	for _, e := range l.entries[target] {
		if e.Revision == revision {
			out = append(out, e)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].StartedAt.Before(&out[j].StartedAt) })
	return out
}

// CheckRefused is the rest of invariant 3: a revision meant to fail never succeeds, and
// once it has failed for its own reason (rolled back for one that fails health, failed for
// the others) it is not attempted again: later attempts of it are violations.
func (l *Ledger) CheckRefused(target string, c Commit) []Violation {
	if c.Kind == Good {
		return nil
	}
	var out []Violation
	failedAt := -1
	for i, e := range l.Entries(target, c.Revision) {
		if e.Result == convergev1.SyncSucceeded {
			out = append(out, Violation{Invariant: FailedRolledBack, Object: target,
				Detail: fmt.Sprintf("%s, meant to %s, succeeded at %s", c.Revision, c.Kind, e.StartedAt.UTC().Format(time.RFC3339))})
			continue
		}
		if failedAt >= 0 {
			out = append(out, Violation{Invariant: FailedRolledBack, Object: target,
				Detail: fmt.Sprintf("%s, refused (attempt %d), was attempted again at %s (%s: %s)",
					c.Revision, failedAt+1, e.StartedAt.UTC().Format(time.RFC3339), e.Result, e.Message)})
			continue
		}
		if ownFailure(c.Kind, e) {
			failedAt = i
		}
	}
	return out
}

// ownFailure says whether e is the failure c's kind is meant to have, not a passing one
// (the API server away, a daemon killed) that may be tried again.
func ownFailure(k Kind, e convergev1.HistoryEntry) bool {
	switch k {
	case FailsHealth:
		return e.Result == convergev1.SyncRolledBack
	case PrunesTooMuch:
		return e.Result == convergev1.SyncFailed && strings.Contains(e.Message, "maxDeletions")
	case FailsRender, Hostile:
		return e.Result == convergev1.SyncFailed && strings.Contains(strings.ToLower(e.Message), "render")
	}
	return false
}

// Drift is one hand edit of an owned object and when converge undid it (zero: not yet).
type Drift struct {
	Target, Object string
	At, Restored   time.Time
}

// CheckDrift is invariant 4: a drift is restored within bound of its edit, not counting
// time the daemon could not reach the API server (away). now is when it was checked.
func CheckDrift(d Drift, bound, away time.Duration, now time.Time) []Violation {
	end := d.Restored
	if end.IsZero() {
		end = now
	}
	if took := end.Sub(d.At) - away; took > bound {
		state := "not restored after"
		if !d.Restored.IsZero() {
			state = "restored after"
		}
		return []Violation{{Invariant: DriftRestored, Object: d.Target + " " + d.Object,
			Detail: fmt.Sprintf("edited at %s, %s %s (the bound is %s, %s of faults not counted)",
				d.At.UTC().Format("15:04:05.000"), state, took.Round(time.Millisecond), bound, away.Round(time.Second))}}
	}
	return nil
}

// CheckConverged is invariant 7: once faults stopped, target is Ready on newest, the
// newest good revision pushed, with what it renders live (compare with CheckLive).
func CheckConverged(target, newest string, st *convergev1.SyncTarget) []Violation {
	ready := apimeta.FindStatusCondition(st.Status.Conditions, convergev1.ReadyCondition)
	if st.Status.LastAppliedRevision == newest && ready != nil && ready.Status == metav1.ConditionTrue {
		return nil
	}
	why := "no Ready condition"
	if ready != nil {
		why = fmt.Sprintf("Ready %s %s: %s", ready.Status, ready.Reason, ready.Message)
	}
	return []Violation{{Invariant: Converges, Object: target,
		Detail: fmt.Sprintf("not converged on %s: applied %q, %s", newest, st.Status.LastAppliedRevision, why)}}
}

// Sample is one reading of a daemon process.
type Sample struct {
	At         time.Time
	RSS        int64 // bytes
	Goroutines int
}

// Growth bounds invariant 8: past the first quarter of a run (the warm-up: caches filled,
// watches started), the daemon may grow by at most these over what it held then.
const (
	maxRSSGrowth       = 1.25     // × the peak of the second quarter
	rssSlack           = 64 << 20 // plus this much
	maxGoroutineGrowth = 1.25     // × the peak of the second quarter
	goroutineSlack     = 100      // plus this many
)

// CheckBounded is invariant 8: the peak of the last quarter of samples of one daemon is
// within the growth bounds of the second quarter's peak. Fewer than 8 samples say nothing.
func CheckBounded(process string, samples []Sample) []Violation {
	if len(samples) < 8 {
		return nil
	}
	q := len(samples) / 4
	peak := func(s []Sample) (rss int64, g int) {
		for _, x := range s {
			rss, g = max(rss, x.RSS), max(g, x.Goroutines)
		}
		return rss, g
	}
	rss0, g0 := peak(samples[q : 2*q])
	rss1, g1 := peak(samples[len(samples)-q:])
	var out []Violation
	if float64(rss1) > maxRSSGrowth*float64(rss0)+rssSlack {
		out = append(out, Violation{Invariant: BoundedResources, Object: process,
			Detail: fmt.Sprintf("resident memory grew from %d MiB to %d MiB", rss0>>20, rss1>>20)})
	}
	if float64(g1) > maxGoroutineGrowth*float64(g0)+goroutineSlack {
		out = append(out, Violation{Invariant: BoundedResources, Object: process,
			Detail: fmt.Sprintf("goroutines grew from %d to %d", g0, g1)})
	}
	return out
}
