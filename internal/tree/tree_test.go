package tree

import (
	"context"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
	"github.com/converge-gitops/converge/health"
)

func TestBuildGroupsByNamespaceThenKind(t *testing.T) {
	g := NewWithT(t)
	tr := Build([]Node{
		{APIVersion: "apps/v1", Kind: "Deployment", Namespace: "shop", Name: "web", Status: health.InProgress},
		{APIVersion: "v1", Kind: "ConfigMap", Namespace: "shop", Name: "b", Status: health.Current},
		{APIVersion: "v1", Kind: "ConfigMap", Namespace: "shop", Name: "a", Status: health.Current},
		{APIVersion: "v1", Kind: "Namespace", Name: "shop", Status: health.Current},
	})
	g.Expect(tr.Total).To(Equal(4))
	g.Expect(tr.Counts).To(Equal(map[health.Status]int{health.Current: 3, health.InProgress: 1}))
	g.Expect(tr.Namespaces).To(HaveLen(2))
	g.Expect(tr.Namespaces[0].Namespace).To(BeEmpty(), "cluster-scoped objects first")
	g.Expect(tr.Namespaces[1].Kinds).To(HaveLen(2))
	g.Expect(tr.Namespaces[1].Kinds[0].Kind).To(Equal("ConfigMap"))
	g.Expect(tr.Namespaces[1].Kinds[0].Objects[0].Name).To(Equal("a"))
	g.Expect(tr.Namespaces[1].Kinds[1].Kind).To(Equal("Deployment.apps"))
}

func TestLoadReadsLiveHealth(t *testing.T) {
	g := NewWithT(t)
	s := runtime.NewScheme()
	g.Expect(clientgoscheme.AddToScheme(s)).To(Succeed())
	c := fake.NewClientBuilder().WithScheme(s).WithObjects(
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "cfg"}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "creds"}, Data: map[string][]byte{"k": []byte("v")}},
	).Build()
	st := &convergev1.SyncTarget{Status: convergev1.SyncTargetStatus{Inventory: &convergev1.ResourceInventory{Entries: []convergev1.InventoryEntry{
		{ID: "shop_cfg__ConfigMap", Version: "v1"},
		{ID: "shop_creds__Secret", Version: "v1"},
		{ID: "shop_gone__ConfigMap", Version: "v1"},
	}}}}
	tr, err := Load(context.Background(), c, st)
	g.Expect(err).NotTo(HaveOccurred())
	objs := tr.Namespaces[0].Kinds[0].Objects
	g.Expect(objs[0].Name).To(Equal("cfg"))
	g.Expect(objs[0].Status).To(Equal(health.Current))
	g.Expect(objs[1].Status).To(Equal(health.NotFound))
	g.Expect(tr.Namespaces[0].Kinds[1].Objects[0].Status).To(Equal(health.Current))
}
