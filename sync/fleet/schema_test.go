package fleet

import (
	"context"
	"encoding/json"
	"testing"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/uuid"
	"sigs.k8s.io/controller-runtime/pkg/client"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
)

// Schema says of a SyncTarget what the API server says of its server-side apply: both take
// the valid ones, both refuse the invalid ones, for the same reason.
func TestSchemaAgreesWithTheAPIServer(t *testing.T) {
	ns := cluster(t)
	schema, err := builtinSchema()
	if err != nil {
		t.Fatal(err)
	}
	valid := func() map[string]any {
		return map[string]any{
			"source": map[string]any{"url": "https://git.example.com/app.git", "ref": map[string]any{"branch": "main"}, "interval": "5m"},
			"path":   "apps/web",
		}
	}
	cases := []struct {
		name   string
		mutate func(meta, spec map[string]any)
		// reason is in both refusals; empty: both take it.
		reason string
	}{
		{name: "valid", mutate: func(_, _ map[string]any) {}},
		{name: "valid chart", mutate: func(_, spec map[string]any) {
			delete(spec, "source")
			delete(spec, "path")
			spec["chart"] = map[string]any{"repository": "oci://registry.example.com/charts", "name": "web", "version": "1.x"}
			spec["helm"] = map[string]any{"releaseName": "web", "crds": "Skip"}
		}},
		{name: "path leaving the repository", reason: "must be a relative path inside the repository",
			mutate: func(_, spec map[string]any) { spec["path"] = "../escape" }},
		{name: "interval not a duration", reason: "must be a positive duration",
			mutate: func(_, spec map[string]any) { spec["source"].(map[string]any)["interval"] = "five minutes" }},
		{name: "two refs", reason: "exactly one of branch, tag, semver, commit or name",
			mutate: func(_, spec map[string]any) {
				spec["source"].(map[string]any)["ref"] = map[string]any{"branch": "main", "tag": "v1"}
			}},
		{name: "neither source nor chart", reason: "exactly one of source, chart and oci must be set",
			mutate: func(_, spec map[string]any) { delete(spec, "source") }},
		{name: "value outside its enum", reason: `spec.helm.crds`,
			mutate: func(_, spec map[string]any) { spec["helm"] = map[string]any{"crds": "Sometimes"} }},
		// A template's numbers are decoded as json.Number; the API server reads them as int64. The
		// soak found a set with maxDeletions: 2 in its template never converging (invariant 7).
		{name: "converges: a template's number for an int-or-string", mutate: func(_, spec map[string]any) { spec["maxDeletions"] = json.Number("2") }},
		{name: "an int-or-string as a count", mutate: func(_, spec map[string]any) { spec["maxDeletions"] = int64(2) }},
		{name: "an int-or-string as a percentage", mutate: func(_, spec map[string]any) { spec["maxDeletions"] = "50%" }},
		{name: "an int-or-string out of its rule", reason: "spec.maxDeletions",
			mutate: func(_, spec map[string]any) { spec["maxDeletions"] = json.Number("-1") }},
		{name: "wrong type", reason: "spec.prune",
			mutate: func(_, spec map[string]any) { spec["prune"] = "yes" }},
		{name: "unknown field", reason: "spec.bogus",
			mutate: func(_, spec map[string]any) { spec["bogus"] = true }},
		{name: "invalid label value", reason: "metadata.labels",
			mutate: func(meta, _ map[string]any) { meta["labels"] = map[string]any{"ring": "not a label value"} }},
	}
	ctx := context.Background()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			meta := map[string]any{"name": "schema-check", "namespace": ns}
			spec := valid()
			tc.mutate(meta, spec)
			u := &unstructured.Unstructured{Object: map[string]any{
				"apiVersion": convergev1.GroupVersion.String(), "kind": convergev1.SyncTargetKind,
				"metadata": meta, "spec": spec}}
			local := schema.Validate(ctx, u)
			server := k8s.Apply(ctx, client.ApplyConfigurationFromUnstructured(u.DeepCopy()),
				client.DryRunAll, client.FieldOwner(FieldOwner), client.ForceOwnership)
			if tc.reason == "" {
				g.Expect(server).NotTo(HaveOccurred(), "the API server")
				g.Expect(local).NotTo(HaveOccurred(), "Schema")
				return
			}
			g.Expect(server).To(MatchError(ContainSubstring(tc.reason)), "the API server")
			g.Expect(local).To(MatchError(ContainSubstring(tc.reason)), "Schema")
		})
	}
}

