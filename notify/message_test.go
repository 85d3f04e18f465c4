package notify

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
)

var t0 = time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)

func entry(rev string, result convergev1.SyncResult, startSec int) convergev1.HistoryEntry {
	start := metav1.NewTime(t0.Add(time.Duration(startSec) * time.Second))
	end := metav1.NewTime(start.Add(time.Second))
	return convergev1.HistoryEntry{Revision: rev, Result: result, StartedAt: start, FinishedAt: &end, Message: string(result) + " " + rev}
}

func target(history ...convergev1.HistoryEntry) *convergev1.SyncTarget {
	st := &convergev1.SyncTarget{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web"}}
	st.Status.History = history
	return st
}

func events(items []item) []string {
	out := []string{}
	for _, it := range items {
		s := string(it.msg.Event) + " " + it.msg.Revision
		if !it.send {
			s += " (seen)"
		}
		out = append(out, s)
	}
	return out
}

// TestPendingFor: what is new since the cursor, oldest first; nothing from before the
// Notifier existed; unreported events and a suspended Notifier only move the cursor.
func TestPendingFor(t *testing.T) {
	a, b, c := "main@sha1:aaa", "main@sha1:bbb", "main@sha1:ccc"
	hist := []convergev1.HistoryEntry{entry(c, "Succeeded", 30), entry(b, "RolledBack", 20), entry(a, "Succeeded", 10)}
	progressingTarget := target(hist...)
	progressingTarget.Status.LastAttemptedRevision = "main@sha1:ddd"
	progressingTarget.Status.Conditions = []metav1.Condition{{Type: "Reconciling", Status: "True", Reason: "Progressing",
		Message: "waiting for 2 objects of main@sha1:ddd to become ready", LastTransitionTime: metav1.NewTime(t0.Add(40 * time.Second))}}
	fetching := progressingTarget.DeepCopy()
	fetching.Status.Conditions[0].Message = "fetching the source"
	stalled := target(hist...)
	stalled.Status.LastAttemptedRevision = c
	stalled.Status.Conditions = []metav1.Condition{{Type: "Stalled", Status: "True", Reason: "TooManyDeletions",
		Message: "would delete 9 objects", LastTransitionTime: metav1.NewTime(t0.Add(50 * time.Second))}}
	tests := []struct {
		name   string
		n      convergev1.Notifier
		st     *convergev1.SyncTarget
		cursor convergev1.NotificationCursor
		since  time.Time
		want   []string
	}{
		{"new notifier sees only what finished after it was created", notifier("slack", nil), target(hist...), convergev1.NotificationCursor{},
			t0.Add(15 * time.Second), []string{"RolledBack " + b, "Succeeded " + c}},
		{"after the cursor", notifier("slack", nil), target(hist...), convergev1.NotificationCursor{Result: resultKey(hist[1])},
			t0, []string{"Succeeded " + c}},
		{"cursor at the newest", notifier("slack", nil), target(hist...), convergev1.NotificationCursor{Result: resultKey(hist[0])}, t0, []string{}},
		{"cursor's entry left the history", notifier("slack", nil), target(hist[:2]...),
			convergev1.NotificationCursor{Result: stamp(metav1.NewTime(t0.Add(15*time.Second))) + "/main@sha1:old"}, t0,
			[]string{"RolledBack " + b, "Succeeded " + c}},
		{"unreported events are only seen", notifier("slack", []convergev1.NotificationEvent{"RolledBack"}), target(hist...),
			convergev1.NotificationCursor{Result: resultKey(hist[2])}, t0, []string{"RolledBack " + b, "Succeeded " + c + " (seen)"}},
		{"suspended", func() convergev1.Notifier { n := notifier("slack", nil); n.Spec.Suspend = true; return n }(), target(hist...),
			convergev1.NotificationCursor{Result: resultKey(hist[1])}, t0, []string{"Succeeded " + c + " (seen)"}},
		{"a deploy under way is pending for forges", notifier("github", nil), progressingTarget,
			convergev1.NotificationCursor{Result: resultKey(hist[0])}, t0, []string{"Progressing main@sha1:ddd"}},
		{"and not reported to chat by default", notifier("slack", nil), progressingTarget,
			convergev1.NotificationCursor{Result: resultKey(hist[0])}, t0, []string{"Progressing main@sha1:ddd (seen)"}},
		{"pending once", notifier("github", nil), progressingTarget,
			convergev1.NotificationCursor{Result: resultKey(hist[0]), Progressing: "main@sha1:ddd@" + stamp(metav1.NewTime(t0.Add(40*time.Second)))}, t0, []string{}},
		{"a fetch is no deploy", notifier("github", nil), fetching, convergev1.NotificationCursor{Result: resultKey(hist[0])}, t0, []string{}},
		{"stalled", notifier("slack", nil), stalled, convergev1.NotificationCursor{Result: resultKey(hist[0])}, t0, []string{"Stalled " + c}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			got := pendingFor(&tt.n, tt.st, tt.cursor, tt.since, nil)
			g.Expect(events(got)).To(Equal(tt.want))
			for _, it := range got {
				g.Expect(it.msg.Namespace).To(Equal("ns"))
				g.Expect(it.msg.Target).To(Equal("web"))
			}
		})
	}
}

