package ui

import (
	"context"
	"net/http"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
)

// TestClustersPageAsksEachCluster: the clusters page lists the daemon's own cluster and
// each remote one with their SyncTargets; run as converge ui, it asks each for its
// version with the user's credentials: the API server answers, a kubeconfig whose
// server cannot be used says why.
func TestClustersPageAsksEachCluster(t *testing.T) {
	c, cfg := cluster(t)
	g := NewWithT(t)
	ctx := context.Background()
	web := fakeTarget("clusters-a", "web", true)
	api := fakeTarget("clusters-a", "api", false)
	remote := fakeTarget("clusters-a", "edge", true)
	remote.Spec.KubeConfig = &convergev1.KubeConfigReference{SecretRef: convergev1.KubeConfigSecretReference{Name: "edge-kubeconfig"}}
	var targets []convergev1.SyncTarget
	for _, st := range []convergev1.SyncTarget{web, api, remote} {
		targets = append(targets, *createTarget(t, c, st))
	}
	g.Expect(c.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "clusters-a", Name: "edge-kubeconfig"},
		StringData: map[string]string{"value": "apiVersion: v1\nkind: Config\nclusters:\n- name: edge\n  cluster: {server: 'https://127.0.0.1:1'}\n" +
			"contexts:\n- name: edge\n  context: {cluster: edge, user: edge}\ncurrent-context: edge\nusers:\n- name: edge\n  user: {token: abc}\n"}})).To(Succeed())

	s := NewWithStore(Options{Config: cfg}, NewMemoryStore(targets, nil), c)
	rec := get(t, s, "/clusters")
	g.Expect(rec.Code).To(Equal(http.StatusOK))
	body := rec.Body.String()
	rows := strings.Split(body, "<tr class=")
	g.Expect(rows).To(HaveLen(3), body)
	g.Expect(rows[1]).To(HavePrefix(`"r-yes"><td><a href="/?cluster=in-cluster">in-cluster</a><td><td>2<td>1<td>1<td>`))
	g.Expect(rows[1]).To(ContainSubstring(`<span class="badge reach-yes">yes</span> <code>v1.`))
	g.Expect(rows[2]).To(HavePrefix(`"r-no"><td><a href="/?cluster=edge-kubeconfig&amp;ns=clusters-a">edge-kubeconfig</a><td>clusters-a<td>1<td>1<td>0<td>`))
	g.Expect(rows[2]).To(ContainSubstring(`<span class="badge reach-no">no</span>`))
	g.Expect(rows[2]).NotTo(ContainSubstring("abc"), "the kubeconfig's token")
	g.Expect(body).To(ContainSubstring(`<a href="/clusters">Clusters</a>`))
}