// A name the cache did not hold when the set validated, taken since by someone else's
// SyncTarget, is refused by the write, not taken over; a free one is written; one taken
// since by the set itself is written again.
func TestWriteDoesNotTakeOverANameTakenSince(t *testing.T) {
	ns := cluster(t)
	g := NewWithT(t)
	ctx := context.Background()
	schema, err := builtinSchema()
	g.Expect(err).NotTo(HaveOccurred())
	// Reads straight from the API server stand for a cache that has not seen the
	// SyncTarget yet: validate's lookup is the cache's, write's guard the API server's.
	r := &Reconciler{Client: k8s, APIReader: k8s, Schema: schema}
	set := &convergev1.SyncTargetSet{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "racer", UID: types.UID(uuid.NewUUID())}}
	target := func(name string) *Target {
		return &Target{Rendered: Rendered{Name: name, Labels: map[string]string{convergev1.SetLabel: set.Name}, Hash: "h",
			Spec: map[string]any{"source": map[string]any{"url": "https://git.example.com/set.git", "ref": map[string]any{"branch": "main"}}}}}
	}
	taken, free := target("taken-since"), target("free")
	g.Expect(r.validate(ctx, set, []*Target{taken, free})).To(Succeed())

	mine := &convergev1.SyncTarget{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "taken-since"},
		Spec: convergev1.SyncTargetSpec{Source: convergev1.GitSource{URL: "https://git.example.com/mine.git", Ref: convergev1.GitRef{Branch: "main"}}}}
	g.Expect(k8s.Create(ctx, mine)).To(Succeed())

	g.Expect(r.write(ctx, set, []*Target{free})).To(Succeed())
	g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "free"}, &convergev1.SyncTarget{})).To(Succeed())

	err = r.write(ctx, set, []*Target{taken})
	g.Expect(err).To(MatchError(errNotOurs))
	g.Expect(err).To(MatchError(ContainSubstring(`SyncTarget "taken-since"`)))
	g.Expect(k8s.Get(ctx, client.ObjectKeyFromObject(mine), mine)).To(Succeed())
	g.Expect(mine.Spec.Source.URL).To(Equal("https://git.example.com/mine.git"))
	g.Expect(mine.OwnerReferences).To(BeEmpty())
	g.Expect(mine.Labels).NotTo(HaveKey(convergev1.SetLabel))

	// Once the cache holds it, validate refuses it before anything is written.
	g.Expect(r.validate(ctx, set, []*Target{free, target("taken-since")})).To(MatchError(errNotOurs))

	// A name taken since by this set's own SyncTarget (one it wrote that the cache has not
	// seen yet) is applied again, as a SyncTarget the set owns: the set's one manager, so
	// that a field the template drops later is removed.
	again := target("free")
	again.Spec["prune"] = true
	g.Expect(r.write(ctx, set, []*Target{again})).To(Succeed())
	written := &convergev1.SyncTarget{}
	g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "free"}, written)).To(Succeed())
	g.Expect(written.Spec.Prune).To(BeTrue())
	g.Expect(written.ManagedFields).To(HaveLen(1))
	g.Expect(written.ManagedFields[0].Manager).To(Equal(FieldOwner))
	g.Expect(written.ManagedFields[0].Operation).To(Equal(metav1.ManagedFieldsOperationApply))
	dropped := target("free")
	dropped.Live = written
	g.Expect(r.write(ctx, set, []*Target{dropped})).To(Succeed())
	g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "free"}, written)).To(Succeed())
	g.Expect(written.Spec.Prune).To(BeFalse())
}