func notifier(typ convergev1.ProviderType, ev []convergev1.NotificationEvent) convergev1.Notifier {
	return convergev1.Notifier{Spec: convergev1.NotifierSpec{Events: ev, Provider: convergev1.NotificationProvider{Type: typ}}}
}

// TestBackoffAndRateLimit: backoff doubles from the base to the cap with ±20% jitter and
// never undercuts Retry-After; the bucket lets a burst through, then spaces requests.
func TestBackoffAndRateLimit(t *testing.T) {
	g := NewWithT(t)
	half := func() float64 { return 0.5 }
	g.Expect(backoff(1, time.Second, time.Minute, 0, half)).To(Equal(time.Second))
	g.Expect(backoff(4, time.Second, time.Minute, 0, half)).To(Equal(8 * time.Second))
	g.Expect(backoff(20, time.Second, time.Minute, 0, half)).To(Equal(time.Minute))
	g.Expect(backoff(1, time.Second, time.Minute, 30*time.Second, half)).To(Equal(30 * time.Second))
	g.Expect(backoff(3, time.Second, time.Minute, 0, func() float64 { return 0 })).To(Equal(3200 * time.Millisecond))

	l := newLimiters(2, 3)
	a := types.NamespacedName{Namespace: "a", Name: "n"}
	for range 3 {
		g.Expect(l.delay(a, "https://hooks.example.com/x", t0)).To(BeZero())
	}
	g.Expect(l.delay(a, "https://hooks.example.com/x", t0)).To(Equal(500 * time.Millisecond))
	g.Expect(l.delay(a, "https://hooks.example.com/x", t0.Add(10*time.Second))).To(BeZero(), "refilled")
	g.Expect(newLimiters(-1, 0).delay(a, "https://hooks.example.com/x", t0)).To(BeZero(), "no limit")
}

// TestSummaryTemplate: spec.summary shapes the text; a broken template is refused.
func TestSummaryTemplate(t *testing.T) {
	g := NewWithT(t)
	tmpl, err := parseSummary(`{{.Event}} {{.Namespace}}/{{.Target}} at {{.Commit}}: {{.Message}}`)
	g.Expect(err).NotTo(HaveOccurred())
	out, err := tmpl.text(context.Background(), rolledBackMsg())
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(out).To(HavePrefix("RolledBack shop/web at " + sha + ": health check failed"))
	_, err = parseSummary(`{{.Event`)
	g.Expect(err).To(MatchError(ContainSubstring("spec.summary")))
	_, err = parseSummary(`{{.NoSuchField}}`)
	g.Expect(err).To(MatchError(ContainSubstring("only the message's own fields")))
}

// TestDriftItem: the newest DriftCorrected Event of the target not yet reported; a series
// that grew is reported again, with its count; other targets' and old Events are not.
func TestDriftItem(t *testing.T) {
	st := target()
	st.UID = "st-uid"
	st.Status.LastAppliedRevision = "main@sha1:aaa"
	ev := func(uid, name string, at time.Time, count int32) corev1.Event {
		e := corev1.Event{ObjectMeta: metav1.ObjectMeta{UID: types.UID(uid)}, Reason: DriftCorrectedReason,
			Message:        "restored 2 objects changed or deleted outside Git",
			InvolvedObject: corev1.ObjectReference{Kind: "SyncTarget", Name: name, UID: "st-uid"},
			EventTime:      metav1.NewMicroTime(at)}
		if count > 1 {
			e.Series = &corev1.EventSeries{Count: count, LastObservedTime: metav1.NewMicroTime(at.Add(time.Minute))}
		}
		return e
	}
	tests := []struct {
		name    string
		evs     []corev1.Event
		cursor  string
		wantKey string
		wantMsg string
	}{
		{"newest", []corev1.Event{ev("a", "web", t0, 1), ev("b", "web", t0.Add(time.Hour), 1)}, "", "b/1", "restored 2 objects"},
		{"already reported", []corev1.Event{ev("b", "web", t0, 1)}, "b/1", "", ""},
		{"series grew", []corev1.Event{ev("b", "web", t0, 3)}, "b/1", "b/3", "(3 times since"},
		{"another target", []corev1.Event{ev("c", "api", t0, 1)}, "", "", ""},
		{"before the notifier", []corev1.Event{ev("d", "web", t0.Add(-time.Hour), 1)}, "", "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			key, m, ok := driftItem(st, tt.evs, convergev1.NotificationCursor{Drift: tt.cursor}, t0)
			g.Expect(ok).To(Equal(tt.wantKey != ""))
			g.Expect(key).To(Equal(tt.wantKey))
			if ok {
				g.Expect(m.Message).To(ContainSubstring(tt.wantMsg))
				g.Expect(m.Event).To(Equal(convergev1.EventDriftCorrected))
				g.Expect(m.Revision).To(Equal("main@sha1:aaa"))
			}
		})
	}
}
