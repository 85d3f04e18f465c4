package v1alpha1_test

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
)

// TestPollingFollowsTheSourceSet: the interval and schedule are those of whichever of
// spec.source, spec.chart and spec.oci is set.
func TestPollingFollowsTheSourceSet(t *testing.T) {
	every := func(d time.Duration) *metav1.Duration { return &metav1.Duration{Duration: d} }
	tests := []struct {
		name     string
		spec     convergev1.SyncTargetSpec
		interval time.Duration
		schedule convergev1.CronSchedule
		chart    bool
		oci      bool
	}{
		{name: "git", spec: convergev1.SyncTargetSpec{Source: convergev1.GitSource{Interval: every(time.Hour)}},
			interval: time.Hour},
		{name: "git on a schedule", spec: convergev1.SyncTargetSpec{Source: convergev1.GitSource{Schedule: "@hourly"}},
			interval: convergev1.DefaultInterval, schedule: "@hourly"},
		{name: "chart", spec: convergev1.SyncTargetSpec{Chart: &convergev1.ChartSource{Interval: every(5 * time.Minute)}},
			interval: 5 * time.Minute, chart: true},
		{name: "oci", spec: convergev1.SyncTargetSpec{OCI: &convergev1.OCISource{Interval: every(10 * time.Minute)}},
			interval: 10 * time.Minute, oci: true},
		{name: "oci on a schedule", spec: convergev1.SyncTargetSpec{OCI: &convergev1.OCISource{Schedule: "*/5 * * * *"}},
			interval: convergev1.DefaultInterval, schedule: "*/5 * * * *", oci: true},
		{name: "oci without either", spec: convergev1.SyncTargetSpec{OCI: &convergev1.OCISource{}},
			interval: convergev1.DefaultInterval, oci: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := &convergev1.SyncTarget{Spec: tt.spec}
			if got := st.GetInterval(); got != tt.interval {
				t.Errorf("GetInterval: got %v, want %v", got, tt.interval)
			}
			if got := st.GetSchedule(); got != tt.schedule {
				t.Errorf("GetSchedule: got %q, want %q", got, tt.schedule)
			}
			if st.IsChart() != tt.chart || st.IsOCI() != tt.oci {
				t.Errorf("IsChart %v IsOCI %v, want %v %v", st.IsChart(), st.IsOCI(), tt.chart, tt.oci)
			}
			if st.VerifyMode() != "" {
				t.Errorf("VerifyMode: %q, want none", st.VerifyMode())
			}
		})
	}
}
