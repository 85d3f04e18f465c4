package e2e

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
	"github.com/converge-gitops/converge/internal/gittest"
	"github.com/converge-gitops/converge/internal/localcluster"
	"github.com/converge-gitops/converge/internal/localcluster/clustertest"
)

// remoteCluster is a second control plane on loopback, as a remote cluster: an API server
// and etcd, no controller-manager, so a Deployment there never becomes Available.
type remoteCluster struct {
	*localcluster.Cluster
	k8s        client.Client
	kubeconfig []byte
}

func newRemoteCluster(c *localcluster.Cluster) (*remoteCluster, error) {
	k8s, err := client.New(c.Config, client.Options{Scheme: suite.k8s.Scheme()})
	if err != nil {
		return nil, err
	}
	kubeconfig, err := c.KubeconfigBytes()
	if err != nil {
		return nil, err
	}
	return &remoteCluster{Cluster: c, k8s: k8s, kubeconfig: kubeconfig}, nil
}

// startRemote starts a remote cluster of the scenario's own, stopped when it ends: for a
// scenario that stops its API server.
func startRemote(t *testing.T) *remoteCluster {
	t.Helper()
	rc, err := newRemoteCluster(clustertest.Start(t, localcluster.Options{}))
	if err != nil {
		t.Fatal(err)
	}
	return rc
}

// shared is the remote cluster the scenarios that leave it running share, each in
// namespaces of its own; started by the first one to ask, stopped when the suite ends.
var shared struct {
	once sync.Once
	rc   *remoteCluster
	err  error
}

func sharedRemote(t *testing.T) *remoteCluster {
	t.Helper()
	shared.once.Do(func() {
		c, err := localcluster.Start(context.Background(), localcluster.Options{})
		if err != nil {
			shared.err = err
			return
		}
		shared.rc, shared.err = newRemoteCluster(c)
	})
	if shared.err != nil {
		t.Fatalf("starting the shared remote cluster: %v", shared.err)
	}
	return shared.rc
}

// stopSharedRemote stops the shared remote cluster, if a scenario started it.
func stopSharedRemote() {
	if shared.rc != nil {
		if err := shared.rc.Stop(); err != nil {
			fmt.Printf("e2e: stopping the shared remote cluster: %v\n", err)
		}
	}
}

// namespace creates namespaces on the remote cluster.
func (rc *remoteCluster) namespace(t *testing.T, names ...string) {
	t.Helper()
	for _, ns := range names {
		if err := rc.k8s.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			t.Fatalf("creating the namespace %s on the remote cluster: %v", ns, err)
		}
	}
}

// value is the value of a ConfigMap on the remote cluster, or why it cannot be read
// ("<... not found>" when it does not exist).
func (rc *remoteCluster) value(ns, name string) string {
	cm := &corev1.ConfigMap{}
	if err := rc.k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, cm); err != nil {
		return "<" + err.Error() + ">"
	}
	return cm.Data["value"]
}

// gone checks that the object does not exist on the remote cluster.
func (rc *remoteCluster) gone(g Gomega, ns, name string, obj client.Object) {
	goneIn(g, rc.k8s, ns, name, obj)
}

// kubeconfigSecret creates, in the scenario's namespace, a Secret holding rc's kubeconfig.
func (s *scenario) kubeconfigSecret(rc *remoteCluster, name string, labels map[string]string) {
	s.create(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: s.ns, Labels: labels},
		Data: map[string][]byte{"value": rc.kubeconfig}})
}

// toRemote makes a SyncTarget deploy to the cluster of the kubeconfig Secret secret.
func toRemote(secret string) func(*convergev1.SyncTarget) {
	return func(st *convergev1.SyncTarget) {
		st.Spec.KubeConfig = &convergev1.KubeConfigReference{SecretRef: convergev1.KubeConfigSecretReference{Name: secret}}
	}
}

