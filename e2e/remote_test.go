package e2e

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

// TestRemoteClusterDeploy: a SyncTarget with spec.kubeConfig deploys to a second control
// plane, not to the daemon's cluster; drift there is restored and a removed file pruned there.
func TestRemoteClusterDeploy(t *testing.T) {
	run(t, 48, "deploy to a remote cluster through a kubeconfig Secret", false, func(s *scenario) {
		remote := clustertest.Start(t, localcluster.Options{})
		rk8s, err := client.New(remote.Config, client.Options{Scheme: suite.k8s.Scheme()})
		if err != nil {
			t.Fatal(err)
		}
		kubeconfig, err := remote.KubeconfigBytes()
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		g := NewWithT(t)
		g.Expect(rk8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: s.app}})).To(Succeed())
		s.create(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "remote-kc", Namespace: s.ns},
			Data: map[string][]byte{"value": kubeconfig}})

		r := s.repo("remote")
		rev1 := r.commit(map[string]string{"deploy/a.yaml": configMap("a", "1"), "deploy/b.yaml": configMap("b", "1")})
		st := s.syncTarget("remote", r, func(st *convergev1.SyncTarget) {
			st.Spec.KubeConfig = &convergev1.KubeConfigReference{
				SecretRef: convergev1.KubeConfigSecretReference{Name: "remote-kc"}}
		})
		s.waitHealthy(st, rev1, 90*time.Second)
		remoteValue := func(g Gomega, name string) string {
			cm := &corev1.ConfigMap{}
			if err := rk8s.Get(ctx, client.ObjectKey{Namespace: s.app, Name: name}, cm); err != nil {
				return "<" + err.Error() + ">"
			}
			return cm.Data["value"]
		}
		g.Expect(remoteValue(g, "a")).To(Equal("1"))
		g.Expect(remoteValue(g, "b")).To(Equal("1"))
		local := &corev1.ConfigMapList{}
		g.Expect(suite.k8s.List(ctx, local, client.InNamespace(s.app), ownerLabels(st))).To(Succeed())
		g.Expect(local.Items).To(BeEmpty(), "nothing is applied to the daemon's own cluster")

		cm := &corev1.ConfigMap{}
		g.Expect(rk8s.Get(ctx, client.ObjectKey{Namespace: s.app, Name: "a"}, cm)).To(Succeed())
		cm.Data["value"] = "drifted"
		g.Expect(rk8s.Update(ctx, cm)).To(Succeed())
		g.Eventually(func(g Gomega) string { return remoteValue(g, "a") }, 60*time.Second, 250*time.Millisecond).
			Should(Equal("1"), "the drift on the remote cluster is restored")

		rev2 := r.remove("deploy/b.yaml")
		s.waitHealthy(st, rev2, 90*time.Second)
		g.Eventually(func(g Gomega) string { return remoteValue(g, "b") }, 60*time.Second, 250*time.Millisecond).
			Should(ContainSubstring("not found"), "the removed file is pruned on the remote cluster")
	})
}
