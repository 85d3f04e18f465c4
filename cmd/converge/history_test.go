package main

import (
	"bytes"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
)

// historyFixture is the history of a SyncTarget that synced, failed, was rolled back and
// was pinned, newest first, as the daemon writes it.
func historyFixture() []convergev1.HistoryEntry {
	good, bad, next := "main@sha1:"+shaGood, "main@sha1:"+shaBad, "main@sha1:"+shaNew
	return []convergev1.HistoryEntry{
		{Revision: "sha1:" + shaGood, StartedAt: ago(30 * time.Second), FinishedAt: agoPtr(29*time.Second + 150*time.Millisecond),
			Result: convergev1.SyncSucceeded, Configured: 1, Message: "applied revision sha1:" + shaGood + ": 1 configured, 2 unchanged"},
		{Revision: next, StartedAt: ago(4 * time.Minute), FinishedAt: agoPtr(4*time.Minute - 4200*time.Millisecond),
			Result: convergev1.SyncFailed, Message: "revision " + next + " failed: building deploy/: \n  kustomization.yaml: no such file"},
		{Revision: bad, StartedAt: ago(2 * time.Hour), FinishedAt: agoPtr(2*time.Hour - 47*time.Second),
			Result: convergev1.SyncRolledBack, Configured: 1, Deleted: 1,
			Message: "revision " + bad + " failed: health check: Deployment shop/web: Progressing=False; rolled back to " + good + " (1 configured, 1 pruned)"},
		{Revision: good, StartedAt: ago(50 * time.Hour), FinishedAt: agoPtr(50*time.Hour - 150*time.Second),
			Result: convergev1.SyncSucceeded, Created: 12, Message: "applied revision " + good + ": 12 created"},
		{Revision: good, StartedAt: ago(51 * time.Hour), Result: convergev1.SyncFailed},
	}
}

func TestHistoryTable(t *testing.T) {
	var out bytes.Buffer
	if err := printHistory(&out, historyFixture(), stNow); err != nil {
		t.Fatal(err)
	}
	stGolden(t, "history/table.golden", out.String())
}

func TestHistorySyncDuration(t *testing.T) {
	for d, want := range map[time.Duration]string{
		850 * time.Millisecond:  "850ms",
		4200 * time.Millisecond: "4.2s",
		47 * time.Second:        "47s",
		150 * time.Second:       "2m30s",
		3 * time.Hour:           "3h",
		-time.Second:            "-",
	} {
		if got := syncDuration(d); got != want {
			t.Errorf("syncDuration(%s) = %q, want %q", d, got, want)
		}
	}
}

// A sub-second sync shows its milliseconds when the daemon recorded its duration, and
// "<1s", not "0ms", when only its second-precision times are known.
func TestHistoryEntryDuration(t *testing.T) {
	started := ago(time.Minute)
	for name, tc := range map[string]struct {
		e    convergev1.HistoryEntry
		want string
	}{
		"recorded duration":        {convergev1.HistoryEntry{StartedAt: started, FinishedAt: &started, Duration: &metav1.Duration{Duration: 412 * time.Millisecond}}, "412ms"},
		"same second, no duration": {convergev1.HistoryEntry{StartedAt: started, FinishedAt: &started}, "<1s"},
		"seconds apart":            {convergev1.HistoryEntry{StartedAt: started, FinishedAt: agoPtr(58 * time.Second)}, "2.0s"},
		"not finished":             {convergev1.HistoryEntry{StartedAt: started}, "-"},
	} {
		if got := entryDuration(tc.e); got != tc.want {
			t.Errorf("%s: entryDuration = %q, want %q", name, got, tc.want)
		}
	}
}

// The history of an OCI artifact's SyncTarget says what each artifact was made from; an
// entry whose artifact names nothing shows "-".
func TestHistoryTableOfArtifacts(t *testing.T) {
	digest := "sha256:" + shaGood + shaGood[:24]
	history := []convergev1.HistoryEntry{
		{Revision: "latest@" + digest, StartedAt: ago(30 * time.Second), Result: convergev1.SyncSucceeded,
			Origin: &convergev1.ArtifactOrigin{Source: "https://github.com/org/shop.git", Revision: "main@sha1:" + shaNew}},
		{Revision: "latest@" + digest, StartedAt: ago(time.Hour), Result: convergev1.SyncSucceeded},
	}
	var out bytes.Buffer
	if err := printHistory(&out, history, stNow); err != nil {
		t.Fatal(err)
	}
	got := out.String()
	for _, want := range []string{"REVISION                FROM  ", "main@sha1:" + shaNew[:7] + "   Succeeded", "latest@sha256:" + shaGood[:7]} {
		if !bytes.Contains([]byte(got), []byte(want)) {
			t.Errorf("history table lacks %q:\n%s", want, got)
		}
	}
	if lines := bytes.Split(bytes.TrimSpace(out.Bytes()), []byte("\n")); len(lines) != 3 || !bytes.Contains(lines[2], []byte("  -  ")) {
		t.Errorf("the entry without origin shows no \"-\":\n%s", got)
	}
}
