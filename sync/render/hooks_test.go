package render

import (
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// argoHooks are argocd-example-apps-style manifests: a Helm pre-install Job named by
// generateName, Argo CD PreSync and SyncFail Jobs, and a Service with a sync wave.
const argoHooks = `apiVersion: batch/v1
kind: Job
metadata:
  generateName: upgrade-sql-schema
  annotations:
    helm.sh/hook: pre-install
spec:
  template:
    spec:
      restartPolicy: Never
      containers: [{name: migrate, image: postgres:16}]
---
apiVersion: batch/v1
kind: Job
metadata:
  generateName: schema-
  annotations:
    argocd.argoproj.io/hook: PreSync
    argocd.argoproj.io/hook-delete-policy: HookSucceeded
spec:
  template:
    spec:
      restartPolicy: Never
      containers: [{name: migrate, image: postgres:16}]
---
apiVersion: batch/v1
kind: Job
metadata:
  name: page-on-call
  annotations:
    argocd.argoproj.io/hook: SyncFail
spec:
  template:
    spec:
      restartPolicy: Never
      containers: [{name: page, image: curlimages/curl}]
---
apiVersion: v1
kind: Service
metadata:
  name: web
  annotations:
    argocd.argoproj.io/sync-wave: "2"
spec:
  ports: [{port: 80}]
`

// TestPlainAndKustomizedHooksAreNamedAndLabelled: hooks in plain YAML and in a
// kustomization render like a chart's: one named by generateName gets a name stable for
// its content, and every hook the label that finds what its runs made. (Kustomize itself
// refuses an object without metadata.name, so hooks in a kustomization are named.)
func TestPlainAndKustomizedHooksAreNamedAndLabelled(t *testing.T) {
	named := strings.NewReplacer("generateName: upgrade-sql-schema", "name: upgrade-sql-schema-1",
		"generateName: schema-", "name: schema-1").Replace(argoHooks)
	for _, tc := range []struct {
		name  string
		files map[string]string
	}{
		{"plain YAML", map[string]string{"hooks.yaml": argoHooks}},
		{"kustomization", map[string]string{"hooks.yaml": named, "kustomization.yaml": "resources: [hooks.yaml]\n"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			root := t.TempDir()
			writeFiles(t, root, "app", tc.files)
			render := func() map[string]*unstructured.Unstructured {
				res, err := Render(t.Context(), Options{Root: root, Path: "app", TargetNamespace: "shop",
					OwnerName: "web", OwnerNamespace: "team"})
				g.Expect(err).NotTo(HaveOccurred())
				out := map[string]*unstructured.Unstructured{}
				for _, o := range res.Objects {
					out[o.GetKind()+"/"+o.GetName()] = o
				}
				return out
			}
			objs := render()
			g.Expect(objs).To(HaveLen(4))
			var generated []string
			for key, o := range objs {
				if o.GetKind() == "Service" {
					g.Expect(o.GetLabels()).NotTo(HaveKey(HookLabel), "the Service is no hook")
					continue
				}
				g.Expect(o.GetLabels()).To(HaveKey(HookLabel), key)
				g.Expect(o.GetGenerateName()).To(BeEmpty(), key)
				g.Expect(o.GetNamespace()).To(Equal("shop"), key)
				if key != "Job/page-on-call" {
					generated = append(generated, key)
				}
			}
			g.Expect(generated).To(ConsistOf(HavePrefix("Job/upgrade-sql-schema"), HavePrefix("Job/schema-")))
			again := render()
			for _, key := range generated {
				g.Expect(again).To(HaveKey(key), "a generated name is stable for equal content")
			}
		})
	}
}
