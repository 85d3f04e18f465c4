package soak

import (
	"encoding/base64"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
)

var t0 = time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)

// entry is a finished history entry of revision rev started at minute m.
func entry(rev string, m int, result convergev1.SyncResult) convergev1.HistoryEntry {
	start := metav1.NewTime(t0.Add(time.Duration(m) * time.Minute))
	end := metav1.NewTime(start.Add(20 * time.Second))
	return convergev1.HistoryEntry{Revision: rev, StartedAt: start, FinishedAt: &end,
		Duration: &metav1.Duration{Duration: 20 * time.Second}, Result: result}
}

func hist(es ...convergev1.HistoryEntry) []convergev1.HistoryEntry { return es }

func TestCheckHistoryAcceptsWhatTheStatusMayBecome(t *testing.T) {
	a, b, c, d := entry("a", 1, "Succeeded"), entry("b", 2, "Failed"), entry("c", 3, "RolledBack"), entry("d", 4, "Succeeded")
	cases := map[string]struct {
		prev, next []convergev1.HistoryEntry
		limit      int
	}{
		"unchanged":                           {hist(b, a), hist(b, a), 3},
		"first entry":                         {nil, hist(a), 3},
		"two added":                           {hist(a), hist(c, b, a), 3},
		"oldest cut at the limit":             {hist(c, b, a), hist(d, c, b), 3},
		"all replaced while unobserved, full": {hist(a), hist(d, c), 2},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			NewWithT(t).Expect(CheckHistory("ns/st", tc.prev, tc.next, tc.limit)).To(BeEmpty())
		})
	}
}

// TestCheckHistoryFindsEachBreak: each way a history can break is a violation of
// invariant 5 that says what broke.
func TestCheckHistoryFindsEachBreak(t *testing.T) {
	a, b, c := entry("a", 1, "Succeeded"), entry("b", 2, "Failed"), entry("c", 3, "Succeeded")
	unfinished := entry("c", 3, "Succeeded")
	unfinished.FinishedAt, unfinished.Duration = nil, nil
	backwards := entry("c", 3, "Succeeded")
	early := metav1.NewTime(t0)
	backwards.FinishedAt = &early
	rewritten := b
	rewritten.Result = "Succeeded"
	cases := map[string]struct {
		prev, next []convergev1.HistoryEntry
		limit      int
		want       string
	}{
		"an entry lost":            {hist(b, a), hist(c, a), 3, "lost or rewrote"},
		"the newest lost":          {hist(b, a), hist(a), 3, "lost or rewrote"},
		"cut before the limit":     {hist(b, a), hist(c, b), 5, "lost or rewrote"},
		"an entry rewritten":       {hist(b, a), hist(rewritten, a), 3, "lost or rewrote"},
		"out of order":             {hist(a), hist(a, b), 3, "newer than entry 0"},
		"no duration":              {hist(b, a), hist(unfinished, b, a), 3, "no finish or duration"},
		"finished before it began": {hist(b, a), hist(backwards, b, a), 3, "before it started"},
		"over the limit":           {hist(b, a), hist(c, b, a), 2, "more than the limit of 2"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			v := CheckHistory("ns/st", tc.prev, tc.next, tc.limit)
			g.Expect(v).NotTo(BeEmpty())
			g.Expect(v[0].Invariant).To(Equal(HistoryConsistent))
			g.Expect(v[0].String()).To(And(ContainSubstring("ns/st"), ContainSubstring(tc.want),
				ContainSubstring("history is ordered")))
		})
	}
}

// TestFindSecrets: a value is found as written and base64-encoded, the report names the
// key and never the value, and text without it (or short values) finds nothing.
func TestFindSecrets(t *testing.T) {
	g := NewWithT(t)
	secrets := map[string][]byte{"db/password": []byte("Hunter2-s3cr3t-value"), "db/user": []byte("app")}
	g.Expect(FindSecrets("status of ns/st", []byte(`{"message":"failed: connection refused"}`), secrets)).To(BeEmpty())
	g.Expect(FindSecrets("log", []byte("user app logged in"), secrets)).To(BeEmpty(), "values under 8 bytes are not looked for")

	v := FindSecrets("events of ns/st", []byte(`Warning BuildFailed: bad value "Hunter2-s3cr3t-value"`), secrets)
	g.Expect(v).To(HaveLen(1))
	g.Expect(v[0].Invariant).To(Equal(NoSecretLeaked))
	g.Expect(v[0].String()).To(And(ContainSubstring("db/password"), ContainSubstring("as written"), ContainSubstring("events of ns/st")))
	g.Expect(v[0].String()).NotTo(ContainSubstring("Hunter2"))

	encoded := base64.StdEncoding.EncodeToString([]byte("Hunter2-s3cr3t-value"))
	v = FindSecrets("diff", []byte(strings.Join([]string{"data:", "  password: " + encoded}, "\n")), secrets)
	g.Expect(v).To(HaveLen(1))
	g.Expect(v[0].Detail).To(ContainSubstring("base64-encoded"))
}
