package reconciler

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
)

// progressRun is a run of a Ready SyncTarget on a fake API server that counts status
// patches, with a fake clock.
func progressRun(t *testing.T) (*run, *clocktesting.FakeClock, *atomic.Int32, client.Client) {
	t.Helper()
	scheme := runtime.NewScheme()
	if err := convergev1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	st := &convergev1.SyncTarget{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "app"}}
	st.Status.Conditions = []metav1.Condition{{Type: convergev1.ReadyCondition, Status: metav1.ConditionTrue,
		Reason: convergev1.SucceededReason, Message: "applied main@sha1:1111111", LastTransitionTime: metav1.Now()}}
	var patches atomic.Int32
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(st).WithStatusSubresource(st).
		WithInterceptorFuncs(interceptor.Funcs{
			SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, p client.Patch, opts ...client.SubResourcePatchOption) error {
				patches.Add(1)
				return c.SubResource(sub).Patch(ctx, obj, p, opts...)
			},
		}).Build()
	clk := clocktesting.NewFakeClock(time.Now())
	r := &Reconciler{Client: c, Clock: clk}
	live := &convergev1.SyncTarget{}
	if err := c.Get(t.Context(), client.ObjectKeyFromObject(st), live); err != nil {
		t.Fatal(err)
	}
	return r.newRun(live), clk, &patches, c
}

// TestProgressIfSlowWritesNothingForAShortStep: a step over before slowWait leaves the
// status as it was, without a request.
func TestProgressIfSlowWritesNothingForAShortStep(t *testing.T) {
	g := NewWithT(t)
	ru, clk, patches, _ := progressRun(t)
	done := ru.progressIfSlow(t.Context(), "applying main@sha1:2222222")
	g.Eventually(clk.HasWaiters).Should(BeTrue())
	clk.Step(slowWait - time.Millisecond)
	g.Consistently(patches.Load).WithTimeout(200*time.Millisecond).Should(BeZero(), "not slow yet")
	g.Expect(done()).To(Succeed())
	clk.Step(time.Hour) // a timer left running would write now
	g.Expect(patches.Load()).To(BeZero())
	g.Expect(apimeta.FindStatusCondition(ru.st.Status.Conditions, convergev1.ReconcilingCondition)).To(BeNil())
	g.Expect(ru.patchStatus(t.Context())).To(Succeed())
	g.Expect(patches.Load()).To(BeZero())
}

// TestProgressIfSlowSaysWhatIsUnderWay: a step still going after slowWait is shown in the
// status while it runs, and the run takes the write in: the status as written is what it
// compares with next.
func TestProgressIfSlowSaysWhatIsUnderWay(t *testing.T) {
	g := NewWithT(t)
	ru, clk, patches, c := progressRun(t)
	done := ru.progressIfSlow(t.Context(), "applying main@sha1:2222222")
	g.Eventually(clk.HasWaiters).Should(BeTrue())
	clk.Step(slowWait)
	g.Eventually(func(g Gomega) {
		live := &convergev1.SyncTarget{}
		g.Expect(c.Get(t.Context(), ru.key, live)).To(Succeed())
		cond := apimeta.FindStatusCondition(live.Status.Conditions, convergev1.ReconcilingCondition)
		g.Expect(cond).NotTo(BeNil())
		g.Expect(cond.Message).To(Equal("applying main@sha1:2222222"))
	}).Should(Succeed(), "written while the step runs")
	g.Expect(done()).To(Succeed())
	g.Expect(patches.Load()).To(BeEquivalentTo(1))

	cond := apimeta.FindStatusCondition(ru.st.Status.Conditions, convergev1.ReconcilingCondition)
	g.Expect(cond).NotTo(BeNil())
	g.Expect(cond.Message).To(Equal("applying main@sha1:2222222"))
	g.Expect(ru.patchStatus(t.Context())).To(Succeed())
	g.Expect(patches.Load()).To(BeEquivalentTo(1), "nothing changed since that write")
}
