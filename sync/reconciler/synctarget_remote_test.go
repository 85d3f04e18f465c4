package reconciler_test

import (
	"context"
	"io"
	"net"
	"net/url"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
	"github.com/converge-gitops/converge/internal/localcluster"
	"github.com/converge-gitops/converge/internal/localcluster/clustertest"
)

// remoteCluster is a second control plane (etcd and kube-apiserver), reached by the
// daemon through a proxy the test can cut, as a cluster that goes away and comes back.
type remoteCluster struct {
	k8s        client.Client // admin, straight to the API server
	kubeconfig []byte        // admin's, pointing at the proxy
	proxy      *cutProxy
}

func startRemoteCluster(t *testing.T) *remoteCluster {
	t.Helper()
	c := clustertest.Start(t, localcluster.Options{})
	admin, err := client.New(c.Config, client.Options{Scheme: k8s.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	data, err := c.KubeconfigBytes()
	if err != nil {
		t.Fatal(err)
	}
	kc, err := clientcmd.Load(data)
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{conns: map[net.Conn]bool{}}
	for _, cl := range kc.Clusters {
		u, err := url.Parse(cl.Server)
		if err != nil {
			t.Fatal(err)
		}
		if p.target == "" {
			p.target = u.Host
			p.start(t)
			t.Cleanup(p.stop)
		}
		cl.Server = "https://" + p.addr
	}
	if data, err = clientcmd.Write(*kc); err != nil {
		t.Fatal(err)
	}
	return &remoteCluster{k8s: admin, kubeconfig: data, proxy: p}
}

// cutProxy forwards TCP connections to target; stop refuses new ones and cuts the open
// ones (the cluster is away), start listens on the same address again.
type cutProxy struct {
	target string
	addr   string
	mu     sync.Mutex
	l      net.Listener
	conns  map[net.Conn]bool
}

func (p *cutProxy) start(t *testing.T) {
	t.Helper()
	addr := p.addr
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	p.mu.Lock()
	p.l, p.addr = l, l.Addr().String()
	p.mu.Unlock()
	go func() {
		for {
			down, err := l.Accept()
			if err != nil {
				return
			}
			go p.forward(down)
		}
	}()
}

func (p *cutProxy) forward(down net.Conn) {
	up, err := net.Dial("tcp", p.target)
	if err != nil {
		_ = down.Close()
		return
	}
	p.mu.Lock()
	p.conns[down], p.conns[up] = true, true
	p.mu.Unlock()
	go func() { _, _ = io.Copy(up, down); _ = up.Close() }()
	_, _ = io.Copy(down, up)
	_ = down.Close()
}

func (p *cutProxy) stop() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.l != nil {
		_ = p.l.Close()
	}
	for c := range p.conns {
		_ = c.Close()
	}
	p.conns = map[net.Conn]bool{}
}

// setupRemoteTenant makes, on the remote cluster, the namespace of f's objects and the
// rights of the service account deployer there, and, on the daemon's cluster, the
// kubeconfig Secret remote-kc.
func setupRemoteTenant(t *testing.T, f *fixture, rc *remoteCluster) {
	t.Helper()
	ctx := context.Background()
	g := NewWithT(t)
	g.Expect(rc.k8s.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: f.app}})).To(Succeed())
	g.Expect(rc.k8s.Create(ctx, &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Namespace: f.app, Name: "deployer"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{"", "apps"}, Resources: []string{"configmaps", "deployments"},
			Verbs: []string{"*"}}},
	})).To(Succeed())
	g.Expect(rc.k8s.Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: f.app, Name: "deployer"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "deployer"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: f.ns, Name: "deployer"}},
	})).To(Succeed())
	g.Expect(k8s.Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "remote-kc"},
		Data:       map[string][]byte{"value": rc.kubeconfig},
	})).To(Succeed())
}

func remoteTarget(st *convergev1.SyncTarget) {
	st.Spec.KubeConfig = &convergev1.KubeConfigReference{SecretRef: convergev1.KubeConfigSecretReference{Name: "remote-kc"}}
	st.Spec.ServiceAccountName = "deployer"
	st.Spec.Timeout = &metav1.Duration{Duration: 10 * time.Second}
}

// remoteValue returns the value of the ConfigMap name on the remote cluster, "" when it
// does not exist.
func remoteValue(g Gomega, rc *remoteCluster, namespace, name string) string {
	cm := &corev1.ConfigMap{}
	err := rc.k8s.Get(context.Background(), client.ObjectKey{Namespace: namespace, Name: name}, cm)
	if apierrors.IsNotFound(err) {
		return ""
	}
	g.Expect(err).NotTo(HaveOccurred())
	return cm.Data["value"]
}

