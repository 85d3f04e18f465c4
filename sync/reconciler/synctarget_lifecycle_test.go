package reconciler_test

import (
	"context"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
)

// TestNewerCommitCutsHealthWaitShort: a revision stuck waiting for health is left behind
// as soon as a newer commit arrives, without waiting for its timeout.
func TestNewerCommitCutsHealthWaitShort(t *testing.T) {
	f := newFixture(t)
	good := f.commit(map[string]string{"deploy/web.yaml": deployment("web", 1, "")})
	st := f.syncTarget("web", func(st *convergev1.SyncTarget) {
		st.Spec.Timeout = &metav1.Duration{Duration: 5 * time.Minute}
	})
	eventually(t, st, func(g Gomega, st *convergev1.SyncTarget) {
		g.Expect(st.Status.LastHealthyRevision).To(Equal(good))
	})

	// Unschedulable, with a deadline far away: the health wait would last minutes.
	stuck := f.commit(map[string]string{"deploy/web.yaml": strings.Replace(
		deployment("web", 1, "no-such-node: anywhere"), "progressDeadlineSeconds: 5", "progressDeadlineSeconds: 600", 1)})
	eventually(t, st, func(g Gomega, st *convergev1.SyncTarget) {
		g.Expect(st.Status.LastAttemptedRevision).To(Equal(stuck))
	})
	started := time.Now()
	fixed := f.commit(map[string]string{"deploy/web.yaml": deployment("web", 2, "")})
	eventually(t, st, func(g Gomega, st *convergev1.SyncTarget) {
		g.Expect(st.Status.LastHealthyRevision).To(Equal(fixed), ready(st).Message)
		g.Expect(ready(st).Status).To(Equal(metav1.ConditionTrue))
	})
	t.Logf("the newer commit was healthy %s after it was pushed", time.Since(started).Round(time.Millisecond))
	g := NewWithT(t)
	g.Expect(time.Since(started)).To(BeNumerically("<", time.Minute), "not held up by the 5m timeout")
	g.Expect(get(g, st).Status.History).To(ContainElement(And(
		HaveField("Revision", stuck), HaveField("Message", ContainSubstring("superseded by "+fixed)))))
}

// TestFailedRevisionRolledBackWhenABrokenCommitSupersedesIt is invariant 3 (a failed
// revision ends rolled back) where a newer commit cuts a health wait short and fails to
// render: the revision waited for, never healthy, does not stay in place; the last
// healthy revision is applied again and the status says so.
func TestFailedRevisionRolledBackWhenABrokenCommitSupersedesIt(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	good := f.commit(map[string]string{"deploy/web.yaml": deployment("web", 1, "")})
	st := f.syncTarget("web", func(st *convergev1.SyncTarget) {
		st.Spec.Timeout = &metav1.Duration{Duration: 5 * time.Minute}
	})
	eventually(t, st, func(g Gomega, st *convergev1.SyncTarget) {
		g.Expect(st.Status.LastHealthyRevision).To(Equal(good))
	})

	stuck := f.commit(map[string]string{
		"deploy/web.yaml": strings.Replace(deployment("web", 1, "no-such-node: anywhere"),
			"progressDeadlineSeconds: 5", "progressDeadlineSeconds: 600", 1),
		"deploy/extra.yaml": configMap("extra", "added by the stuck revision"),
	})
	eventually(t, st, func(g Gomega, st *convergev1.SyncTarget) {
		g.Expect(st.Status.LastAttemptedRevision).To(Equal(stuck))
	})
	broken := f.commit(map[string]string{"deploy/broken.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: [name\n"})
	eventually(t, st, func(g Gomega, st *convergev1.SyncTarget) {
		g.Expect(ready(st).Reason).To(Equal(convergev1.BuildFailedReason), ready(st).Message)
		g.Expect(ready(st).Message).To(And(ContainSubstring(broken), ContainSubstring(good+" applied again in place of "+stuck)))
		g.Expect(st.Status.LastAppliedRevision).To(Equal(good))
		g.Expect(st.Status.History[0]).To(And(HaveField("Revision", broken), HaveField("Result", convergev1.SyncFailed)))
		g.Expect(st.Status.History[1]).To(And(HaveField("Revision", stuck), HaveField("Message", ContainSubstring("superseded"))))
	})
	g := NewWithT(t)
	d := &appsv1.Deployment{}
	g.Expect(k8s.Get(context.Background(), client.ObjectKey{Namespace: f.app, Name: "web"}, d)).To(Succeed())
	g.Expect(d.Spec.Template.Spec.NodeSelector).To(BeEmpty(), "the Deployment is the good revision's again")
	gone(g, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: f.app, Name: "extra"}})
}

