package reconciler_test

import (
	"context"
	"testing"
	"time"

	kstatus "github.com/fluxcd/cli-utils/pkg/kstatus/status"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
)

func getCM(g Gomega, ns, name string) *corev1.ConfigMap {
	cm := &corev1.ConfigMap{}
	g.Expect(k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, cm)).To(Succeed())
	return cm
}

func gone(g Gomega, obj client.Object) {
	err := k8s.Get(context.Background(), client.ObjectKeyFromObject(obj), obj)
	g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "want NotFound, got %v", err)
}

// TestDeployUpdatePrune pushes a commit, a change and a removal, and checks that only
// what this SyncTarget owns, and has not opted out, is pruned.
func TestDeployUpdatePrune(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newFixture(t)
	f.commit(map[string]string{
		"deploy/web.yaml":    deployment("web", 2, ""),
		"deploy/config.yaml": configMap("settings", "one"),
		"deploy/keep.yaml":   configMap("keep", "x"),
		"deploy/handed.yaml": configMap("handed-over", "x"),
		"README.md":          "not a manifest",
	})
	// keep opts out of pruning in Git itself.
	f.commit(map[string]string{"deploy/keep.yaml": `apiVersion: v1
kind: ConfigMap
metadata:
  name: keep
  annotations: {converge.dev/prune: disabled}
data: {value: "x"}
`})
	rev2 := "main@sha1:" + f.repo.Head(t, "main")
	st := f.syncTarget("web", nil)

	eventually(t, st, func(g Gomega, st *convergev1.SyncTarget) {
		g.Expect(ready(st).Status).To(Equal(metav1.ConditionTrue), ready(st).Message)
		g.Expect(st.Status.LastHealthyRevision).To(Equal(rev2))
		g.Expect(st.Status.LastAppliedRevision).To(Equal(rev2))
		g.Expect(st.Status.Inventory.Entries).To(HaveLen(4))
		g.Expect(st.Status.History).NotTo(BeEmpty())
		g.Expect(st.Status.History[0]).To(And(
			HaveField("Revision", rev2), HaveField("Result", convergev1.SyncSucceeded), HaveField("Created", int32(4))))
	})
	g := NewWithT(t)
	// A finished SyncTarget is Current for kstatus, so tools that wait on it (kubectl
	// wait, Flux, Argo CD, cli-utils) see it done.
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(get(g, st))
	g.Expect(err).NotTo(HaveOccurred())
	res, err := kstatus.Compute(&unstructured.Unstructured{Object: u})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(res.Status).To(Equal(kstatus.CurrentStatus), res.Message)
	g.Expect(metricValue(g, "converge_sync_total", "result", "Succeeded")).To(BeNumerically(">=", 1))
	cm := getCM(g, f.app, "settings")
	g.Expect(cm.Labels).To(Equal(map[string]string{convergev1.NameLabel: "web", convergev1.NamespaceLabel: f.ns}))
	d := &appsv1.Deployment{}
	g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: f.app, Name: "web"}, d)).To(Succeed())
	g.Expect(d.Status.AvailableReplicas).To(Equal(int32(2)), "health waited for the rollout")

	// Someone hands "handed-over" to another SyncTarget by relabelling it.
	handed := getCM(g, f.app, "handed-over")
	handed.Labels[convergev1.NameLabel] = "someone-else"
	g.Expect(k8s.Update(ctx, handed)).To(Succeed())

	// The same commit changes settings and drops handed-over from Git.
	f.commit(map[string]string{"deploy/config.yaml": configMap("settings", "two")})
	rev3 := f.remove("deploy/handed.yaml")
	eventually(t, st, func(g Gomega, st *convergev1.SyncTarget) {
		g.Expect(st.Status.LastHealthyRevision).To(Equal(rev3))
		g.Expect(st.Status.History[0].Configured).To(BeNumerically(">=", 1))
		g.Expect(st.Status.History[0].Deleted).To(BeZero())
	})
	g.Expect(getCM(g, f.app, "settings").Data["value"]).To(Equal("two"))
	g.Expect(getCM(g, f.app, "handed-over").Labels).To(HaveKeyWithValue(convergev1.NameLabel, "someone-else"))

	rev4 := f.remove("deploy/config.yaml", "deploy/keep.yaml")
	eventually(t, st, func(g Gomega, st *convergev1.SyncTarget) {
		g.Expect(st.Status.LastHealthyRevision).To(Equal(rev4))
		g.Expect(st.Status.Inventory.Entries).To(HaveLen(1))
	})
	g.Eventually(func(g Gomega) {
		gone(g, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: f.app, Name: "settings"}})
	}).Should(Succeed())
	getCM(g, f.app, "keep")        // prune: disabled survives
	getCM(g, f.app, "handed-over") // another SyncTarget's object is never deleted
	latest := get(g, st)
	g.Expect(latest.Status.History[0].Deleted).To(Equal(int32(1)), "%+v", latest.Status.History)
}

