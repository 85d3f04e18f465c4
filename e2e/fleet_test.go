package e2e

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
)

// Scenario 41: a SyncTargetSet with a list generator of two elements over one repository
// with two directories: the daemon generates two SyncTargets, both deploy their directory
// and become Ready, and so does the set. Deleting the set deletes them (the garbage
// collector, through their owner reference), and their objects are pruned.
func TestFleetFromAList(t *testing.T) {
	run(t, 41, "SyncTargetSet from a list", parallel, func(s *scenario) {
		g := NewWithT(t)
		ctx := context.Background()
		r := s.repo("fleet")
		rev := r.commit(map[string]string{
			"deploy/blue/cm.yaml":  configMap("blue", "b"),
			"deploy/green/cm.yaml": configMap("green", "g"),
		})
		spec, err := json.Marshal(map[string]any{
			"source": map[string]any{"url": r.httpURL(), "ref": map[string]any{"branch": "main"},
				"secretRef": map[string]any{"name": httpSecret}, "interval": "2s"},
			"path": "deploy/{{ .color }}", "targetNamespace": s.app, "prune": true, "timeout": "30s",
		})
		g.Expect(err).NotTo(HaveOccurred())
		set := &convergev1.SyncTargetSet{ObjectMeta: metav1.ObjectMeta{Name: "colors", Namespace: s.ns},
			Spec: convergev1.SyncTargetSetSpec{
				Generators: []convergev1.Generator{{List: &convergev1.ListGenerator{Elements: []map[string]string{
					{"color": "blue"}, {"color": "green"}}}}},
				Template: convergev1.SyncTargetTemplate{
					Metadata: convergev1.SyncTargetTemplateMeta{Name: "app-{{ .color }}"},
					Spec:     apiextensionsv1.JSON{Raw: spec},
				},
			}}
		s.create(set)

		for _, color := range []string{"blue", "green"} {
			st := &convergev1.SyncTarget{ObjectMeta: metav1.ObjectMeta{Name: "app-" + color, Namespace: s.ns}}
			s.eventually(st, 90*time.Second, func(g Gomega, st *convergev1.SyncTarget) {
				healthy(g, st, rev)
				g.Expect(st.Labels).To(HaveKeyWithValue(convergev1.SetLabel, "colors"))
			})
			g.Expect(configMapValue(g, s.app, color)).To(Equal(color[:1]))
		}
		g.Eventually(func(g Gomega) {
			got := &convergev1.SyncTargetSet{}
			g.Expect(suite.k8s.Get(ctx, client.ObjectKeyFromObject(set), got)).To(Succeed())
			g.Expect(apimeta.IsStatusConditionTrue(got.Status.Conditions, convergev1.ReadyCondition)).To(BeTrue(), "%v", got.Status.Conditions)
			g.Expect(got.Status.Targets).To(HaveLen(2))
		}).WithTimeout(30 * time.Second).WithPolling(200 * time.Millisecond).Should(Succeed())

		g.Expect(suite.k8s.Delete(ctx, set)).To(Succeed())
		g.Eventually(func(g Gomega) {
			list := &convergev1.SyncTargetList{}
			g.Expect(suite.k8s.List(ctx, list, client.InNamespace(s.ns))).To(Succeed())
			g.Expect(list.Items).To(BeEmpty())
			gone(g, s.app, "blue", &corev1.ConfigMap{})
			gone(g, s.app, "green", &corev1.ConfigMap{})
		}).WithTimeout(60 * time.Second).WithPolling(200 * time.Millisecond).Should(Succeed())
	})
}
