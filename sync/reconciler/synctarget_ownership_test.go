package reconciler_test

import (
	"context"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
)

// TestTwoSyncTargetsClaimOneObject: the second SyncTarget to render an object another
// one manages reports the conflict and applies nothing; the first keeps the object, and
// nothing is deleted by either, also when the second drops it from Git.
func TestTwoSyncTargetsClaimOneObject(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newFixture(t)
	rev := f.commit(map[string]string{
		"first/shared.yaml":  configMap("shared", "first"),
		"first/sa.yaml":      serviceAccount,
		"second/shared.yaml": configMap("shared", "second"),
		"second/own.yaml":    configMap("own", "second"),
		// The only object of its kind in the namespace: read on its own, not listed.
		"second/sa.yaml": serviceAccount,
	})
	first := f.syncTarget("first", func(st *convergev1.SyncTarget) { st.Spec.Path = "first" })
	eventually(t, first, func(g Gomega, st *convergev1.SyncTarget) {
		g.Expect(st.Status.LastHealthyRevision).To(Equal(rev))
	})

	second := f.syncTarget("second", func(st *convergev1.SyncTarget) { st.Spec.Path = "second" })
	eventually(t, second, func(g Gomega, st *convergev1.SyncTarget) {
		g.Expect(st.Status.History).NotTo(BeEmpty())
		g.Expect(ready(st).Status).To(Equal(metav1.ConditionFalse))
		g.Expect(ready(st).Message).To(ContainSubstring("ConfigMap " + f.app + "/shared is managed by SyncTarget " + f.ns + "/first"))
		g.Expect(ready(st).Message).To(ContainSubstring("ServiceAccount " + f.app + "/deployer is managed by SyncTarget " + f.ns + "/first"))
		g.Expect(st.Status.History[0].Result).To(Equal(convergev1.SyncFailed))
		g.Expect(st.Status.Inventory.Entries).To(BeEmpty(), "nothing was applied, so nothing is tracked")
	})
	g := NewWithT(t)
	shared := &corev1.ConfigMap{}
	g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: f.app, Name: "shared"}, shared)).To(Succeed())
	g.Expect(shared.Data["value"]).To(Equal("first"))
	g.Expect(shared.Labels).To(HaveKeyWithValue(convergev1.NameLabel, "first"))
	// A broken revision never half-applies: the object of its own was not created either.
	err := k8s.Get(ctx, client.ObjectKey{Namespace: f.app, Name: "own"}, &corev1.ConfigMap{})
	g.Expect(err).To(HaveOccurred())
	events := &corev1.EventList{}
	g.Expect(k8s.List(ctx, events, client.InNamespace(f.ns))).To(Succeed())
	g.Expect(events.Items).To(ContainElement(And(
		HaveField("InvolvedObject.Name", "second"),
		HaveField("Type", corev1.EventTypeWarning),
		HaveField("Message", ContainSubstring("belong to another SyncTarget")))))

	// The second drops the objects: it deploys, and the first's objects stay untouched.
	rev2 := f.remove("second/shared.yaml", "second/sa.yaml")
	eventually(t, second, func(g Gomega, st *convergev1.SyncTarget) {
		g.Expect(st.Status.LastHealthyRevision).To(Equal(rev2))
	})
	g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: f.app, Name: "shared"}, shared)).To(Succeed())
	g.Expect(shared.Labels).To(HaveKeyWithValue(convergev1.NameLabel, "first"))
	g.Expect(shared.Data["value"]).To(Equal("first"))

	// Once the first is gone (without pruning), the object is free to adopt.
	latest := get(g, first)
	patch := client.MergeFrom(latest.DeepCopy())
	latest.Spec.Prune = false
	g.Expect(k8s.Patch(ctx, latest, patch)).To(Succeed())
	eventually(t, first, func(g Gomega, st *convergev1.SyncTarget) {
		g.Expect(st.Status.ObservedGeneration).To(Equal(st.Generation))
	})
	g.Expect(k8s.Delete(ctx, latest)).To(Succeed())
	g.Eventually(func() error { return k8s.Get(ctx, client.ObjectKeyFromObject(first), &convergev1.SyncTarget{}) }).
		Should(HaveOccurred())
	rev3 := f.commit(map[string]string{"second/shared.yaml": configMap("shared", "second")})
	eventually(t, second, func(g Gomega, st *convergev1.SyncTarget) {
		g.Expect(st.Status.LastHealthyRevision).To(Equal(rev3))
	})
	g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: f.app, Name: "shared"}, shared)).To(Succeed())
	g.Expect(shared.Labels).To(HaveKeyWithValue(convergev1.NameLabel, "second"))
	g.Expect(shared.Data["value"]).To(Equal("second"))
}

const serviceAccount = "apiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: deployer\n"