// TestRollback deploys a good revision, then one whose Deployment can never become
// Available: converge restores the good one on its own and does not retry the bad one.
func TestRollback(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newFixture(t)
	good := f.commit(map[string]string{"deploy/web.yaml": deployment("web", 1, "")})
	st := f.syncTarget("web", func(st *convergev1.SyncTarget) {
		st.Spec.Timeout = &metav1.Duration{Duration: 30 * time.Second}
	})
	eventually(t, st, func(g Gomega, st *convergev1.SyncTarget) {
		g.Expect(st.Status.LastHealthyRevision).To(Equal(good))
	})

	bad := f.commit(map[string]string{
		"deploy/web.yaml":   deployment("web", 1, "no-such-node: anywhere"),
		"deploy/extra.yaml": configMap("extra", "added by the bad revision"),
	})
	eventually(t, st, func(g Gomega, st *convergev1.SyncTarget) {
		g.Expect(ready(st).Reason).To(Equal(convergev1.RolledBackReason), ready(st).Message)
		g.Expect(ready(st).Status).To(Equal(metav1.ConditionFalse))
		g.Expect(ready(st).Message).To(And(ContainSubstring(bad), ContainSubstring(good),
			ContainSubstring("Deployment "+f.app+"/web")))
		g.Expect(st.Status.LastAppliedRevision).To(Equal(good))
		g.Expect(st.Status.LastHealthyRevision).To(Equal(good))
		g.Expect(st.Status.History[0]).To(And(HaveField("Revision", bad), HaveField("Result", convergev1.SyncRolledBack)))
	})
	g := NewWithT(t)
	d := &appsv1.Deployment{}
	g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: f.app, Name: "web"}, d)).To(Succeed())
	g.Expect(d.Spec.Template.Spec.NodeSelector).To(BeEmpty(), "the Deployment spec is the good revision's again")
	gone(g, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: f.app, Name: "extra"}})

	events := &corev1.EventList{}
	g.Expect(k8s.List(ctx, events, client.InNamespace(f.ns))).To(Succeed())
	g.Expect(events.Items).To(ContainElement(And(
		HaveField("Reason", convergev1.RolledBackReason), HaveField("Message", ContainSubstring(bad)))))

	// Polls every second: the bad revision is not applied again.
	attempts := len(get(g, st).Status.History)
	g.Consistently(func(g Gomega) {
		latest := get(g, st)
		g.Expect(latest.Status.History).To(HaveLen(attempts))
		g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: f.app, Name: "web"}, d)).To(Succeed())
		g.Expect(d.Spec.Template.Spec.NodeSelector).To(BeEmpty())
	}).WithTimeout(4 * time.Second).WithPolling(500 * time.Millisecond).Should(Succeed())

	f.commit(map[string]string{"deploy/web.yaml": deployment("web", 2, "")})
	next := f.remove("deploy/extra.yaml")
	eventually(t, st, func(g Gomega, st *convergev1.SyncTarget) {
		g.Expect(ready(st).Status).To(Equal(metav1.ConditionTrue), ready(st).Message)
		g.Expect(st.Status.LastHealthyRevision).To(Equal(next))
	})
}

// TestInvalidCommit: an unparseable document, then a schema-invalid object; nothing of
// either commit reaches the cluster.
func TestInvalidCommit(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	good := f.commit(map[string]string{"deploy/a.yaml": configMap("a", "1")})
	st := f.syncTarget("cfg", nil)
	eventually(t, st, func(g Gomega, st *convergev1.SyncTarget) {
		g.Expect(st.Status.LastHealthyRevision).To(Equal(good))
	})

	broken := f.commit(map[string]string{
		"deploy/a.yaml": configMap("a", "2"),
		"deploy/b.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: b\n",
	})
	eventually(t, st, func(g Gomega, st *convergev1.SyncTarget) {
		g.Expect(ready(st).Reason).To(Equal(convergev1.BuildFailedReason))
		g.Expect(ready(st).Message).To(And(ContainSubstring(broken), ContainSubstring("b.yaml")))
		g.Expect(st.Status.LastAppliedRevision).To(Equal(good))
	})
	g := NewWithT(t)
	g.Expect(getCM(g, f.app, "a").Data["value"]).To(Equal("1"))

	invalid := f.commit(map[string]string{
		"deploy/a.yaml": configMap("a", "3"),
		"deploy/b.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: b}\ndata: {value: [1, 2]}\n",
		"deploy/c.yaml": configMap("c", "new"),
	})
	eventually(t, st, func(g Gomega, st *convergev1.SyncTarget) {
		g.Expect(st.Status.History[0].Revision).To(Equal(invalid))
		g.Expect(st.Status.History[0].Message).To(ContainSubstring("ConfigMap/" + f.app + "/b dry-run failed"))
		g.Expect(st.Status.LastAppliedRevision).To(Equal(good))
	})
	g.Expect(getCM(g, f.app, "a").Data["value"]).To(Equal("1"), "the valid object of the invalid commit was not applied")
	gone(g, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: f.app, Name: "c"}})
}

