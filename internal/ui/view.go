package ui

import (
	"fmt"
	"regexp"
	"time"

	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/duration"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
	"github.com/converge-gitops/converge/sources"
)

// The states a SyncTarget is counted and filtered by, in the order shown.
const (
	stateReady       = "Ready"
	stateProgressing = "Progressing"
	stateFailed      = "Failed"
	stateStalled     = "Stalled"
	stateSuspended   = "Suspended"
	stateUnknown     = "Unknown"
)

var allStates = []string{stateReady, stateProgressing, stateFailed, stateStalled, stateSuspended, stateUnknown}

// stateOf is the one state a SyncTarget is shown in.
func stateOf(st *convergev1.SyncTarget) string {
	if st.Spec.Suspend {
		return stateSuspended
	}
	return stateOfConditions(st.Status.Conditions)
}

// stateOfConditions is the state that Stalled, Reconciling and Ready say, in that order
// (a SyncTarget's or a SyncTargetSet's).
func stateOfConditions(conds []metav1.Condition) string {
	switch {
	case apimeta.IsStatusConditionTrue(conds, convergev1.StalledCondition):
		return stateStalled
	case apimeta.IsStatusConditionTrue(conds, convergev1.ReconcilingCondition):
		return stateProgressing
	case apimeta.IsStatusConditionTrue(conds, convergev1.ReadyCondition):
		return stateReady
	case apimeta.IsStatusConditionFalse(conds, convergev1.ReadyCondition):
		return stateFailed
	}
	return stateUnknown
}

// revisionView is a revision shown as a short SHA, linked to its commit on a known forge.
type revisionView struct {
	Full  string
	Short string
	URL   string
}

func revisionOf(st *convergev1.SyncTarget, rev string) revisionView {
	if rev == "" {
		return revisionView{}
	}
	r, err := sources.ParseRevision(rev)
	if err != nil {
		return revisionView{Full: rev, Short: rev}
	}
	if st.IsChart() || st.IsOCI() {
		// "<version or tag>@sha256:<hex>": the chart version (or the artifact's tag) and its
		// digest, shortened.
		return revisionView{Full: rev, Short: r.Ref + " · sha256:" + r.Commit[:min(len(r.Commit), 7)]}
	}
	short := r.Commit
	if len(short) > 7 {
		short = short[:7]
	}
	return revisionView{Full: rev, Short: short, URL: commitURL(st.Spec.Source.URL, r.Commit)}
}

// timeView is a moment shown as an age, with the time itself for a tooltip.
type timeView struct {
	ISO string
	Age string
}

func timeOf(t, now time.Time) timeView {
	if t.IsZero() {
		return timeView{}
	}
	return timeView{ISO: t.UTC().Format(time.RFC3339), Age: duration.HumanDuration(now.Sub(t)) + " ago"}
}

// lastSync is when the last sync ended: the newest history entry, else the Ready
// condition's last transition.
func lastSync(st *convergev1.SyncTarget) time.Time {
	if len(st.Status.History) > 0 {
		e := st.Status.History[0]
		if e.FinishedAt != nil {
			return e.FinishedAt.Time
		}
		return e.StartedAt.Time
	}
	if c := apimeta.FindStatusCondition(st.Status.Conditions, convergev1.ReadyCondition); c != nil {
		return c.LastTransitionTime.Time
	}
	return time.Time{}
}

// condStatus is a condition's status, or "-" when it is not there.
func condStatus(st *convergev1.SyncTarget, typ string) string {
	if c := apimeta.FindStatusCondition(st.Status.Conditions, typ); c != nil {
		return string(c.Status)
	}
	return "-"
}

// message is the Ready condition's message.
func message(st *convergev1.SyncTarget) string {
	if c := apimeta.FindStatusCondition(st.Status.Conditions, convergev1.ReadyCondition); c != nil {
		return c.Message
	}
	return ""
}

var longSHA = regexp.MustCompile(`\b(sha1:[0-9a-f]{7})[0-9a-f]{33}\b|\b(sha256:[0-9a-f]{7})[0-9a-f]{57}\b`)

// tableMessage is a message fit for a table cell, as converge get shows it: revisions
// abbreviated to 7 hex digits, at most n runes.
func tableMessage(msg string, n int) string {
	return shorten(longSHA.ReplaceAllString(msg, "$1$2"), n)
}

// shorten cuts s to n runes.
func shorten(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}

func eventTime(e corev1.Event) time.Time {
	switch {
	case !e.LastTimestamp.IsZero():
		return e.LastTimestamp.Time
	case !e.EventTime.IsZero():
		return e.EventTime.Time
	}
	return e.CreationTimestamp.Time
}

// durationText is how long a sync took: 850ms, 4.2s, 2m30s.
func durationText(e convergev1.HistoryEntry) string {
	var d time.Duration
	switch {
	case e.Duration != nil:
		d = e.Duration.Duration
	case e.FinishedAt != nil:
		d = e.FinishedAt.Sub(e.StartedAt.Time)
	default:
		return "-"
	}
	switch {
	case d < time.Second:
		return fmt.Sprintf("%dms", d.Milliseconds())
	case d < 10*time.Second:
		return fmt.Sprintf("%.1fs", d.Seconds())
	}
	return duration.HumanDuration(d)
}

// chartView is the chart a SyncTarget follows in a chart repository: never its values,
// which may hold secrets, nor the credentials of its repository URL.
type chartView struct {
	Repository, Name, Version, Digest string
}

// chartOf is the chart of spec.chart, or nil for a Git source.
func chartOf(st *convergev1.SyncTarget) *chartView {
	c := st.Spec.Chart
	if c == nil {
		return nil
	}
	v := &chartView{Repository: sources.RedactURL(c.Repository), Name: c.Name, Version: c.Version, Digest: c.Digest}
	if v.Version == "" && v.Digest == "" {
		v.Version = "* (newest)"
	}
	return v
}

// sourceSummary is one line saying what a SyncTarget deploys, for the overview: the chart
// of a chart repository, a Helm chart in Git, or nothing for plain manifests.
func sourceSummary(st *convergev1.SyncTarget) string {
	if c := chartOf(st); c != nil {
		version := c.Version
		if c.Digest != "" {
			version = c.Digest
		}
		return "chart " + c.Name + " " + version + " · " + c.Repository
	}
	if o := st.Spec.OCI; o != nil {
		return "artifact " + sources.RedactURL(o.URL)
	}
	if st.Spec.Helm != nil {
		return helmInGit(st)
	}
	return ""
}

// helmInGit says where the Helm chart of a Git source is.
func helmInGit(st *convergev1.SyncTarget) string {
	path := st.Spec.Path
	if path == "" {
		path = "the repository root"
	}
	return "Helm chart at " + path
}
