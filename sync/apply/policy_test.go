package apply

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
)

func TestPolicyReadsConvergeAndFluxAnnotations(t *testing.T) {
	tests := []struct {
		annotations map[string]string
		want        ObjectPolicy
	}{
		{annotations: nil, want: ObjectPolicy{}},
		{annotations: map[string]string{"converge.dev/reconcile": "disabled"}, want: ObjectPolicy{Skip: true}},
		{annotations: map[string]string{"kustomize.toolkit.fluxcd.io/reconcile": "disabled"}, want: ObjectPolicy{Skip: true}},
		{annotations: map[string]string{"converge.dev/prune": "disabled"}, want: ObjectPolicy{KeepOnPrune: true}},
		{annotations: map[string]string{"kustomize.toolkit.fluxcd.io/prune": "disabled"}, want: ObjectPolicy{KeepOnPrune: true}},
		{annotations: map[string]string{"kustomize.toolkit.fluxcd.io/ssa": "Ignore"}, want: ObjectPolicy{Skip: true, KeepOnPrune: true}},
		{annotations: map[string]string{"kustomize.toolkit.fluxcd.io/ssa": "IfNotPresent"}, want: ObjectPolicy{IfNotPresent: true}},
		{annotations: map[string]string{"kustomize.toolkit.fluxcd.io/ssa": "merge"}, want: ObjectPolicy{Merge: true}},
		{annotations: map[string]string{"converge.dev/force": "enabled"}, want: ObjectPolicy{Force: true}},
		{annotations: map[string]string{"kustomize.toolkit.fluxcd.io/force": "Enabled"}, want: ObjectPolicy{Force: true}},
		{annotations: map[string]string{"kustomize.toolkit.fluxcd.io/prune": "enabled", "kustomize.toolkit.fluxcd.io/ssa": "Override"}, want: ObjectPolicy{}},
	}
	for _, tt := range tests {
		g := NewWithT(t)
		o := obj("v1", "ConfigMap", "shop", "c")
		o.SetAnnotations(tt.annotations)
		g.Expect(Policy(o)).To(Equal(tt.want), "%v", tt.annotations)
	}
	NewWithT(t).Expect(Policy(nil)).To(Equal(ObjectPolicy{}))
}

// configMap is a ConfigMap of ns with converge's owner labels, data and annotations.
func configMap(t *testing.T, ns, name string, data, annotations map[string]string) *unstructured.Unstructured {
	u := withOwner(parse(t, `{apiVersion: v1, kind: ConfigMap, metadata: {name: `+name+`, namespace: `+ns+`, labels: {app: web}}}`))
	d := map[string]any{}
	for k, v := range data {
		d[k] = v
	}
	u.Object["data"] = d
	u.SetAnnotations(annotations)
	return u
}

// TestApplyHonoursFluxAnnotations: objects written for Flux keep their meaning under
// converge's apply and prune.
func TestApplyHonoursFluxAnnotations(t *testing.T) {
	g := NewWithT(t)
	ctx := t.Context()
	c, ns := clusterClient(t, "flux-policy")
	apply := func(objects ...*unstructured.Unstructured) {
		t.Helper()
		_, err := Applier{}.Apply(ctx, c, copies(objects), nil, time.Minute, Options{})
		g.Expect(err).NotTo(HaveOccurred())
	}
	data := func(o *unstructured.Unstructured) any { return get(t, c, o).Object["data"] }
	blue, green := map[string]string{"mode": "blue"}, map[string]string{"mode": "green"}

	// ssa: IfNotPresent: created when missing, never updated.
	once := configMap(t, ns, "once", blue, map[string]string{FluxSSAAnnotation: FluxSSAIfNotPresent})
	apply(once)
	g.Expect(data(once)).To(Equal(map[string]any{"mode": "blue"}))
	apply(configMap(t, ns, "once", green, once.GetAnnotations()))
	g.Expect(data(once)).To(Equal(map[string]any{"mode": "blue"}), "not updated")

	// reconcile: disabled on the live object: left alone.
	frozen := configMap(t, ns, "frozen", blue, map[string]string{FluxReconcileAnnotation: "disabled"})
	g.Expect(c.Create(ctx, frozen.DeepCopy())).To(Succeed())
	apply(configMap(t, ns, "frozen", green, nil))
	g.Expect(data(frozen)).To(Equal(map[string]any{"mode": "blue"}), "not applied")

	// ssa: Ignore in Git: never applied.
	ignored := configMap(t, ns, "ignored", blue, map[string]string{FluxSSAAnnotation: FluxSSAIgnore})
	apply(ignored)
	err := c.Get(ctx, client.ObjectKeyFromObject(ignored), &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "ConfigMap"}})
	g.Expect(err).To(HaveOccurred(), "not created")

	// Prune keeps what Flux's prune: disabled or ssa: Ignore and Helm's resource-policy: keep
	// keep, and deletes the rest.
	owner := client.ObjectKey{Namespace: "team", Name: "app"}
	var stale []convergev1.InventoryEntry
	for name, a := range map[string]map[string]string{
		"keep-prune": {FluxPruneAnnotation: "disabled"}, "keep-ignore": {FluxSSAAnnotation: "Ignore"}, "gone": nil,
		"keep-helm": {convergev1.HelmResourcePolicyAnnotation: convergev1.HelmKeepValue},
	} {
		o := configMap(t, ns, name, blue, a)
		g.Expect(c.Create(ctx, o.DeepCopy())).To(Succeed())
		stale = append(stale, convergev1.InventoryEntry{ID: ObjectID(o), Version: "v1"})
	}
	res, err := Prune(ctx, c, owner, stale)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(res.Deleted).To(ConsistOf(ContainSubstring("/gone")))
	g.Expect(res.Skipped).To(ConsistOf(ContainSubstring("keep-prune (prune disabled)"), ContainSubstring("keep-ignore (prune disabled)"),
		ContainSubstring("keep-helm (prune disabled)")))
}

