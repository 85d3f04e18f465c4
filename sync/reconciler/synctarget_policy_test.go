package reconciler_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
)

// TestSuspend: a suspended SyncTarget applies nothing until resumed.
func TestSuspend(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newFixture(t)
	rev := f.commit(map[string]string{"deploy/a.yaml": configMap("a", "1")})
	st := f.syncTarget("paused", func(st *convergev1.SyncTarget) { st.Spec.Suspend = true })
	g := NewWithT(t)
	g.Consistently(func(g Gomega) {
		err := k8s.Get(ctx, client.ObjectKey{Namespace: f.app, Name: "a"}, &corev1.ConfigMap{})
		g.Expect(err).To(HaveOccurred())
		g.Expect(get(g, st).Status.LastAttemptedRevision).To(BeEmpty())
	}).WithTimeout(3 * time.Second).WithPolling(250 * time.Millisecond).Should(Succeed())

	latest := get(g, st)
	latest.Spec.Suspend = false
	g.Expect(k8s.Update(ctx, latest)).To(Succeed())
	eventually(t, st, func(g Gomega, st *convergev1.SyncTarget) {
		g.Expect(st.Status.LastHealthyRevision).To(Equal(rev))
	})
}

// TestDependsOn: the app waits for its platform to be Ready at its current revision.
func TestDependsOn(t *testing.T) {
	f := newFixture(t)
	f.commit(map[string]string{
		"platform/cm.yaml": configMap("platform", "1"),
		"app/cm.yaml":      configMap("app", "1"),
	})
	app := f.syncTarget("app", func(st *convergev1.SyncTarget) {
		st.Spec.Path = "app"
		st.Spec.DependsOn = []convergev1.DependencyReference{{Name: "platform"}}
	})
	eventually(t, app, func(g Gomega, st *convergev1.SyncTarget) {
		g.Expect(ready(st).Reason).To(Equal(convergev1.DependencyNotReadyReason))
		g.Expect(st.Status.LastAttemptedRevision).To(BeEmpty())
	})
	platform := f.syncTarget("platform", func(st *convergev1.SyncTarget) { st.Spec.Path = "platform" })
	eventually(t, app, func(g Gomega, st *convergev1.SyncTarget) {
		g.Expect(ready(st).Status).To(Equal(metav1.ConditionTrue), ready(st).Message)
	})
	g := NewWithT(t)
	p, a := get(g, platform), get(g, app)
	g.Expect(p.Status.History[0].FinishedAt.Time).NotTo(BeTemporally(">", a.Status.History[0].StartedAt.Time),
		"the app started after the platform finished")
}

// TestSyncWindowDeny: inside a deny window nothing is applied and status says when the
// next window opens.
func TestSyncWindowDeny(t *testing.T) {
	f := newFixture(t)
	f.commit(map[string]string{"deploy/a.yaml": configMap("a", "1")})
	st := f.syncTarget("frozen", func(st *convergev1.SyncTarget) {
		st.Spec.SyncWindows = []convergev1.SyncWindow{{
			Kind: convergev1.DenyWindow, Schedule: "@every 1h", Duration: metav1.Duration{Duration: 2 * time.Hour},
		}}
	})
	eventually(t, st, func(g Gomega, st *convergev1.SyncTarget) {
		g.Expect(ready(st).Reason).To(Equal(convergev1.OutsideSyncWindowReason))
		g.Expect(ready(st).Message).To(ContainSubstring("the next one opens at"))
	})
	g := NewWithT(t)
	err := k8s.Get(context.Background(), client.ObjectKey{Namespace: f.app, Name: "a"}, &corev1.ConfigMap{})
	g.Expect(err).To(HaveOccurred(), "nothing applied inside a deny window")
}

