package reconciler_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
)

// capsChart is a chart at dir/ that renders the Gadget monitor of group only where the
// cluster serves its API, and tells in the ConfigMap caps the Kubernetes version and
// whether the API is there.
func capsChart(dir, group, version string) map[string]string {
	return map[string]string{
		dir + "/Chart.yaml": "apiVersion: v2\nname: caps\nversion: " + version + "\n",
		dir + "/templates/gadget.yaml": fmt.Sprintf(`{{- if .Capabilities.APIVersions.Has "%[1]s/v1/Gadget" }}
apiVersion: %[1]s/v1
kind: Gadget
metadata:
  name: monitor
{{- end }}
`, group),
		dir + "/templates/caps.yaml": fmt.Sprintf(`apiVersion: v1
kind: ConfigMap
metadata:
  name: caps
data:
  kube: {{ .Capabilities.KubeVersion.Version | quote }}
  gadgets: "{{ .Capabilities.APIVersions.Has "%s/v1" }}"
`, group),
	}
}

func serverVersion(t *testing.T, cfg *rest.Config) string {
	t.Helper()
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	v, err := dc.ServerVersion()
	if err != nil {
		t.Fatal(err)
	}
	return v.GitVersion
}

// gadget is the Gadget monitor in namespace, read with c; nil when there is none.
func gadget(g Gomega, c client.Client, group, namespace string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(schema.GroupVersionKind{Group: group, Version: "v1", Kind: "Gadget"})
	err := c.Get(context.Background(), client.ObjectKey{Namespace: namespace, Name: "monitor"}, u)
	if err != nil {
		g.Expect(client.IgnoreNotFound(err)).To(Or(Succeed(), MatchError(ContainSubstring("no matches for kind"))))
		return nil
	}
	return u
}

// TestChartSeesItsClusterCapabilities: a chart renders with the capabilities of the
// cluster it deploys to, as helm install: .Capabilities.KubeVersion is the API server's,
// and an object rendered only where an API is served is left out until a CRD serves it —
// the CRD applied by another SyncTarget, the next revision of the chart renders it.
func TestChartSeesItsClusterCapabilities(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	group := f.ns + ".example.com"
	files := capsChart("deploy", group, "1.0.0")
	files["crds/gadgets.yaml"] = gadgetCRD(group, "size")
	f.commit(files)
	st := f.syncTarget("caps", helmTarget(""))
	eventually(t, st, func(g Gomega, st *convergev1.SyncTarget) {
		g.Expect(ready(st).Status).To(BeEquivalentTo("True"), ready(st).Message)
	})
	g := NewWithT(t)
	caps := f.liveData(g, &corev1.ConfigMap{}, "caps")
	g.Expect(caps["kube"]).To(Equal(serverVersion(t, admin)), ".Capabilities.KubeVersion is the API server's")
	g.Expect(caps["kube"]).To(MatchRegexp(`^v1\.\d+\.\d+`))
	g.Expect(caps["gadgets"]).To(Equal("false"), "no CRD serves the API yet")
	g.Expect(gadget(g, k8s, group, f.app)).To(BeNil())

	crds := f.syncTarget("crds", func(st *convergev1.SyncTarget) { st.Spec.Path = "crds" })
	t.Cleanup(func() { _ = k8s.Delete(context.Background(), gadgetCRDObject(t, group)) })
	eventually(t, crds, func(g Gomega, st *convergev1.SyncTarget) {
		g.Expect(ready(st).Status).To(BeEquivalentTo("True"), ready(st).Message)
	})
	next := f.commit(capsChart("deploy", group, "1.1.0"))
	eventually(t, st, func(g Gomega, st *convergev1.SyncTarget) {
		g.Expect(st.Status.LastHealthyRevision).To(Equal(next), ready(st).Message)
	})
	g.Expect(f.liveData(g, &corev1.ConfigMap{}, "caps")["gadgets"]).To(Equal("true"), "the CRD applied since is seen at once")
	g.Expect(gadget(g, k8s, group, f.app)).NotTo(BeNil(), "the Gadget is rendered and applied")
}

// testRemoteCapabilities: a chart deploying to the remote cluster renders with its
// capabilities, not the daemon's: the remote cluster serves the Gadget API (installed
// there before the cluster was first used), the daemon's does not.
func testRemoteCapabilities(t *testing.T, rc *remoteCluster, f *fixture, group string) {
	t.Helper()
	ctx := context.Background()
	g := NewWithT(t)
	g.Expect(rc.k8s.Create(ctx, &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Namespace: f.app, Name: "gadgets"},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{group}, Resources: []string{"gadgets"}, Verbs: []string{"*"}}},
	})).To(Succeed())
	g.Expect(rc.k8s.Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: f.app, Name: "gadgets"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "gadgets"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: f.ns, Name: "deployer"}},
	})).To(Succeed())
	f.commit(capsChart("chart", group, "1.0.0"))
	st := f.syncTarget("remote-chart", func(st *convergev1.SyncTarget) {
		remoteTarget(st)
		helmTarget("")(st)
		st.Spec.Path = "chart"
	})
	eventually(t, st, func(g Gomega, st *convergev1.SyncTarget) {
		g.Expect(ready(st).Status).To(BeEquivalentTo("True"), ready(st).Message)
	})
	cm := &corev1.ConfigMap{}
	g.Expect(rc.k8s.Get(ctx, client.ObjectKey{Namespace: f.app, Name: "caps"}, cm)).To(Succeed())
	g.Expect(cm.Data["gadgets"]).To(Equal("true"), "the remote cluster serves the API")
	g.Expect(gadget(g, rc.k8s, group, f.app)).NotTo(BeNil(), "the Gadget is applied there")
	g.Expect(gadget(g, k8s, group, f.app)).To(BeNil(), "and not on the daemon's cluster, which does not serve it")
	g.Expect(k8s.Delete(ctx, st)).To(Succeed())
}

// gadgetCRDObject is the Gadget CRD of group.
func gadgetCRDObject(t *testing.T, group string) *unstructured.Unstructured {
	t.Helper()
	crd := &unstructured.Unstructured{}
	if err := yaml.Unmarshal([]byte(gadgetCRD(group, "size")), &crd.Object); err != nil {
		t.Fatal(err)
	}
	return crd
}

// establish creates crd with c and waits until its API is served.
func establish(t *testing.T, c client.Client, crd *unstructured.Unstructured) {
	t.Helper()
	g := NewWithT(t)
	g.Expect(c.Create(context.Background(), crd)).To(Succeed())
	g.Eventually(func(g Gomega) {
		g.Expect(c.Get(context.Background(), client.ObjectKeyFromObject(crd), crd)).To(Succeed())
		conds, _, _ := unstructured.NestedSlice(crd.Object, "status", "conditions")
		g.Expect(conds).To(ContainElement(And(HaveKeyWithValue("type", "Established"), HaveKeyWithValue("status", "True"))))
	}).WithTimeout(30 * time.Second).Should(Succeed())
}
