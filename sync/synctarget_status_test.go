package sync

import (
	"fmt"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
)

func TestHistoryIsCappedNewestFirst(t *testing.T) {
	g := NewWithT(t)
	st := &convergev1.SyncTarget{}
	limit := int32(3)
	st.Spec.HistoryLimit = &limit
	for i := range 5 {
		addHistory(st, convergev1.HistoryEntry{Revision: fmt.Sprintf("main@sha1:%d", i), Result: convergev1.SyncSucceeded})
	}
	g.Expect(st.Status.History).To(HaveLen(3))
	g.Expect(st.Status.History[0].Revision).To(Equal("main@sha1:4"))
	g.Expect(st.Status.History[2].Revision).To(Equal("main@sha1:2"))

	st.Spec.HistoryLimit = nil // the default, 10
	for i := range 12 {
		addHistory(st, convergev1.HistoryEntry{Revision: fmt.Sprint(i)})
	}
	g.Expect(st.Status.History).To(HaveLen(convergev1.DefaultHistoryLimit))
}

func TestFullSyncIsDueAfterTheSafetyInterval(t *testing.T) {
	g := NewWithT(t)
	clock := clocktesting.NewFakeClock(time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC))
	r := &Reconciler{Clock: clock, FullSyncInterval: time.Hour}
	st := &convergev1.SyncTarget{}
	g.Expect(r.fullSyncDue(st)).To(BeFalse(), "nothing synced yet: the normal path applies")
	finished := metav1.NewTime(clock.Now())
	st.Status.History = []convergev1.HistoryEntry{{FinishedAt: &finished}}
	clock.Step(59 * time.Minute)
	g.Expect(r.fullSyncDue(st)).To(BeFalse())
	clock.Step(time.Minute)
	g.Expect(r.fullSyncDue(st)).To(BeTrue())
	r.FullSyncInterval = 0
	g.Expect(r.fullSyncDue(st)).To(BeFalse(), "zero turns the periodic full sync off")
}