// TestImpersonation: a SyncTarget naming a service account applies with its rights only:
// what it may write lands, and a commit reaching beyond them changes nothing.
func TestImpersonation(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	g := NewWithT(t)
	// The tenant may manage ConfigMaps in its app namespace, nothing else.
	g.Expect(k8s.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "deployer", Namespace: f.ns}})).To(Succeed())
	g.Expect(k8s.Create(ctx, &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: "configmaps", Namespace: f.app},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"*"}}},
	})).To(Succeed())
	g.Expect(k8s.Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "deployer", Namespace: f.app},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "configmaps"},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: "deployer", Namespace: f.ns}},
	})).To(Succeed())

	rev := f.commit(map[string]string{"deploy/a.yaml": configMap("a", "1")})
	st := f.syncTarget("tenant", func(st *convergev1.SyncTarget) { st.Spec.ServiceAccountName = "deployer" })
	eventually(t, st, func(g Gomega, st *convergev1.SyncTarget) {
		g.Expect(st.Status.LastHealthyRevision).To(Equal(rev), ready(st).Message)
	})

	denied := f.commit(map[string]string{"deploy/secret.yaml": "apiVersion: v1\nkind: Secret\nmetadata: {name: s}\nstringData: {password: hunter2}\n"})
	eventually(t, st, func(g Gomega, st *convergev1.SyncTarget) {
		g.Expect(st.Status.LastAttemptedRevision).To(Equal(denied))
		g.Expect(ready(st).Status).To(Equal(metav1.ConditionFalse))
		g.Expect(ready(st).Message).To(ContainSubstring("forbidden"))
		g.Expect(ready(st).Message).NotTo(ContainSubstring("hunter2"))
	})
	err := k8s.Get(ctx, client.ObjectKey{Namespace: f.app, Name: "s"}, &corev1.Secret{})
	g.Expect(err).To(HaveOccurred(), "the service account may not write Secrets")
}

// TestIdleReconcileIsCheap: with 1 000 ConfigMaps applied and nothing changed, a reconcile
// sends a handful of requests, not one per object.
func TestIdleReconcileIsCheap(t *testing.T) {
	f := newFixture(t)
	files := map[string]string{}
	var b strings.Builder
	for i := range 1000 {
		fmt.Fprintf(&b, "---\n%s", configMap(fmt.Sprintf("cm-%04d", i), "v"))
		if i%100 == 99 {
			files[fmt.Sprintf("deploy/cms-%d.yaml", i/100)] = b.String()
			b.Reset()
		}
	}
	rev := f.commit(files)
	st := f.syncTarget("big", func(st *convergev1.SyncTarget) {
		st.Spec.Source.Interval = &metav1.Duration{Duration: time.Hour}
		st.Spec.Timeout = &metav1.Duration{Duration: 2 * time.Minute}
	})
	eventually(t, st, func(g Gomega, st *convergev1.SyncTarget) {
		g.Expect(st.Status.LastHealthyRevision).To(Equal(rev), ready(st).Message)
		g.Expect(st.Status.Inventory.Entries).To(HaveLen(1000))
	})
	g := NewWithT(t)
	// Ask for reconciles by touching an unrelated annotation, and count what they send.
	reconciles := 3
	before, start := requests.Load(), reconcileCount(g)
	stop := recorder.start()
	for i := range reconciles {
		latest := get(g, st)
		if latest.Annotations == nil {
			latest.Annotations = map[string]string{}
		}
		latest.Annotations["example.com/poke"] = fmt.Sprint(i)
		g.Expect(k8s.Update(context.Background(), latest)).To(Succeed())
		g.Eventually(func() float64 { return reconcileCount(g) }).Should(BeNumerically(">=", start+float64(i+1)))
	}
	sent := requests.Load() - before
	t.Logf("%d idle reconciles of 1000 objects sent %d API requests", reconciles, sent)
	g.Expect(sent).To(BeNumerically("<=", 10*reconciles), "no per-object traffic")
	// The SyncTarget is read from the API server (not the cache) while the cache may be behind
	// the daemon's last status write: once it is seen to have caught up, not any more.
	reads := 0
	for _, r := range stop() {
		if r == "GET /apis/converge.dev/v1alpha1/namespaces/"+f.ns+"/synctargets/big" {
			reads++
		}
	}
	g.Expect(reads).To(BeNumerically("<=", 1))
	s := get(g, st)
	g.Expect(s.Status.LastFetchedRevision).To(Equal(rev))
	g.Expect(apimeta.IsStatusConditionTrue(s.Status.Conditions, convergev1.ReadyCondition)).To(BeTrue())
}

// reconcileCount reads controller-runtime's count of finished SyncTarget reconciles.
func reconcileCount(g Gomega) float64 {
	return metricValue(g, "controller_runtime_reconcile_total", "controller", "synctarget")
}

// metricValue sums the counters of a metric family whose label has the given value.
func metricValue(g Gomega, name, label, value string) float64 {
	families, err := metrics.Registry.Gather()
	g.Expect(err).NotTo(HaveOccurred())
	total := 0.0
	for _, mf := range families {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == label && l.GetValue() == value {
					total += m.GetCounter().GetValue()
				}
			}
		}
	}
	return total
}

