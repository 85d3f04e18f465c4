package reconciler

import (
	"context"
	"errors"
	"fmt"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
	"github.com/converge-gitops/converge/sources"
	"github.com/converge-gitops/converge/sync/reconciler/reconcilertest"
)

// TestFlowVariablesChangeRedeploys: a change of a spec.postBuild variable deploys the same
// revision again, and its history entry says why.
func TestFlowVariablesChangeRedeploys(t *testing.T) {
	f := newFlow(t, rev1, substituteFromEnv)
	env := f.createEnv("prod")
	f.objects.Set(rev1, configMap("web", "${stage}"))
	f.reconcile()
	f.g.Expect(f.live("web")).To(Equal(map[string]any{"v": "prod"}))

	env.Data["stage"] = "staging"
	f.g.Expect(f.c.Update(context.Background(), env)).To(Succeed())
	st := f.reconcile()
	f.g.Expect(f.live("web")).To(Equal(map[string]any{"v": "staging"}))
	f.g.Expect(st.Status.History).To(HaveLen(2))
	f.g.Expect(st.Status.History[0].Revision).To(Equal(rev1))
	f.g.Expect(st.Status.History[0].Message).To(ContainSubstring("variables changed"))

	// Unchanged: nothing rendered again.
	renders := f.objects.Renders()
	f.reconcile()
	f.g.Expect(f.objects.Renders()).To(Equal(renders))
}

// TestFlowMissingVariablesReferent: a ConfigMap of spec.postBuild that does not exist
// stops the sync before anything is rendered, says which, and fails no revision.
func TestFlowMissingVariablesReferent(t *testing.T) {
	f := newFlow(t, rev1, substituteFromEnv)
	f.objects.Set(rev1, configMap("web", "${stage}"))
	_, _ = f.r.Reconcile(context.Background(), ctrl.Request{NamespacedName: f.key})
	st := &convergev1.SyncTarget{}
	f.g.Expect(f.c.Get(context.Background(), f.key, st)).To(Succeed())
	f.g.Expect(f.objects.Renders()).To(BeZero())
	f.g.Expect(f.live("web")).To(BeNil())
	f.g.Expect(st.Status.History).To(BeEmpty())
	ready := apimeta.FindStatusCondition(st.Status.Conditions, convergev1.ReadyCondition)
	f.g.Expect(ready).NotTo(BeNil())
	f.g.Expect(ready.Message).To(ContainSubstring("env"))
}

// TestFlowRefusesAnUnverifiedRevision: with spec.source.verify, a revision whose signature
// does not verify is refused before it is rendered — the cluster keeps the verified one,
// SourceVerified says why, and it is not tried again while the source points at it.
func TestFlowRefusesAnUnverifiedRevision(t *testing.T) {
	f := newFlow(t, rev1, func(st *convergev1.SyncTarget) {
		st.Spec.Source.Verify = &convergev1.VerifySpec{SecretRef: convergev1.LocalObjectReference{Name: "keys"}}
	})
	f.objects.Set(rev1, configMap("web", "one"))
	st := f.reconcile()
	verified := apimeta.FindStatusCondition(st.Status.Conditions, convergev1.SourceVerifiedCondition)
	f.g.Expect(verified).NotTo(BeNil())
	f.g.Expect(verified.Status).To(Equal(metav1.ConditionTrue))

	f.source.Push(rev2)
	f.objects.Set(rev2, configMap("web", "two"))
	f.source.Unverified(rev2, &sources.VerificationError{Object: "commit 2222222", Reason: "is not signed"})
	st = f.reconcile()
	f.g.Expect(f.live("web")).To(Equal(map[string]any{"v": "one"}), "nothing of the unverified revision is applied")
	f.g.Expect(readyReason(st)).To(Equal(convergev1.VerificationFailedReason))
	verified = apimeta.FindStatusCondition(st.Status.Conditions, convergev1.SourceVerifiedCondition)
	f.g.Expect(verified.Status).To(Equal(metav1.ConditionFalse))
	f.g.Expect(verified.Message).To(ContainSubstring("is not signed"))
	f.g.Expect(st.Status.History[0].Revision).To(Equal(rev2))
	f.g.Expect(st.Status.LastAppliedRevision).To(Equal(rev1))

	renders := f.objects.Renders()
	st = f.reconcile()
	f.g.Expect(f.objects.Renders()).To(Equal(renders))
	f.g.Expect(st.Status.History).To(HaveLen(2), "the refused revision is not tried again")
}

