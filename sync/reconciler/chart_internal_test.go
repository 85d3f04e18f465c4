package reconciler

import (
	"context"
	"testing"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
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
	g.Expect(stepNames(chart, &deployment{chart: true}, healthWait{})).To(Equal([]string{stepCRDs, stepPruneGuard, stepKeepCRDs,
		stepOwnership, stepPending, stepApply, stepHealth, stepReleaseSecrets}))
	g.Expect(stepNames(&convergev1.SyncTarget{}, &deployment{chart: true}, healthWait{})).
		To(Equal([]string{stepPruneGuard, stepKeepCRDs, stepOwnership, stepPending, stepApply, stepHealth}),
			"a chart directory in Git without spec.helm is a chart: its CRDs are kept")
	chart.Spec.Helm = &convergev1.HelmSpec{PruneCRDs: true}
	g.Expect(stepNames(chart, &deployment{chart: true}, healthWait{})).To(Equal(core), "pruneCRDs: a chart's CRDs are pruned as any object")
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
	ds := &deploying{stale: stale}
	for _, s := range ru.steps(&deployment{chart: true}, healthWait{}) {
		if s.name == stepKeepCRDs {
			if f := s.run(context.Background(), ds); f != nil {
				t.Fatal(f.err)
			}
		}
	}
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