// TestRemoteCluster: a SyncTarget with spec.kubeConfig applies, restores, prunes, health
// checks and rolls back on the remote cluster, with its service account impersonated
// there; a remote cluster that goes away fails its SyncTarget (naming the cluster) and not
// the others, and the SyncTarget recovers once the cluster is back. One second control
// plane serves every step.
func TestRemoteCluster(t *testing.T) {
	t.Parallel()
	requireCluster(t)
	rc := startRemoteCluster(t)
	f := newFixture(t)
	setupRemoteTenant(t, f, rc)
	gadgets := f.ns + ".remote.example.com" // served there, before the cluster is first used
	establish(t, rc.k8s, gadgetCRDObject(t, gadgets))
	rev1 := f.commit(map[string]string{"deploy/a.yaml": configMap("a", "1"), "deploy/b.yaml": configMap("b", "1")})
	st := f.syncTarget("remote", remoteTarget)
	ctx := context.Background()

	// Each step builds on the one before: after a failure the rest is not run.
	step := func(name string, fn func(t *testing.T)) {
		if !t.Failed() {
			t.Run(name, fn)
		}
	}
	step("applies to the remote cluster", func(t *testing.T) {
		eventually(t, st, func(g Gomega, st *convergev1.SyncTarget) {
			g.Expect(st.Status.LastHealthyRevision).To(Equal(rev1), ready(st).Message)
		})
		g := NewWithT(t)
		g.Expect(remoteValue(g, rc, f.app, "a")).To(Equal("1"))
		g.Expect(remoteValue(g, rc, f.app, "b")).To(Equal("1"))
		local := &corev1.ConfigMapList{}
		g.Expect(k8s.List(ctx, local, client.InNamespace(f.app), client.HasLabels{convergev1.NameLabel})).To(Succeed())
		g.Expect(local.Items).To(BeEmpty(), "nothing is applied to the daemon's cluster")
	})
	step("restores drift on the remote cluster", func(t *testing.T) {
		testRemoteDrift(t, rc, f)
	})
	rev2 := f.remove("deploy/b.yaml")
	step("prunes on the remote cluster", func(t *testing.T) {
		eventually(t, st, func(g Gomega, st *convergev1.SyncTarget) {
			g.Expect(st.Status.LastHealthyRevision).To(Equal(rev2), ready(st).Message)
			g.Expect(remoteValue(g, rc, f.app, "b")).To(BeEmpty())
		})
	})
	step("rolls a failing revision back on the remote cluster", func(t *testing.T) {
		// No controller-manager runs there: the Deployment never becomes ready.
		f.commit(map[string]string{"deploy/a.yaml": configMap("a", "3"), "deploy/web.yaml": deployment("web", 1, "")})
		eventually(t, st, func(g Gomega, st *convergev1.SyncTarget) {
			g.Expect(ready(st).Reason).To(Equal(convergev1.RolledBackReason), ready(st).Message)
			g.Expect(st.Status.LastHealthyRevision).To(Equal(rev2))
		})
		g := NewWithT(t)
		g.Expect(remoteValue(g, rc, f.app, "a")).To(Equal("1"))
		err := rc.k8s.Get(ctx, client.ObjectKey{Namespace: f.app, Name: "web"}, &appsv1.Deployment{})
		g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "the failed revision's Deployment is pruned: %v", err)
		fixed := f.remove("deploy/web.yaml")
		eventually(t, st, func(g Gomega, st *convergev1.SyncTarget) {
			g.Expect(st.Status.LastHealthyRevision).To(Equal(fixed), ready(st).Message)
		})
	})
	step("impersonates the service account on the remote cluster", func(t *testing.T) {
		nobody := f.syncTarget("nobody", func(st *convergev1.SyncTarget) {
			remoteTarget(st)
			st.Spec.ServiceAccountName = "nobody"
		})
		eventually(t, nobody, func(g Gomega, st *convergev1.SyncTarget) {
			g.Expect(ready(st).Message).To(ContainSubstring("system:serviceaccount:" + f.ns + ":nobody"))
			g.Expect(ready(st).Message).To(ContainSubstring("forbidden"))
			g.Expect(ready(st).Message).To(ContainSubstring("on the cluster of kubeconfig secret " + f.ns + "/remote-kc"))
		})
	})
	step("an unreachable cluster fails its targets alone, which recover", func(t *testing.T) {
		testRemoteAway(t, rc, f, st)
	})
	step("a rewritten kubeconfig Secret is used at once", func(t *testing.T) {
		testRemoteSecretRewritten(t, rc, f, st)
	})
	step("a chart renders with the remote cluster's capabilities", func(t *testing.T) {
		testRemoteCapabilities(t, rc, f, gadgets)
	})
	step("prunes on the remote cluster when deleted", func(t *testing.T) {
		g := NewWithT(t)
		g.Expect(k8s.Delete(ctx, st)).To(Succeed())
		g.Eventually(func(g Gomega) string { return remoteValue(g, rc, f.app, "a") }).
			WithTimeout(60 * time.Second).Should(BeEmpty())
	})
}