// deleteTarget deletes the flow's SyncTarget and reconciles its deletion.
func (f *flow) deleteTarget() {
	f.t.Helper()
	st := &convergev1.SyncTarget{}
	f.g.Expect(f.c.Get(context.Background(), f.key, st)).To(Succeed())
	f.g.Expect(f.c.Delete(context.Background(), st)).To(Succeed())
	_, err := f.r.Reconcile(context.Background(), ctrl.Request{NamespacedName: f.key})
	f.g.Expect(err).NotTo(HaveOccurred())
	err = f.c.Get(context.Background(), f.key, st)
	f.g.Expect(err).To(HaveOccurred(), "the finalizer let it go")
}

// TestFlowDeletionPrunes: a deleted SyncTarget with prune deletes its objects, and leaves
// an object it does not own.
func TestFlowDeletionPrunes(t *testing.T) {
	f := newFlow(t, rev1)
	f.objects.Set(rev1, configMap("web", "one"), configMap("api", "one"))
	st := f.reconcile()
	f.g.Expect(st.Finalizers).To(ContainElement(Finalizer))
	other := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "theirs"}, Data: map[string]string{"v": "x"}}
	f.g.Expect(f.c.Create(context.Background(), other)).To(Succeed())

	f.deleteTarget()
	f.g.Expect(f.live("web")).To(BeNil())
	f.g.Expect(f.live("api")).To(BeNil())
	f.g.Expect(f.c.Get(context.Background(), client.ObjectKeyFromObject(other), &corev1.ConfigMap{})).To(Succeed(),
		"what it does not own stays")
}

// TestFlowDeletionWithoutPruneOrphans: without prune, a deleted SyncTarget leaves its
// objects in place.
func TestFlowDeletionWithoutPruneOrphans(t *testing.T) {
	f := newFlow(t, rev1, func(st *convergev1.SyncTarget) { st.Spec.Prune = false })
	f.objects.Set(rev1, configMap("web", "one"))
	f.reconcile()
	f.deleteTarget()
	f.g.Expect(f.live("web")).To(Equal(map[string]any{"v": "one"}))
}

// TestFlowRemoteTargetDeletedAfterItsSecret: a remote SyncTarget deleted after its
// kubeconfig Secret (a namespace deleted whole) leaves its objects there, says so, and
// does not hold its deletion.
func TestFlowRemoteTargetDeletedAfterItsSecret(t *testing.T) {
	f := newRemoteFlow(t, rev1)
	f.objects.Set(rev1, configMap("web", "one"))
	f.reconcile()
	f.g.Expect(f.remoteLive("web")).To(Equal(map[string]any{"v": "one"}))

	st := &convergev1.SyncTarget{}
	f.g.Expect(f.c.Get(context.Background(), f.key, st)).To(Succeed())
	st.Spec.KubeConfig.SecretRef.Name = "gone-kc" // no such Secret any more
	f.g.Expect(f.c.Update(context.Background(), st)).To(Succeed())
	f.deleteTarget()
	f.g.Expect(f.remoteLive("web")).To(Equal(map[string]any{"v": "one"}), "left in place")
}

// TestFlowRemoteTargetDeletionPrunesThere: a remote SyncTarget's deletion prunes its
// objects on its cluster.
func TestFlowRemoteTargetDeletionPrunesThere(t *testing.T) {
	f := newRemoteFlow(t, rev1)
	f.objects.Set(rev1, configMap("web", "one"))
	f.reconcile()
	f.deleteTarget()
	f.g.Expect(f.remoteLive("web")).To(BeNil())
}