// TestRemoteClusterDeploy: a SyncTarget with spec.kubeConfig deploys to a second control
// plane, not to the daemon's cluster; drift there is restored and a removed file pruned there.
func TestRemoteClusterDeploy(t *testing.T) {
	run(t, 48, "deploy to a remote cluster through a kubeconfig Secret", false, func(s *scenario) {
		rc := sharedRemote(t)
		ctx := context.Background()
		g := NewWithT(t)
		rc.namespace(t, s.app)
		s.kubeconfigSecret(rc, "remote-kc", nil)

		r := s.repo("remote")
		rev1 := r.commit(map[string]string{"deploy/a.yaml": configMap("a", "1"), "deploy/b.yaml": configMap("b", "1")})
		st := s.syncTarget("remote", r, toRemote("remote-kc"))
		s.waitHealthy(st, rev1, 90*time.Second)
		g.Expect(rc.value(s.app, "a")).To(Equal("1"))
		g.Expect(rc.value(s.app, "b")).To(Equal("1"))
		local := &corev1.ConfigMapList{}
		g.Expect(suite.k8s.List(ctx, local, client.InNamespace(s.app), ownerLabels(st))).To(Succeed())
		g.Expect(local.Items).To(BeEmpty(), "nothing is applied to the daemon's own cluster")

		cm := &corev1.ConfigMap{}
		g.Expect(rc.k8s.Get(ctx, client.ObjectKey{Namespace: s.app, Name: "a"}, cm)).To(Succeed())
		cm.Data["value"] = "drifted"
		g.Expect(rc.k8s.Update(ctx, cm)).To(Succeed())
		g.Eventually(func() string { return rc.value(s.app, "a") }, 60*time.Second, 250*time.Millisecond).
			Should(Equal("1"), "the drift on the remote cluster is restored")

		rev2 := r.remove("deploy/b.yaml")
		s.waitHealthy(st, rev2, 90*time.Second)
		g.Eventually(func() string { return rc.value(s.app, "b") }, 60*time.Second, 250*time.Millisecond).
			Should(ContainSubstring("not found"), "the removed file is pruned on the remote cluster")
	})
}

// Scenario 49: on a remote cluster, a commit whose Deployment never becomes Available (no
// controller-manager runs there) is rolled back to the last healthy revision: the remote
// cluster holds that revision's objects again, and what the bad commit added is pruned there.
func TestRemoteRollback(t *testing.T) {
	run(t, 49, "automatic rollback on a remote cluster", parallel, func(s *scenario) {
		rc := sharedRemote(t)
		g := NewWithT(t)
		rc.namespace(t, s.app)
		s.kubeconfigSecret(rc, "remote-kc", nil)
		r := s.repo("remote")
		good := r.commit(map[string]string{"deploy/settings.yaml": configMap("settings", "good")})
		st := s.syncTarget("remote", r, func(st *convergev1.SyncTarget) {
			toRemote("remote-kc")(st)
			st.Spec.Timeout = &metav1.Duration{Duration: 8 * time.Second}
		})
		s.waitHealthy(st, good, 90*time.Second)

		committed := time.Now()
		bad := r.commit(map[string]string{
			"deploy/settings.yaml": configMap("settings", "bad"),
			"deploy/web.yaml":      deployment("web", 1, "example.com/web:2", ""),
		})
		s.eventually(st, 90*time.Second, func(g Gomega, st *convergev1.SyncTarget) {
			g.Expect(ready(st).Reason).To(Equal(convergev1.RolledBackReason), ready(st).Message)
			g.Expect(ready(st).Status).To(Equal(metav1.ConditionFalse))
			g.Expect(ready(st).Message).To(And(ContainSubstring(bad), ContainSubstring(good), ContainSubstring("Deployment "+s.app+"/web")))
			g.Expect(st.Status.LastAttemptedRevision).To(Equal(bad))
			g.Expect(st.Status.LastAppliedRevision).To(Equal(good))
			g.Expect(st.Status.LastHealthyRevision).To(Equal(good))
			g.Expect(st.Status.History[0]).To(And(HaveField("Revision", bad), HaveField("Result", convergev1.SyncRolledBack)))
			g.Expect(st.Status.Inventory.Entries).To(ConsistOf(HaveField("ID", s.app+"_settings__ConfigMap")))
		})
		s.latency("commit→rolled back (remote)", time.Since(committed))
		g.Expect(rc.value(s.app, "settings")).To(Equal("good"), "the remote cluster holds the healthy revision's objects")
		rc.gone(g, s.app, "web", &appsv1.Deployment{})
		s.expectEvent(st, corev1.EventTypeWarning, convergev1.RolledBackReason, bad, good)

		fixed := revision(r.CommitChanges(t, "main", gittest.Change{Path: "deploy/web.yaml", Delete: true},
			gittest.Change{Path: "deploy/settings.yaml", Content: configMap("settings", "fixed")}))
		s.waitHealthy(st, fixed, 90*time.Second)
		g.Expect(rc.value(s.app, "settings")).To(Equal("fixed"))
	})
}