// TestFailedPruneIsRetried: an object whose delete is denied stays in the inventory and
// is deleted once the rights are there, without a new commit.
func TestFailedPruneIsRetried(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	g := NewWithT(t)
	g.Expect(k8s.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "deployer", Namespace: f.ns}})).To(Succeed())
	role := &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: "configmaps", Namespace: f.app},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"},
			Verbs: []string{"get", "list", "watch", "create", "update", "patch"}}},
	}
	g.Expect(k8s.Create(ctx, role)).To(Succeed())
	g.Expect(k8s.Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "deployer", Namespace: f.app},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "configmaps"},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: "deployer", Namespace: f.ns}},
	})).To(Succeed())
	f.commit(map[string]string{"deploy/a.yaml": configMap("a", "1"), "deploy/b.yaml": configMap("b", "1")})
	st := f.syncTarget("tenant", func(st *convergev1.SyncTarget) { st.Spec.ServiceAccountName = "deployer" })
	eventually(t, st, func(g Gomega, st *convergev1.SyncTarget) {
		g.Expect(ready(st).Status).To(Equal(metav1.ConditionTrue), ready(st).Message)
	})

	rev := f.remove("deploy/b.yaml")
	eventually(t, st, func(g Gomega, st *convergev1.SyncTarget) {
		g.Expect(ready(st).Reason).To(Equal(convergev1.PruneFailedReason))
		g.Expect(ready(st).Message).To(ContainSubstring("forbidden"))
		g.Expect(st.Status.LastAppliedRevision).To(Equal(rev))
		g.Expect(st.Status.Inventory.Entries).To(ContainElement(HaveField("ID", f.app+"_b__ConfigMap")))
	})
	getCM(g, f.app, "b")

	role.Rules[0].Verbs = append(role.Rules[0].Verbs, "delete")
	g.Expect(k8s.Update(ctx, role)).To(Succeed())
	eventually(t, st, func(g Gomega, st *convergev1.SyncTarget) {
		g.Expect(ready(st).Status).To(Equal(metav1.ConditionTrue), ready(st).Message)
		g.Expect(st.Status.LastHealthyRevision).To(Equal(rev))
		g.Expect(st.Status.Inventory.Entries).To(HaveLen(1))
	})
	gone(g, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: f.app, Name: "b"}})
}

// TestInvalidHealthRuleStalls: a CEL rule that does not compile is a spec error (Stalled),
// found before anything is applied, not a failing revision to roll back.
func TestInvalidHealthRuleStalls(t *testing.T) {
	f := newFixture(t)
	f.commit(map[string]string{"deploy/a.yaml": configMap("a", "1")})
	st := f.syncTarget("rules", func(st *convergev1.SyncTarget) {
		st.Spec.HealthCheckExprs = []convergev1.CustomHealthCheck{{APIVersion: "example.com/v1", Kind: "Widget", Current: "self.status.("}}
	})
	eventually(t, st, func(g Gomega, st *convergev1.SyncTarget) {
		g.Expect(apimeta.IsStatusConditionTrue(st.Status.Conditions, convergev1.StalledCondition)).To(BeTrue())
		g.Expect(ready(st).Reason).To(Equal(convergev1.InvalidSpecReason))
		g.Expect(ready(st).Message).To(ContainSubstring("spec.healthCheckExprs"))
		g.Expect(st.Status.LastAttemptedRevision).To(BeEmpty())
	})
	err := k8s.Get(context.Background(), client.ObjectKey{Namespace: f.app, Name: "a"}, &corev1.ConfigMap{})
	NewWithT(t).Expect(err).To(HaveOccurred(), "nothing applied")
}

// TestUnreachableSourceIsReported: a source that cannot be reached makes Ready=False
// FetchFailed with a clear message, and nothing is applied or pruned.
func TestUnreachableSourceIsReported(t *testing.T) {
	f := newFixture(t)
	st := f.syncTarget("offline", func(st *convergev1.SyncTarget) {
		st.Spec.Source.URL = "http://user:hunter2@127.0.0.1:1/offline.git"
	})
	eventually(t, st, func(g Gomega, st *convergev1.SyncTarget) {
		g.Expect(ready(st).Reason).To(Equal(convergev1.FetchFailedReason))
		g.Expect(ready(st).Message).To(ContainSubstring("127.0.0.1:1"))
		g.Expect(ready(st).Message).NotTo(ContainSubstring("hunter2"), "credentials are redacted")
		g.Expect(st.Status.LastAttemptedRevision).To(BeEmpty())
	})
}