// testRemoteDrift changes and deletes objects on the remote cluster, and sees them put back.
func testRemoteDrift(t *testing.T, rc *remoteCluster, f *fixture) {
	t.Helper()
	ctx := context.Background()
	g := NewWithT(t)
	cm := &corev1.ConfigMap{}
	g.Expect(rc.k8s.Get(ctx, client.ObjectKey{Namespace: f.app, Name: "a"}, cm)).To(Succeed())
	cm.Data["value"] = "changed by hand"
	g.Expect(rc.k8s.Update(ctx, cm)).To(Succeed())
	g.Expect(rc.k8s.Delete(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: f.app, Name: "b"}})).To(Succeed())
	g.Eventually(func(g Gomega) {
		g.Expect(remoteValue(g, rc, f.app, "a")).To(Equal("1"))
		g.Expect(remoteValue(g, rc, f.app, "b")).To(Equal("1"))
	}).WithTimeout(60 * time.Second).WithPolling(250 * time.Millisecond).Should(Succeed())
}

// testRemoteSecretRewritten rewrites the kubeconfig Secret to point at a port nothing
// listens on, then back: the SyncTarget's next deploys use each at once.
func testRemoteSecretRewritten(t *testing.T, rc *remoteCluster, f *fixture, st *convergev1.SyncTarget) {
	t.Helper()
	g := NewWithT(t)
	ctx := context.Background()
	kc, err := clientcmd.Load(rc.kubeconfig)
	g.Expect(err).NotTo(HaveOccurred())
	for _, c := range kc.Clusters {
		c.Server = "https://127.0.0.1:1"
	}
	nowhere, err := clientcmd.Write(*kc)
	g.Expect(err).NotTo(HaveOccurred())
	write := func(data []byte) {
		s := &corev1.Secret{}
		g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: f.ns, Name: "remote-kc"}, s)).To(Succeed())
		s.Data = map[string][]byte{"value": data}
		g.Expect(k8s.Update(ctx, s)).To(Succeed())
	}
	write(nowhere)
	rev := f.commit(map[string]string{"deploy/a.yaml": configMap("a", "5")})
	eventually(t, st, func(g Gomega, st *convergev1.SyncTarget) {
		g.Expect(st.Status.LastAttemptedRevision).To(Equal(rev))
		g.Expect(ready(st).Message).To(ContainSubstring("127.0.0.1:1"), "the rewritten kubeconfig is used")
	})
	write(rc.kubeconfig)
	eventually(t, st, func(g Gomega, st *convergev1.SyncTarget) {
		g.Expect(st.Status.LastHealthyRevision).To(Equal(rev), ready(st).Message)
		g.Expect(remoteValue(g, rc, f.app, "a")).To(Equal("5"))
	})
}

// testRemoteAway cuts the way to the remote cluster while st and a SyncTarget of the
// daemon's cluster have new revisions; then restores it.
func testRemoteAway(t *testing.T, rc *remoteCluster, f *fixture, st *convergev1.SyncTarget) {
	t.Helper()
	lf := newFixture(t)
	lf.commit(map[string]string{"deploy/a.yaml": configMap("a", "1")})
	local := lf.syncTarget("local", nil)
	eventually(t, local, func(g Gomega, st *convergev1.SyncTarget) {
		g.Expect(st.Status.LastHealthyRevision).NotTo(BeEmpty(), ready(st).Message)
	})
	healthy := get(NewWithT(t), st).Status.LastHealthyRevision

	rc.proxy.stop()
	rev4 := f.commit(map[string]string{"deploy/a.yaml": configMap("a", "4")})
	localRev := lf.commit(map[string]string{"deploy/a.yaml": configMap("a", "2")})
	eventually(t, st, func(g Gomega, st *convergev1.SyncTarget) {
		g.Expect(st.Status.LastAttemptedRevision).To(Equal(rev4))
		g.Expect(ready(st).Status).To(Equal(metav1.ConditionFalse))
		g.Expect(ready(st).Message).To(ContainSubstring("kubeconfig secret " + f.ns + "/remote-kc is unreachable"))
		g.Expect(st.Status.LastHealthyRevision).To(Equal(healthy))
	})
	eventually(t, local, func(g Gomega, st *convergev1.SyncTarget) {
		g.Expect(st.Status.LastHealthyRevision).To(Equal(localRev), "the daemon's own cluster keeps syncing")
	})
	g := NewWithT(t)
	g.Expect(ready(get(g, st)).Reason).NotTo(Equal(convergev1.RolledBackReason), "no revision is blamed")

	rc.proxy.start(t)
	eventually(t, st, func(g Gomega, st *convergev1.SyncTarget) {
		g.Expect(st.Status.LastHealthyRevision).To(Equal(rev4), ready(st).Message)
		g.Expect(remoteValue(g, rc, f.app, "a")).To(Equal("4"))
	})
	// The drift watch is back too.
	cm := &corev1.ConfigMap{}
	g.Expect(rc.k8s.Get(context.Background(), client.ObjectKey{Namespace: f.app, Name: "a"}, cm)).To(Succeed())
	cm.Data["value"] = "changed by hand"
	g.Expect(rc.k8s.Update(context.Background(), cm)).To(Succeed())
	g.Eventually(func(g Gomega) string { return remoteValue(g, rc, f.app, "a") }).
		WithTimeout(60 * time.Second).WithPolling(250 * time.Millisecond).Should(Equal("4"))
}
