package reconciler_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
)

// TestRequestedAtDeploysWhatWasJustPushed: a reconcile request asks the source again
// instead of trusting the last poll, so `converge reconcile` right after a push deploys
// the push, on a SyncTarget that polls only once an hour.
func TestRequestedAtDeploysWhatWasJustPushed(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	rev1 := f.commit(map[string]string{"deploy/a.yaml": configMap("a", "1")})
	st := f.syncTarget("hourly", func(st *convergev1.SyncTarget) {
		st.Spec.Source.Interval = &metav1.Duration{Duration: time.Hour}
	})
	eventually(t, st, func(g Gomega, st *convergev1.SyncTarget) {
		g.Expect(st.Status.LastHealthyRevision).To(Equal(rev1))
	})

	rev2 := f.commit(map[string]string{"deploy/a.yaml": configMap("a", "2")})
	g := NewWithT(t)
	latest := get(g, st)
	if latest.Annotations == nil {
		latest.Annotations = map[string]string{}
	}
	request := fmt.Sprint(time.Now().UnixNano())
	latest.Annotations[convergev1.RequestedAtAnnotation] = request
	g.Expect(k8s.Update(ctx, latest)).To(Succeed())
	eventually(t, st, func(g Gomega, st *convergev1.SyncTarget) {
		g.Expect(st.Status.LastHandledReconcileAt).To(Equal(request))
		g.Expect(st.Status.LastHealthyRevision).To(Equal(rev2), "the request was served with the revision polled an hour ago")
		g.Expect(ready(st).Status).To(Equal(metav1.ConditionTrue))
	})
	g.Expect(getCM(g, f.app, "a").Data["value"]).To(Equal("2"))
}
