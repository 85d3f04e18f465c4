package reconciler

import (
	"testing"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
	"github.com/converge-gitops/converge/sync/apply"
	"github.com/converge-gitops/converge/sync/hooks"
)

// stepNames are the names of the steps a deploy of d for w runs for st.
func stepNames(st *convergev1.SyncTarget, d *deployment, w healthWait) []string {
	ru := &run{r: &Reconciler{}, st: st}
	var out []string
	for _, s := range ru.steps(d, w) {
		out = append(out, s.name)
	}
	return out
}

// TestDeploySteps: the steps of a deploy are chosen once from the SyncTarget and what its
// revision rendered to: hooks add theirs around the apply, a chart its CRD policy and the
// removal of Helm's release Secrets; plain YAML has none of them.
func TestDeploySteps(t *testing.T) {
	g := NewWithT(t)
	core := []string{stepPruneGuard, stepOwnership, stepPending, stepApply, stepHealth}
	yaml := &convergev1.SyncTarget{}
	g.Expect(stepNames(yaml, &deployment{}, healthWait{})).To(Equal(core))

	hook, _ := hooks.Parse(&unstructured.Unstructured{Object: map[string]any{"apiVersion": "batch/v1", "kind": "Job",
		"metadata": map[string]any{"name": "migrate", "annotations": map[string]any{"helm.sh/hook": "pre-install,pre-upgrade"}}}})
	g.Expect(stepNames(yaml, &deployment{hooks: []hooks.Hook{hook}}, healthWait{})).
		To(Equal([]string{stepPruneGuard, stepOwnership, stepPending, stepPreHooks, stepApply, stepHealth}),
			"a pre-install hook on the first deploy, no post hooks")
	g.Expect(stepNames(yaml, &deployment{hooks: []hooks.Hook{hook}}, healthWait{failed: "main@sha1:2"})).
		To(Equal(core), "a rollback runs pre-rollback hooks, which this hook is not")
	argo, _ := hooks.Parse(&unstructured.Unstructured{Object: map[string]any{"apiVersion": "batch/v1", "kind": "Job",
		"metadata": map[string]any{"name": "seed", "annotations": map[string]any{"argocd.argoproj.io/hook": "Sync"}}}})
	g.Expect(stepNames(yaml, &deployment{hooks: []hooks.Hook{argo}}, healthWait{failed: "main@sha1:2"})).
		To(Equal([]string{stepPruneGuard, stepOwnership, stepPending, stepApply, stepSyncHooks, stepHealth}),
			"Argo CD's Sync hooks run right after the apply, also in a rollback")

	chart := &convergev1.SyncTarget{Spec: convergev1.SyncTargetSpec{Helm: &convergev1.HelmSpec{CRDs: convergev1.CRDsCreate,
		RemoveReleaseSecrets: true}}}
	g.Expect(stepNames(chart, &deployment{chart: true}, healthWait{})).To(Equal([]string{stepCreateOnly, stepPruneGuard,
		stepOwnership, stepPending, stepApply, stepHealth, stepReleaseSecrets}))
	chart.Spec.Helm = &convergev1.HelmSpec{PruneCRDs: true}
	g.Expect(stepNames(chart, &deployment{chart: true}, healthWait{})).To(Equal(core), "the other CRD policies are apply policies")
}

// TestChartCRDPoliciesAreApplyPolicies: a chart's CRDs are created only under the Create
// policy and kept on prune unless pruneCRDs; no other object, and nothing of plain YAML,
// gets a policy from the SyncTarget.
func TestChartCRDPoliciesAreApplyPolicies(t *testing.T) {
	g := NewWithT(t)
	crd := &unstructured.Unstructured{}
	crd.SetAPIVersion("apiextensions.k8s.io/v1")
	crd.SetKind("CustomResourceDefinition")
	cm := &unstructured.Unstructured{}
	cm.SetAPIVersion("v1")
	cm.SetKind("ConfigMap")
	for _, tc := range []struct {
		helm  *convergev1.HelmSpec
		chart bool
		want  apply.ObjectPolicy
	}{
		{nil, true, apply.ObjectPolicy{KeepOnPrune: true}},
		{&convergev1.HelmSpec{CRDs: convergev1.CRDsCreate}, true, apply.ObjectPolicy{IfNotPresent: true, KeepOnPrune: true}},
		{&convergev1.HelmSpec{CRDs: convergev1.CRDsCreate, PruneCRDs: true}, true, apply.ObjectPolicy{IfNotPresent: true}},
		{&convergev1.HelmSpec{PruneCRDs: true}, true, apply.ObjectPolicy{}},
		{nil, false, apply.ObjectPolicy{}},
	} {
		ru := &run{r: &Reconciler{}, st: &convergev1.SyncTarget{Spec: convergev1.SyncTargetSpec{Helm: tc.helm}}}
		p := ru.objectPolicy(tc.chart)
		g.Expect(p.Of(crd)).To(Equal(tc.want), "%+v", tc.helm)
		g.Expect(p.Of(cm)).To(Equal(apply.ObjectPolicy{}))
	}
}

// TestChartCRDsAreNotPrunedUnlessAsked: a CRD that left a chart stays (deleting it would
// delete every object of its kind); other objects are pruned.
func TestChartCRDsAreNotPrunedUnlessAsked(t *testing.T) {
	stale := []convergev1.InventoryEntry{
		{ID: "_gadgets.example.com_apiextensions.k8s.io_CustomResourceDefinition", Version: "v1"},
		{ID: "shop_web__ConfigMap", Version: "v1"},
	}
	chart := &convergev1.SyncTarget{Spec: convergev1.SyncTargetSpec{Helm: &convergev1.HelmSpec{}}}
	ru := &run{r: &Reconciler{}, st: chart}
	ds := &deploying{d: &deployment{chart: true}, stale: stale}
	ds.stale = ru.objectPolicy(ds.d.chart).Prunable(ds.stale)
	if len(ds.stale) != 1 || ds.stale[0].ID != "shop_web__ConfigMap" {
		t.Fatalf("a chart prunes %v, want the ConfigMap only", ds.stale)
	}
}

func TestHookEventFollowsTheHistory(t *testing.T) {
	st := &convergev1.SyncTarget{}
	if e := hookEvent("pre", st, healthWait{}); e != "pre-install" {
		t.Fatalf("first deploy: %s", e)
	}
	st.Status.LastAppliedRevision = "main@sha1:1"
	if e := hookEvent("post", st, healthWait{}); e != "post-upgrade" {
		t.Fatalf("later deploy: %s", e)
	}
	if e := hookEvent("pre", st, healthWait{failed: "main@sha1:2"}); e != "pre-rollback" {
		t.Fatalf("rollback: %s", e)
	}
}
