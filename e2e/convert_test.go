package e2e

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// TestConvertFluxRepository: a Flux repository (a GitRepository and two Kustomizations, one
// depending on the other, with post-build variables) converted with `converge convert`,
// applied, ends with the objects Flux would have made: the variables substituted and typed
// (replicas a number), the dependency waited for, and a Deployment first created by
// kustomize-controller taken over in place.
func TestConvertFluxRepository(t *testing.T) {
	run(t, 43, "Flux repository converted", parallel, func(s *scenario) {
		g := NewWithT(t)
		r := s.repo("flux")
		rev := r.commit(map[string]string{
			"infrastructure/namespace-config.yaml": configMap("platform", "ready"),
			"apps/kustomization.yaml":              "resources: [web.yaml]\n",
			"apps/web.yaml": deploymentYAML("web", "${replicas}") + "---\n" +
				"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: web-settings\ndata:\n  region: ${region}\n  quoted: \"${replicas}\"\n",
		})
		flux := fmt.Sprintf(`apiVersion: source.toolkit.fluxcd.io/v1
kind: GitRepository
metadata: {name: platform, namespace: %[1]s}
spec:
  interval: 2s
  url: %[2]s
  ref: {branch: main}
  secretRef: {name: %[3]s}
---
apiVersion: kustomize.toolkit.fluxcd.io/v1
kind: Kustomization
metadata: {name: infra, namespace: %[1]s}
spec:
  interval: 10m
  path: ./infrastructure
  prune: true
  sourceRef: {kind: GitRepository, name: platform}
  targetNamespace: %[4]s
---
apiVersion: kustomize.toolkit.fluxcd.io/v1
kind: Kustomization
metadata: {name: apps, namespace: %[1]s}
spec:
  interval: 10m
  dependsOn: [{name: infra}]
  path: ./apps
  prune: true
  wait: true
  timeout: 1m
  sourceRef: {kind: GitRepository, name: platform}
  targetNamespace: %[4]s
  postBuild:
    substitute: {replicas: "2", region: eu-west-1}
`, s.ns, r.httpURL(), httpSecret, s.app)
		dir := t.TempDir()
		g.Expect(os.WriteFile(filepath.Join(dir, "flux.yaml"), []byte(flux), 0o644)).To(Succeed())

		// The Deployment as kustomize-controller left it, with a field Git no longer sets.
		live := &appsv1.Deployment{}
		g.Expect(yaml.NewYAMLOrJSONDecoder(bytes.NewBufferString(deploymentYAML("web", "1")), 4096).Decode(live)).To(Succeed())
		live.Namespace = s.app
		live.Labels = map[string]string{"kustomize.toolkit.fluxcd.io/name": "apps", "legacy": "true"}
		g.Expect(suite.k8s.Create(t.Context(), live, fieldOwner("kustomize-controller"))).To(Succeed())

		out := s.cli(60*time.Second, "convert", dir)
		g.Expect(out.code).To(Equal(0), out.String())
		targets := syncTargetsOf(g, out.stdout)
		g.Expect(targets).To(HaveLen(2))
		for _, st := range targets {
			s.create(st)
			t.Cleanup(func() { _ = suite.k8s.Delete(t.Context(), st) })
		}
		for _, st := range targets {
			s.waitHealthy(st, rev, 120*time.Second)
		}
		object(g, s.app, "platform", &corev1.ConfigMap{})
		dep := &appsv1.Deployment{}
		object(g, s.app, "web", dep)
		g.Expect(dep.UID).To(Equal(live.UID), "taken over in place")
		g.Expect(*dep.Spec.Replicas).To(BeEquivalentTo(2), "replicas: ${replicas} is the number 2")
		g.Expect(dep.Labels).NotTo(HaveKey("legacy"), "a field Git does not set is gone after the takeover")
		cm := &corev1.ConfigMap{}
		object(g, s.app, "web-settings", cm)
		g.Expect(cm.Data).To(Equal(map[string]string{"region": "eu-west-1", "quoted": "2"}))
	})
}

func deploymentYAML(name, replicas string) string {
	return fmt.Sprintf(`apiVersion: apps/v1
kind: Deployment
metadata:
  name: %[1]s
spec:
  replicas: %[2]s
  selector:
    matchLabels: {app: %[1]s}
  template:
    metadata:
      labels: {app: %[1]s}
    spec:
      containers:
      - name: app
        image: example.com/%[1]s:1
`, name, replicas)
}

// fieldOwner is the field manager a create is made with, as another tool would.
func fieldOwner(name string) client.CreateOption { return client.FieldOwner(name) }