// TestEmptyRenderDoesNotPruneEverything: a commit that renders nothing fails instead of
// deleting every object, unless the SyncTarget allows it.
func TestEmptyRenderDoesNotPruneEverything(t *testing.T) {
	f := newFixture(t)
	rev := f.commit(map[string]string{"deploy/a.yaml": configMap("a", "1"), "deploy/b.yaml": configMap("b", "1")})
	st := f.syncTarget("cfg", nil)
	eventually(t, st, func(g Gomega, st *convergev1.SyncTarget) {
		g.Expect(st.Status.LastHealthyRevision).To(Equal(rev))
	})
	f.commit(map[string]string{"deploy/README.md": "nothing to deploy"})
	empty := f.remove("deploy/a.yaml", "deploy/b.yaml")
	eventually(t, st, func(g Gomega, st *convergev1.SyncTarget) {
		g.Expect(ready(st).Reason).To(Equal(convergev1.PruneFailedReason))
		g.Expect(ready(st).Message).To(ContainSubstring("renders no objects"))
		g.Expect(st.Status.LastAttemptedRevision).To(Equal(empty))
	})
	g := NewWithT(t)
	getCM(g, f.app, "a")
	getCM(g, f.app, "b")

	latest := get(g, st)
	latest.Spec.AllowEmpty = true
	g.Expect(k8s.Update(context.Background(), latest)).To(Succeed())
	eventually(t, st, func(g Gomega, st *convergev1.SyncTarget) {
		g.Expect(st.Status.LastHealthyRevision).To(Equal(empty), ready(st).Message)
		g.Expect(st.Status.Inventory.Entries).To(BeEmpty())
	})
	gone(g, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: f.app, Name: "a"}})
}

// TestDeletingASyncTarget prunes its objects when prune is on and orphans them when off.
func TestDeletingASyncTarget(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	rev := f.commit(map[string]string{
		"pruned/a.yaml":   configMap("pruned", "1"),
		"orphaned/a.yaml": configMap("orphaned", "1"),
	})
	pruning := f.syncTarget("pruning", func(st *convergev1.SyncTarget) { st.Spec.Path = "pruned" })
	orphaning := f.syncTarget("orphaning", func(st *convergev1.SyncTarget) {
		st.Spec.Path = "orphaned"
		st.Spec.Prune = false
	})
	for _, st := range []*convergev1.SyncTarget{pruning, orphaning} {
		eventually(t, st, func(g Gomega, st *convergev1.SyncTarget) {
			g.Expect(st.Status.LastHealthyRevision).To(Equal(rev))
		})
	}
	g := NewWithT(t)
	g.Expect(k8s.Delete(ctx, pruning)).To(Succeed())
	g.Expect(k8s.Delete(ctx, orphaning)).To(Succeed())
	for _, st := range []*convergev1.SyncTarget{pruning, orphaning} {
		g.Eventually(func(g Gomega) { gone(g, st) }).WithTimeout(30 * time.Second).Should(Succeed())
	}
	gone(g, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: f.app, Name: "pruned"}})
	getCM(g, f.app, "orphaned")
}

// TestNewSyncTargetDeploysWhatItsSourceHoldsNow: a SyncTarget created right after a commit
// that adds its path deploys that commit, though the shared poll of the repository (for
// another SyncTarget, polled hourly) saw only the commit before: its history holds one
// Succeeded entry, not a failure for a revision that was never its own.
func TestNewSyncTargetDeploysWhatItsSourceHoldsNow(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	hourly := func(path string) func(*convergev1.SyncTarget) {
		return func(st *convergev1.SyncTarget) {
			st.Spec.Path = path
			st.Spec.Source.Interval = &metav1.Duration{Duration: time.Hour}
		}
	}
	first := f.commit(map[string]string{"deploy/a.yaml": configMap("a", "one")})
	a := f.syncTarget("polled", hourly("deploy"))
	eventually(t, a, func(g Gomega, st *convergev1.SyncTarget) {
		g.Expect(st.Status.LastHealthyRevision).To(Equal(first))
	})
	second := f.commit(map[string]string{"later/b.yaml": configMap("b", "two")})
	b := f.syncTarget("new", hourly("later"))
	eventually(t, b, func(g Gomega, st *convergev1.SyncTarget) {
		g.Expect(st.Status.LastHealthyRevision).To(Equal(second))
	})
	g := NewWithT(t)
	history := get(g, b).Status.History
	g.Expect(history).To(HaveLen(1), "%+v", history)
	g.Expect(history[0].Result).To(Equal(convergev1.SyncSucceeded))
}