// TestApplyFluxForceRecreatesOnlyThatObject: an immutable field's change is applied by
// recreating the object that carries Flux's force: enabled, and only that one.
func TestApplyFluxForceRecreatesOnlyThatObject(t *testing.T) {
	g := NewWithT(t)
	ctx := t.Context()
	c, ns := clusterClient(t, "flux-force")
	immutable := func(name, mode string, annotations map[string]string) *unstructured.Unstructured {
		u := configMap(t, ns, name, map[string]string{"mode": mode}, annotations)
		u.Object["immutable"] = true
		return u
	}
	forced := map[string]string{FluxForceAnnotation: "enabled"}
	_, err := Applier{}.Apply(ctx, c, []*unstructured.Unstructured{immutable("a", "blue", forced), immutable("b", "blue", nil)}, nil, time.Minute, Options{})
	g.Expect(err).NotTo(HaveOccurred())
	a, b := get(t, c, immutable("a", "", nil)), get(t, c, immutable("b", "", nil))

	res, err := Applier{}.Apply(ctx, c, []*unstructured.Unstructured{immutable("a", "green", forced), immutable("b", "blue", nil)}, nil, time.Minute, Options{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(res.Created).To(Equal(1), "a recreated")
	a2, b2 := get(t, c, a), get(t, c, b)
	g.Expect(a2.GetUID()).NotTo(Equal(a.GetUID()))
	g.Expect(a2.Object["data"]).To(Equal(map[string]any{"mode": "green"}))
	g.Expect(b2.GetUID()).To(Equal(b.GetUID()), "only the forced object is recreated")

	// Without force, the same change is an error and the object stays.
	_, err = Applier{}.Apply(ctx, c, []*unstructured.Unstructured{immutable("b", "green", nil)}, nil, time.Minute, Options{})
	g.Expect(err).To(HaveOccurred())
	g.Expect(get(t, c, b).GetUID()).To(Equal(b.GetUID()))
}

// TestApplyHonoursTheSyncTargetsPolicy: a policy the SyncTarget sets (a chart's CRD
// policy) works as the annotations do: created when missing and never updated, left out of
// the set when it exists and is not the SyncTarget's, kept on prune.
func TestApplyHonoursTheSyncTargetsPolicy(t *testing.T) {
	g := NewWithT(t)
	ctx := t.Context()
	c, ns := clusterClient(t, "target-policy")
	owner := client.ObjectKey{Namespace: "team", Name: "app"}
	onlyOnce := PolicyFunc(func(o *unstructured.Unstructured) ObjectPolicy {
		return ObjectPolicy{IfNotPresent: o.GetName() != "free", KeepOnPrune: o.GetName() == "once"}
	})
	data := func(o *unstructured.Unstructured) any { return get(t, c, o).Object["data"] }
	blue, green := map[string]string{"mode": "blue"}, map[string]string{"mode": "green"}
	owned := func(o *unstructured.Unstructured) *unstructured.Unstructured {
		o.SetLabels(map[string]string{convergev1.NameLabel: owner.Name, convergev1.NamespaceLabel: owner.Namespace})
		return o
	}

	once := owned(configMap(t, ns, "once", blue, nil))
	_, err := Applier{}.Apply(ctx, c, copies([]*unstructured.Unstructured{once}), nil, time.Minute, Options{Policy: onlyOnce})
	g.Expect(err).NotTo(HaveOccurred())
	_, err = Applier{}.Apply(ctx, c, []*unstructured.Unstructured{owned(configMap(t, ns, "once", green, nil))}, nil, time.Minute,
		Options{Policy: onlyOnce})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(data(once)).To(Equal(map[string]any{"mode": "blue"}), "created, then not updated")

	theirs := configMap(t, ns, "theirs", blue, nil)
	theirs.SetLabels(map[string]string{convergev1.NameLabel: "other", convergev1.NamespaceLabel: "team"})
	g.Expect(c.Create(ctx, theirs.DeepCopy())).To(Succeed())
	set, kept, err := onlyOnce.CreateOnly(ctx, c, owner, []*unstructured.Unstructured{
		owned(configMap(t, ns, "once", green, nil)), owned(configMap(t, ns, "theirs", green, nil)),
		owned(configMap(t, ns, "new", green, nil)), owned(configMap(t, ns, "free", green, nil))})
	g.Expect(err).NotTo(HaveOccurred())
	name := func(o *unstructured.Unstructured) string { return o.GetName() }
	g.Expect(set).To(HaveExactElements(WithTransform(name, Equal("new")), WithTransform(name, Equal("free"))))
	g.Expect(kept).To(HaveExactElements(WithTransform(name, Equal("once"))), "the SyncTarget's own stays in its inventory")

	stale := []convergev1.InventoryEntry{{ID: ObjectID(once), Version: "v1"}, {ID: ObjectID(configMap(t, ns, "free", nil, nil)), Version: "v1"}}
	g.Expect(onlyOnce.Prunable(stale)).To(HaveExactElements(HaveField("ID", ContainSubstring("_free_"))))
}
