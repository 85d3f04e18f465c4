package reconciler

import (
	"testing"
	"time"
	_ "time/tzdata"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
)

func TestSyncAllowed(t *testing.T) {
	at := func(s string) time.Time {
		tm, err := time.Parse(time.RFC3339, s)
		if err != nil {
			t.Fatal(err)
		}
		return tm
	}
	w := func(kind convergev1.SyncWindowKind, schedule string, d time.Duration, tz string) convergev1.SyncWindow {
		return convergev1.SyncWindow{Kind: kind, Schedule: convergev1.CronSchedule(schedule), Duration: metav1.Duration{Duration: d}, TimeZone: tz}
	}
	nightlyDeny := w(convergev1.DenyWindow, "0 22 * * *", 8*time.Hour, "")
	tests := []struct {
		name     string
		now      string
		windows  []convergev1.SyncWindow
		want     bool
		wantNext string
		wantErr  string
	}{
		{name: "no windows", now: "2026-12-02T12:00:00Z", want: true},
		{name: "before a deny window", now: "2026-12-02T21:59:59Z", windows: []convergev1.SyncWindow{nightlyDeny}, want: true},
		{name: "inside a deny window", now: "2026-12-02T23:30:00Z", windows: []convergev1.SyncWindow{nightlyDeny},
			want: false, wantNext: "2026-12-03T06:00:00Z"},
		{name: "deny window spans midnight", now: "2026-12-03T05:59:00Z", windows: []convergev1.SyncWindow{nightlyDeny},
			want: false, wantNext: "2026-12-03T06:00:00Z"},
		{name: "deny window just closed", now: "2026-12-03T06:00:00Z", windows: []convergev1.SyncWindow{nightlyDeny}, want: true},
		{name: "deny window in a time zone", now: "2026-12-02T21:30:00Z",
			windows: []convergev1.SyncWindow{w(convergev1.DenyWindow, "0 22 * * *", time.Hour, "Europe/Berlin")},
			want:    false, wantNext: "2026-12-02T22:00:00Z"},
		{name: "outside the only allow window", now: "2026-12-02T12:00:00Z",
			windows: []convergev1.SyncWindow{w(convergev1.AllowWindow, "0 9 * * MON-FRI", 2*time.Hour, "")},
			want:    false, wantNext: "2026-12-03T09:00:00Z"},
		{name: "inside an allow window", now: "2026-12-02T10:00:00Z",
			windows: []convergev1.SyncWindow{w(convergev1.AllowWindow, "0 9 * * MON-FRI", 2*time.Hour, "")}, want: true},
		{name: "deny wins over allow", now: "2026-12-02T10:00:00Z", windows: []convergev1.SyncWindow{
			w(convergev1.AllowWindow, "0 9 * * *", 2*time.Hour, ""), w(convergev1.DenyWindow, "30 9 * * *", time.Hour, "")},
			want: false, wantNext: "2026-12-02T10:30:00Z"}, // the allow window is still open then
		{name: "range past its end", now: "2026-12-02T10:00:00Z",
			windows: []convergev1.SyncWindow{w(convergev1.DenyWindow, "30-10 * * * *", time.Hour, "")}, wantErr: "spec.syncWindows[0].schedule"},
		{name: "unknown zone", now: "2026-12-02T10:00:00Z",
			windows: []convergev1.SyncWindow{w(convergev1.DenyWindow, "0 * * * *", time.Hour, "Mars/Olympus")}, wantErr: "spec.syncWindows[0].timeZone"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			ok, next, err := SyncAllowed(at(tt.now), tt.windows)
			if tt.wantErr != "" {
				g.Expect(err).To(MatchError(ContainSubstring(tt.wantErr)))
				return
			}
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(ok).To(Equal(tt.want))
			if tt.wantNext != "" {
				g.Expect(next.UTC()).To(Equal(at(tt.wantNext)))
			}
		})
	}
}
