package ui

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
	"github.com/converge-gitops/converge/internal/localcluster"
	"github.com/converge-gitops/converge/internal/localcluster/clustertest"
)

// TestRemoteTargetTreeReadsTheRemoteCluster: the page of a SyncTarget of a remote cluster
// shows the objects it applied as they are on that cluster, where they live, and the
// in-cluster UI, whose users may not hold the kubeconfig's credentials, does not read them.
func TestRemoteTargetTreeReadsTheRemoteCluster(t *testing.T) {
	c, cfg := cluster(t)
	g := NewWithT(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	other := clustertest.Start(t, localcluster.Options{})
	rc, err := client.New(other.Config, client.Options{Scheme: scheme()})
	g.Expect(err).NotTo(HaveOccurred())
	kubeconfig, err := other.KubeconfigBytes()
	g.Expect(err).NotTo(HaveOccurred())
	const ns = "remote-ui"
	g.Expect(rc.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})).To(Succeed())
	g.Expect(rc.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "only-there"}})).To(Succeed())

	st := fakeTarget(ns, "web", true)
	st.Spec.KubeConfig = &convergev1.KubeConfigReference{SecretRef: convergev1.KubeConfigSecretReference{Name: "remote-kc"}}
	st.Status.Inventory = &convergev1.ResourceInventory{Entries: []convergev1.InventoryEntry{
		{ID: ns + "_only-there__ConfigMap", Version: "v1"}}}
	createTarget(t, c, st)
	g.Expect(c.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "remote-kc"},
		Data: map[string][]byte{"value": kubeconfig}})).To(Succeed())

	s, err := New(ctx, Options{Config: cfg})
	g.Expect(err).NotTo(HaveOccurred())
	page := get(t, s, "/targets/"+ns+"/web").Body.String()
	g.Expect(page).To(ContainSubstring("only-there"))
	g.Expect(page).To(ContainSubstring(">Current<"), "read on the remote cluster, where it exists")
	g.Expect(page).NotTo(ContainSubstring("NotFound"))

	in, err := New(ctx, Options{Config: cfg, InCluster: &InCluster{Client: c, CacheTTL: time.Nanosecond}})
	g.Expect(err).NotTo(HaveOccurred())
	_, msg := in.tree(ctx, st.DeepCopy())
	g.Expect(msg).To(ContainSubstring("the objects of a remote cluster are not shown here"))
}