// TestCRDAndNamespaceInOneCommit: a CRD with its CR, and a new namespace with its contents.
func TestCRDAndNamespaceInOneCommit(t *testing.T) {
	f := newFixture(t)
	rev := f.commit(map[string]string{
		"deploy/crd.yaml": `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: widgets.example.com}
spec:
  group: example.com
  names: {kind: Widget, plural: widgets, singular: widget, listKind: WidgetList}
  scope: Namespaced
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        x-kubernetes-preserve-unknown-fields: true
`,
		"deploy/widget.yaml": "apiVersion: example.com/v1\nkind: Widget\nmetadata: {name: w, namespace: fresh-" + f.app + "}\nspec: {size: 3}\n",
		"deploy/ns.yaml":     "apiVersion: v1\nkind: Namespace\nmetadata: {name: fresh-" + f.app + "}\n",
		"deploy/cm.yaml":     "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: inside, namespace: fresh-" + f.app + "}\ndata: {a: b}\n",
	})
	st := f.syncTarget("platform", func(st *convergev1.SyncTarget) { st.Spec.TargetNamespace = "" })
	eventually(t, st, func(g Gomega, st *convergev1.SyncTarget) {
		g.Expect(ready(st).Status).To(Equal(metav1.ConditionTrue), ready(st).Message)
		g.Expect(st.Status.LastHealthyRevision).To(Equal(rev))
	})
	g := NewWithT(t)
	w := &unstructured.Unstructured{}
	w.SetAPIVersion("example.com/v1")
	w.SetKind("Widget")
	g.Expect(k8s.Get(context.Background(), client.ObjectKey{Namespace: "fresh-" + f.app, Name: "w"}, w)).To(Succeed())
	getCM(g, "fresh-"+f.app, "inside")
}

// TestSelfHeal edits and deletes managed objects by hand: both come back within 10 s,
// long before the next full sync.
func TestSelfHeal(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	rev := f.commit(map[string]string{
		"deploy/a.yaml": configMap("a", "from git"),
		"deploy/b.yaml": configMap("b", "from git"),
	})
	st := f.syncTarget("heal", func(st *convergev1.SyncTarget) {
		st.Spec.Source.Interval = &metav1.Duration{Duration: time.Hour} // no poll will help
	})
	eventually(t, st, func(g Gomega, st *convergev1.SyncTarget) {
		g.Expect(st.Status.LastHealthyRevision).To(Equal(rev))
	})
	g := NewWithT(t)
	a := getCM(g, f.app, "a")
	a.Data["value"] = "edited by hand"
	g.Expect(k8s.Update(ctx, a, client.FieldOwner("kubectl-edit"))).To(Succeed())
	g.Expect(k8s.Delete(ctx, getCM(g, f.app, "b"))).To(Succeed())

	g.Eventually(func(g Gomega) {
		g.Expect(getCM(g, f.app, "a").Data["value"]).To(Equal("from git"))
		g.Expect(getCM(g, f.app, "b").Data["value"]).To(Equal("from git"))
	}).WithTimeout(10 * time.Second).WithPolling(100 * time.Millisecond).Should(Succeed())
}

// TestFirstDeployFailureKeepsWhatWasApplied: with no healthy revision to go back to, a
// failing first revision is reported and what it applied stays.
func TestFirstDeployFailureKeepsWhatWasApplied(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	bad := f.commit(map[string]string{
		"deploy/web.yaml": deployment("web", 1, "no-such-node: anywhere"),
		"deploy/cm.yaml":  configMap("settings", "1"),
	})
	st := f.syncTarget("web", func(st *convergev1.SyncTarget) {
		st.Spec.Timeout = &metav1.Duration{Duration: 30 * time.Second}
	})
	eventually(t, st, func(g Gomega, st *convergev1.SyncTarget) {
		g.Expect(ready(st).Reason).To(Equal(convergev1.HealthCheckFailedReason), ready(st).Message)
		g.Expect(ready(st).Message).To(ContainSubstring("ProgressDeadlineExceeded"))
		g.Expect(st.Status.LastHealthyRevision).To(BeEmpty())
		g.Expect(st.Status.LastAppliedRevision).To(Equal(bad))
		g.Expect(st.Status.History[0].Result).To(Equal(convergev1.SyncFailed))
		g.Expect(st.Status.Inventory.Entries).To(HaveLen(2))
	})
	g := NewWithT(t)
	getCM(g, f.app, "settings")
	g.Expect(k8s.Get(context.Background(), client.ObjectKey{Namespace: f.app, Name: "web"}, &appsv1.Deployment{})).To(Succeed())
}
