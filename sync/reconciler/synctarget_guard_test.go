package reconciler_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
	"github.com/converge-gitops/converge/internal/gittest"
)

// TestMaxDeletionsStallsInsteadOfPruning: a commit that would prune more than
// spec.maxDeletions (a path typo) is refused before anything is applied, the SyncTarget
// is Stalled and says why, and a reconcile a user asks for lets it through.
func TestMaxDeletionsStallsInsteadOfPruning(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newFixture(t)
	files := map[string]string{}
	for i := range 5 {
		files[fmt.Sprintf("deploy/cm%d.yaml", i)] = configMap(fmt.Sprintf("cm%d", i), "1")
	}
	good := f.commit(files)
	limit := intstr.FromString("50%")
	st := f.syncTarget("guarded", func(st *convergev1.SyncTarget) { st.Spec.MaxDeletions = &limit })
	eventually(t, st, func(g Gomega, st *convergev1.SyncTarget) {
		g.Expect(st.Status.LastHealthyRevision).To(Equal(good))
	})

	// Four of five files leave, and the one left changes.
	f.remove("deploy/cm1.yaml", "deploy/cm2.yaml", "deploy/cm3.yaml", "deploy/cm4.yaml")
	typo := f.commit(map[string]string{"deploy/cm0.yaml": configMap("cm0", "3")})
	eventually(t, st, func(g Gomega, st *convergev1.SyncTarget) {
		g.Expect(ready(st).Reason).To(Equal(convergev1.TooManyDeletionsReason), ready(st).Message)
		g.Expect(ready(st).Message).To(And(ContainSubstring(typo), ContainSubstring("prunes 4 of the 5 objects applied"),
			ContainSubstring("spec.maxDeletions (50%)")))
		stalled := apimeta.FindStatusCondition(st.Status.Conditions, convergev1.StalledCondition)
		g.Expect(stalled).NotTo(BeNil())
		g.Expect(stalled.Status).To(Equal(metav1.ConditionTrue))
		g.Expect(st.Status.History[0]).To(And(HaveField("Revision", typo), HaveField("Result", convergev1.SyncFailed)))
		g.Expect(st.Status.LastAppliedRevision).To(Equal(good))
	})
	g := NewWithT(t)
	for i := range 5 {
		g.Expect(getCM(g, f.app, fmt.Sprintf("cm%d", i)).Data["value"]).To(Equal("1"), "nothing was pruned or applied")
	}
	g.Consistently(func(g Gomega) {
		g.Expect(get(g, st).Status.History[0].Revision).To(Equal(typo))
		g.Expect(getCM(g, f.app, "cm4").Data["value"]).To(Equal("1"))
	}).WithTimeout(3*time.Second).WithPolling(250*time.Millisecond).Should(Succeed(), "the refused revision is not retried")

	// A user who means it asks for a reconcile.
	latest := get(g, st)
	latest.Annotations = map[string]string{convergev1.RequestedAtAnnotation: fmt.Sprint(time.Now().UnixNano())}
	g.Expect(k8s.Update(ctx, latest)).To(Succeed())
	eventually(t, st, func(g Gomega, st *convergev1.SyncTarget) {
		g.Expect(st.Status.LastHealthyRevision).To(Equal(typo))
		g.Expect(apimeta.FindStatusCondition(st.Status.Conditions, convergev1.StalledCondition)).To(BeNil())
	})
	g.Expect(getCM(g, f.app, "cm0").Data["value"]).To(Equal("3"))
	for i := 1; i < 5; i++ {
		err := k8s.Get(ctx, client.ObjectKey{Namespace: f.app, Name: fmt.Sprintf("cm%d", i)}, &corev1.ConfigMap{})
		g.Expect(err).To(HaveOccurred(), "cm%d is pruned once allowed", i)
	}
}

// TestConvergesPastWhatAnUnhealthyRevisionAdded is invariant 7 (everything converges):
// what a revision that never became healthy added is pruned by the next one without
// counting against spec.maxDeletions, which still counts the healthy revision's objects.
func TestConvergesPastWhatAnUnhealthyRevisionAdded(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	// The revisions meant to become healthy give their Deployment ten minutes to progress
	// (see deployment): on a loaded machine, its pods may take longer than the 5 s the
	// failing revision is given.
	patient := func(replicas int) string { return deployment("web", replicas, "") }
	files := map[string]string{"deploy/web.yaml": patient(1)}
	for i := range 4 {
		files[fmt.Sprintf("deploy/cm%d.yaml", i)] = configMap(fmt.Sprintf("cm%d", i), "1")
	}
	good := f.commit(files)
	limit := intstr.FromInt32(1)
	st := f.syncTarget("guarded", func(st *convergev1.SyncTarget) {
		st.Spec.MaxDeletions = &limit
		st.Spec.Rollback = &convergev1.RollbackSpec{Enabled: new(false)}
	})
	eventually(t, st, func(g Gomega, st *convergev1.SyncTarget) {
		g.Expect(st.Status.LastHealthyRevision).To(Equal(good))
	})

	// Three objects more and a Deployment that never becomes Available: it fails and,
	// rollback off, stays.
	added := map[string]string{"deploy/web.yaml": deployment("web", 1, "no-such-node: anywhere")}
	for i := range 3 {
		added[fmt.Sprintf("deploy/x%d.yaml", i)] = configMap(fmt.Sprintf("x%d", i), "1")
	}
	bad := f.commit(added)
	eventually(t, st, func(g Gomega, st *convergev1.SyncTarget) {
		g.Expect(ready(st).Reason).To(Equal(convergev1.HealthCheckFailedReason), ready(st).Message)
		g.Expect(st.Status.LastAppliedRevision).To(Equal(bad))
		g.Expect(st.Status.Inventory.Entries).To(HaveLen(8))
	})

	// The next drops those three and one of the healthy revision's: one deletion counted.
	next := "main@sha1:" + f.repo.CommitChanges(t, "main", gittest.Change{Path: "deploy/web.yaml", Content: patient(2)},
		gittest.Change{Path: "deploy/x0.yaml", Delete: true}, gittest.Change{Path: "deploy/x1.yaml", Delete: true},
		gittest.Change{Path: "deploy/x2.yaml", Delete: true}, gittest.Change{Path: "deploy/cm3.yaml", Delete: true})
	eventually(t, st, func(g Gomega, st *convergev1.SyncTarget) {
		g.Expect(st.Status.LastHealthyRevision).To(Equal(next), ready(st).Message)
		g.Expect(st.Status.Inventory.Entries).To(HaveLen(4))
	})
	g := NewWithT(t)
	for _, n := range []string{"x0", "x1", "x2", "cm3"} {
		gone(g, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: f.app, Name: n}})
	}

	// Two of the healthy revision's objects at once are still too many.
	typo := f.remove("deploy/cm1.yaml", "deploy/cm2.yaml")
	eventually(t, st, func(g Gomega, st *convergev1.SyncTarget) {
		g.Expect(ready(st).Reason).To(Equal(convergev1.TooManyDeletionsReason), ready(st).Message)
		g.Expect(ready(st).Message).To(And(ContainSubstring(typo), ContainSubstring("prunes 2 of the 4 objects applied")))
	})
	g.Expect(getCM(g, f.app, "cm1").Data["value"]).To(Equal("1"), "nothing was pruned")
}