// Scenario 50: the API server of a remote cluster stops. Its SyncTarget says which cluster
// is unreachable and blames no revision, while a SyncTarget of the daemon's own cluster
// keeps deploying; once the API server is back, the commit pushed meanwhile reaches the
// remote cluster.
func TestRemoteClusterAway(t *testing.T) {
	run(t, 50, "remote cluster away and back", parallel, func(s *scenario) {
		rc := startRemote(t)
		g := NewWithT(t)
		rc.namespace(t, s.app)
		s.kubeconfigSecret(rc, "remote-kc", nil)
		rr, lr := s.repo("remote"), s.repo("local")
		remoteRev := rr.commit(map[string]string{"deploy/a.yaml": configMap("a", "1")})
		localRev := lr.commit(map[string]string{"deploy/local.yaml": configMap("local", "1")})
		remote := s.syncTarget("remote", rr, toRemote("remote-kc"))
		local := s.syncTarget("local", lr, nil)
		s.waitHealthy(remote, remoteRev, 90*time.Second)
		s.waitHealthy(local, localRev, 90*time.Second)

		g.Expect(rc.StopAPIServer()).To(Succeed())
		stopped := true
		defer func() {
			if stopped { // the scenario failed: Stop ends the rest of the cluster
				_ = rc.StartAPIServer(context.Background())
			}
		}()
		healthyRev := remoteRev
		remoteRev = rr.commit(map[string]string{"deploy/a.yaml": configMap("a", "2")})
		s.eventually(remote, 60*time.Second, func(g Gomega, st *convergev1.SyncTarget) {
			g.Expect(st.Status.LastFetchedRevision).To(Equal(remoteRev))
			g.Expect(ready(st).Status).To(Equal(metav1.ConditionFalse))
			g.Expect(ready(st).Message).To(And(ContainSubstring(s.ns+"/remote-kc"), ContainSubstring("unreachable")))
			g.Expect(st.Status.LastHealthyRevision).To(Equal(healthyRev))
		})
		st := get(g, remote)
		g.Expect(ready(st).Reason).NotTo(Equal(convergev1.RolledBackReason), "no revision is blamed")
		for _, h := range st.Status.History {
			g.Expect(h.Result).NotTo(Equal(convergev1.SyncRolledBack), "no revision is blamed: %+v", h)
		}
		t.Logf("while the remote cluster is away: %s: %s", ready(st).Reason, ready(st).Message)

		localRev = lr.commit(map[string]string{"deploy/local.yaml": configMap("local", "2")})
		s.waitHealthy(local, localRev, 60*time.Second)
		g.Expect(configMapValue(g, s.app, "local")).To(Equal("2"), "the daemon's own cluster keeps syncing")

		back := time.Now()
		g.Expect(rc.StartAPIServer(context.Background())).To(Succeed())
		stopped = false
		s.waitHealthy(remote, remoteRev, 90*time.Second)
		s.latency("API server started→remote healthy", time.Since(back))
		g.Expect(rc.value(s.app, "a")).To(Equal("2"))
	})
}