// TestFlowChartStepsCRDsAndReleaseSecrets: a chart under the Create CRD policy leaves an
// existing CRD as it is (never changed, never in its inventory), and with
// removeReleaseSecrets deletes the Secrets Helm kept its release in once it is healthy —
// only those, in the release's namespace.
func TestFlowChartStepsCRDsAndReleaseSecrets(t *testing.T) {
	f := newFlow(t, rev1, func(st *convergev1.SyncTarget) {
		st.Spec.Helm = &convergev1.HelmSpec{CRDs: convergev1.CRDsCreate, RemoveReleaseSecrets: true}
	})
	crd := func(desc string) *unstructured.Unstructured {
		o := reconcilertest.Object("", "", "gadgets.example.com", nil)
		o.SetAPIVersion("apiextensions.k8s.io/v1")
		o.SetKind("CustomResourceDefinition")
		o.Object["spec"] = map[string]any{"description": desc}
		delete(o.Object, "data")
		return o
	}
	existing := crd("installed by hand")
	f.g.Expect(f.c.Create(context.Background(), existing)).To(Succeed())
	release := func(name, typ string) *corev1.Secret {
		return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: name,
			Labels: map[string]string{"owner": "helm", "name": "app"}}, Type: corev1.SecretType(typ)}
	}
	f.g.Expect(f.c.Create(context.Background(), release("sh.helm.release.v1.app.v1", helmReleaseSecretType))).To(Succeed())
	f.g.Expect(f.c.Create(context.Background(), release("not-a-release", "Opaque"))).To(Succeed())
	f.objects.Set(rev1, crd("from the chart"), configMap("web", "one"))

	st := f.reconcile()
	f.g.Expect(newestResult(st)).To(Equal(convergev1.SyncSucceeded), "%v", st.Status.Conditions)
	live := &unstructured.Unstructured{}
	live.SetGroupVersionKind(existing.GroupVersionKind())
	f.g.Expect(f.c.Get(context.Background(), client.ObjectKey{Name: "gadgets.example.com"}, live)).To(Succeed())
	f.g.Expect(live.Object["spec"]).To(Equal(map[string]any{"description": "installed by hand"}), "an existing CRD is not changed")
	f.g.Expect(st.Status.Inventory.Entries).To(HaveLen(1), "only the ConfigMap is the chart's")
	f.g.Expect(f.c.Get(context.Background(), client.ObjectKey{Namespace: "shop", Name: "sh.helm.release.v1.app.v1"}, &corev1.Secret{})).
		NotTo(Succeed(), "Helm's release Secret is removed")
	f.g.Expect(f.c.Get(context.Background(), client.ObjectKey{Namespace: "shop", Name: "not-a-release"}, &corev1.Secret{})).
		To(Succeed(), "a Secret of another type stays")
}

// TestFlowBrokenCommitAfterAnInterruptedWaitSettles: a health wait cut short (the daemon
// stopped, or lost its lease) leaves a revision applied that never became healthy; when the
// next commit fails to render, the last healthy revision is applied again in its place.
func TestFlowBrokenCommitAfterAnInterruptedWaitSettles(t *testing.T) {
	f := newFlow(t, rev1)
	f.objects.Set(rev1, configMap("web", "one"))
	f.reconcile()

	f.source.Push(rev2)
	f.objects.Set(rev2, configMap("web", "two"), configMap("extra", "two"))
	ctx, cancel := context.WithCancel(context.Background())
	f.health.Hook = func(context.Context, []*unstructured.Unstructured) error {
		cancel() // the daemon stops in the wait
		return ctx.Err()
	}
	_, err := f.r.Reconcile(ctx, ctrl.Request{NamespacedName: f.key})
	f.g.Expect(err).To(MatchError(ContainSubstring("health check interrupted")))
	f.health.Hook = nil
	st := &convergev1.SyncTarget{}
	f.g.Expect(f.c.Get(context.Background(), f.key, st)).To(Succeed())
	f.g.Expect(st.Status.LastAppliedRevision).To(Equal(rev2))
	f.g.Expect(st.Status.LastHealthyRevision).To(Equal(rev1))
	f.g.Expect(f.live("web")).To(Equal(map[string]any{"v": "two"}))

	f.source.Push(rev3)
	f.objects.Break(rev3, errors.New("deploy/web.yaml: invalid document"))
	st = f.reconcile()
	f.g.Expect(readyReason(st)).To(Equal(convergev1.BuildFailedReason))
	f.g.Expect(st.Status.History[0].Message).To(ContainSubstring(rev1 + " applied again in place of " + rev2))
	f.g.Expect(st.Status.LastAppliedRevision).To(Equal(rev1))
	f.g.Expect(f.live("web")).To(Equal(map[string]any{"v": "one"}))
	f.g.Expect(f.live("extra")).To(BeNil(), "what the never-healthy revision added is pruned")
}

