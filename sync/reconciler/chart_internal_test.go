package reconciler

import (
	"testing"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
)

// TestChartCRDsAreNotPrunedUnlessAsked: a CRD that left a chart stays (deleting it would
// delete every object of its kind) unless spec.helm.pruneCRDs; other objects are pruned,
// and a YAML target prunes CRDs as before.
func TestChartCRDsAreNotPrunedUnlessAsked(t *testing.T) {
	stale := []convergev1.InventoryEntry{
		{ID: "_gadgets.example.com_apiextensions.k8s.io_CustomResourceDefinition", Version: "v1"},
		{ID: "shop_web__ConfigMap", Version: "v1"},
	}
	ids := func(es []convergev1.InventoryEntry) []string {
		var out []string
		for _, e := range es {
			out = append(out, e.ID)
		}
		return out
	}
	chart := &convergev1.SyncTarget{Spec: convergev1.SyncTargetSpec{Helm: &convergev1.HelmSpec{}}}
	if got := ids(keepChartCRDs(chart, stale)); len(got) != 1 || got[0] != "shop_web__ConfigMap" {
		t.Fatalf("a chart prunes %v, want the ConfigMap only", got)
	}
	chart.Spec.Helm.PruneCRDs = true
	if got := keepChartCRDs(chart, stale); len(got) != 2 {
		t.Fatalf("pruneCRDs prunes %v, want both", ids(got))
	}
	yaml := &convergev1.SyncTarget{}
	if got := keepChartCRDs(yaml, stale); len(got) != 2 {
		t.Fatalf("a YAML target prunes %v, want both", ids(got))
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
