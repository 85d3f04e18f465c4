package fleet

import (
	"context"
	"testing"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
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
		{name: "neither source nor chart", reason: "exactly one of source and chart must be set",
			mutate: func(_, spec map[string]any) { delete(spec, "source") }},
		{name: "value outside its enum", reason: `spec.helm.crds`,
			mutate: func(_, spec map[string]any) { spec["helm"] = map[string]any{"crds": "Sometimes"} }},
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