// TestFlowApplyFailingMidwayIsRolledBack: an apply refused after it created some objects
// lists them in the inventory, so that the rollback deletes them.
func TestFlowApplyFailingMidwayIsRolledBack(t *testing.T) {
	f := newFlow(t, rev1)
	f.objects.Set(rev1, configMap("web", "one"))
	f.reconcile()

	// The API refuses the third object (an admission webhook would).
	f.r.Clusters = reconcilertest.NewClusters(interceptor.NewClient(f.c.(client.WithWatch), interceptor.Funcs{
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			if obj.GetName() == "refused" {
				return apierrors.NewForbidden(schema.GroupResource{Resource: "configmaps"}, "refused", errors.New("denied by policy"))
			}
			return c.Create(ctx, obj, opts...)
		}}))
	f.source.Push(rev2)
	f.objects.Set(rev2, configMap("web", "one"), configMap("added", "two"), configMap("refused", "two"))
	st := f.reconcile()
	f.g.Expect(newestResult(st)).To(Equal(convergev1.SyncRolledBack), "%v", st.Status.Conditions)
	f.g.Expect(f.live("added")).To(BeNil(), "created before the apply failed, deleted by the rollback")
	f.g.Expect(f.live("web")).To(Equal(map[string]any{"v": "one"}))
	f.g.Expect(st.Status.Inventory.Entries).To(HaveLen(1))
}

// TestFlowChartCreateOnlyCRDsStayAcrossRevisionsWithPruneCRDs: under the Create CRD
// policy with prune and pruneCRDs, the CRD the chart created stays in the inventory of the
// revisions after it (which do not apply it), so it is never pruned while the chart still
// has it; once a revision drops it, it is pruned.
func TestFlowChartCreateOnlyCRDsStayAcrossRevisionsWithPruneCRDs(t *testing.T) {
	f := newFlow(t, rev1, func(st *convergev1.SyncTarget) {
		st.Spec.Helm = &convergev1.HelmSpec{CRDs: convergev1.CRDsCreate, PruneCRDs: true}
	})
	crd := reconcilertest.Object("", "", "gadgets.example.com", nil)
	crd.SetAPIVersion("apiextensions.k8s.io/v1")
	crd.SetKind("CustomResourceDefinition")
	crd.Object["spec"] = map[string]any{"group": "example.com"}
	delete(crd.Object, "data")
	live := func() error {
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(crd.GroupVersionKind())
		return f.c.Get(context.Background(), client.ObjectKey{Name: "gadgets.example.com"}, u)
	}
	crdID := "_gadgets.example.com_apiextensions.k8s.io_CustomResourceDefinition"
	f.objects.Set(rev1, crd, configMap("web", "one"))
	st := f.reconcile()
	f.g.Expect(newestResult(st)).To(Equal(convergev1.SyncSucceeded), "%v", st.Status.Conditions)
	f.g.Expect(live()).To(Succeed(), "the CRD is created")

	for i, rev := range []string{rev2, rev3} {
		f.source.Push(rev)
		f.objects.Set(rev, crd, configMap("web", fmt.Sprint(i)))
		st = f.reconcile()
		f.g.Expect(st.Status.LastHealthyRevision).To(Equal(rev), "%v", st.Status.Conditions)
		f.g.Expect(live()).To(Succeed(), "the chart's CRD is not pruned by a revision that still has it")
		f.g.Expect(st.Status.Inventory.Entries).To(ContainElement(HaveField("ID", crdID)))
	}

	const rev4 = "main@sha1:4444444444444444444444444444444444444444"
	f.source.Push(rev4)
	f.objects.Set(rev4, configMap("web", "four"))
	st = f.reconcile()
	f.g.Expect(st.Status.LastHealthyRevision).To(Equal(rev4), "%v", st.Status.Conditions)
	f.g.Expect(apierrors.IsNotFound(live())).To(BeTrue(), "pruneCRDs: a CRD the chart no longer has is pruned")
}
