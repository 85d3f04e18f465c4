package ui

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
	"github.com/converge-gitops/converge/internal/browsertest"
)

// fakeKubelet is a kubelet's log endpoint on loopback: the API server proxies a Pod's log
// request to the node the Pod runs on, here a Node whose address and kubelet port are
// this server's. It answers every container's log with its lines and records the queries.
type fakeKubelet struct {
	srv   *httptest.Server
	mu    sync.Mutex
	asked []string
}

func startKubelet(t *testing.T, c client.Client, node string) *fakeKubelet {
	t.Helper()
	k := &fakeKubelet{}
	k.srv = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		k.mu.Lock()
		k.asked = append(k.asked, r.URL.Path+"?"+r.URL.RawQuery)
		k.mu.Unlock()
		if !strings.HasPrefix(r.URL.Path, "/containerLogs/") {
			http.NotFound(w, r)
			return
		}
		parts := strings.Split(r.URL.Path, "/") // "", containerLogs, ns, pod, container
		for i := 1; i <= 3; i++ {
			_, _ = w.Write([]byte("log of " + parts[3] + "/" + parts[4] + " line " + strconv.Itoa(i) + " <b>not html</b>\n"))
		}
	}))
	t.Cleanup(k.srv.Close)
	u, _ := url.Parse(k.srv.URL)
	port, _ := strconv.Atoi(u.Port())
	ctx := context.Background()
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}
	if err := c.Create(ctx, n); err != nil {
		t.Fatal(err)
	}
	n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "127.0.0.1"}}
	n.Status.DaemonEndpoints.KubeletEndpoint.Port = int32(port)
	if err := c.Status().Update(ctx, n); err != nil {
		t.Fatal(err)
	}
	return k
}

func (k *fakeKubelet) queries() []string {
	k.mu.Lock()
	defer k.mu.Unlock()
	return append([]string(nil), k.asked...)
}

// workload creates, in ns, a Deployment web, its ReplicaSet and two Pods of it on node —
// one crash-looping, one running — and a Pod of another app, as the controllers would;
// and a SyncTarget whose inventory lists the Deployment.
func workload(t *testing.T, c client.Client, ns, node string) *convergev1.SyncTarget {
	t.Helper()
	ctx := context.Background()
	g := NewWithT(t)
	st := fakeTarget(ns, "web", true)
	st.Status.Inventory = &convergev1.ResourceInventory{Entries: []convergev1.InventoryEntry{{ID: ns + "_web_apps_Deployment", Version: "v1"}}}
	created := createTarget(t, c, st)
	labels := map[string]string{"app": "web"}
	podSpec := corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "app", Image: "example.com/web:1"}, {Name: "proxy", Image: "example.com/proxy:1"}}}
	dep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web"},
		Spec: appsv1.DeploymentSpec{Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: podSpec}}}
	g.Expect(c.Create(ctx, dep)).To(Succeed())
	rs := &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web-7d9f", Labels: labels,
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "Deployment", Name: "web", UID: dep.UID, Controller: ptr.To(true)}}},
		Spec: appsv1.ReplicaSetSpec{Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: podSpec}}}
	g.Expect(c.Create(ctx, rs)).To(Succeed())
	for _, p := range []struct {
		name   string
		labels map[string]string
		status corev1.PodStatus
	}{
		{"web-7d9f-crash", labels, corev1.PodStatus{Phase: corev1.PodRunning, ContainerStatuses: []corev1.ContainerStatus{
			{Name: "app", RestartCount: 7, State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}}},
			{Name: "proxy", Ready: true, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}}}},
		{"web-7d9f-fine", labels, corev1.PodStatus{Phase: corev1.PodRunning, ContainerStatuses: []corev1.ContainerStatus{
			{Name: "app", Ready: true, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}},
			{Name: "proxy", Ready: true, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}}}},
		{"other-app", map[string]string{"app": "other"}, corev1.PodStatus{Phase: corev1.PodRunning}},
	} {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: p.name, Labels: p.labels}, Spec: *podSpec.DeepCopy()}
		if p.labels["app"] == "web" {
			pod.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: rs.Name, UID: rs.UID, Controller: ptr.To(true)}}
		}
		g.Expect(c.Create(ctx, pod)).To(Succeed())
		pod.Status = p.status
		g.Expect(c.Status().Update(ctx, pod)).To(Succeed())
	}
	return created
}

// TestWorkloadShowsItsPodsAndTheirLogs: a Deployment's page lists the Pods its selector
// matches, through their ReplicaSet, the crash-looping one marked with why; a container's
// log is read through the API server from the Pod's kubelet, as text; a Pod that is not
// the Deployment's, or a container it does not have, is a 404.
func TestWorkloadShowsItsPodsAndTheirLogs(t *testing.T) {
	c, cfg := cluster(t)
	g := NewWithT(t)
	kubelet := startKubelet(t, c, "kubelet-pods-a")
	st := workload(t, c, "pods-a", "kubelet-pods-a")
	s := NewWithStore(Options{Config: cfg}, NewMemoryStore([]convergev1.SyncTarget{*st}, nil), c)

	page := get(t, s, "/targets/pods-a/web/objects/pods-a_web_apps_Deployment")
	g.Expect(page.Code).To(Equal(http.StatusOK))
	body := page.Body.String()
	g.Expect(body).To(ContainSubstring(`<tr class="p-bad"><td><code>web-7d9f-crash</code><td>ReplicaSet web-7d9f<td>Running<td>1/2<td>7<td>CrashLoopBackOff`))
	g.Expect(body).To(ContainSubstring(`<tr><td><code>web-7d9f-fine</code><td>ReplicaSet web-7d9f<td>Running<td>2/2<td>0`))
	g.Expect(body).To(ContainSubstring(`href="/targets/pods-a/web/objects/pods-a_web_apps_Deployment/logs?pod=web-7d9f-crash&amp;container=proxy"`))
	g.Expect(body).NotTo(ContainSubstring("other-app"))

	logs := get(t, s, "/targets/pods-a/web/objects/pods-a_web_apps_Deployment/logs?pod=web-7d9f-crash&container=app&previous=1")
	g.Expect(logs.Code).To(Equal(http.StatusOK), logs.Body.String())
	g.Expect(logs.Header().Get("Content-Type")).To(Equal("text/plain; charset=utf-8"))
	g.Expect(logs.Header().Get("X-Content-Type-Options")).To(Equal("nosniff"))
	g.Expect(logs.Body.String()).To(Equal("log of web-7d9f-crash/app line 1 <b>not html</b>\n" +
		"log of web-7d9f-crash/app line 2 <b>not html</b>\nlog of web-7d9f-crash/app line 3 <b>not html</b>\n"))
	asked := kubelet.queries()
	g.Expect(asked).To(HaveLen(1))
	g.Expect(asked[0]).To(HavePrefix("/containerLogs/pods-a/web-7d9f-crash/app?"))
	g.Expect(asked[0]).To(And(ContainSubstring("tailLines=500"), ContainSubstring("limitBytes=2097152"), ContainSubstring("previous=true")))

	// The tree's node of the Deployment opens on its ReplicaSet and its two Pods.
	owned := get(t, s, "/targets/pods-a/web/objects/pods-a_web_apps_Deployment/owned").Body.String()
	g.Expect(owned).To(MatchRegexp(`(?s)<ul class="owned"><li>.*<span class="tkind">ReplicaSet</span> web-7d9f.*` +
		`<ul class="owned"><li>.*<span class="tkind">Pod</span> web-7d9f-crash.*<span class="tkind">Pod</span> web-7d9f-fine`))
	g.Expect(owned).NotTo(ContainSubstring("other-app"))
	g.Expect(get(t, s, "/targets/pods-a/web").Body.String()).To(ContainSubstring(
		`<details class="owns" data-src="/targets/pods-a/web/objects/pods-a_web_apps_Deployment/owned">`))

	for _, q := range []string{"pod=other-app&container=app", "pod=web-7d9f-fine&container=sidecar", "pod=no-such-pod"} {
		rec := get(t, s, "/targets/pods-a/web/objects/pods-a_web_apps_Deployment/logs?"+q)
		g.Expect(rec.Code).To(Equal(http.StatusNotFound), q)
	}
	g.Expect(kubelet.queries()).To(HaveLen(1), "a Pod that is not the Deployment's is never asked for")
}

// TestInClusterLogsNeedPodsLog: in the cluster, a user who may read the SyncTarget and
// the Deployment but not list Pods sees no Pods; one who may list them but not get
// pods/log reads no log; granted, the log comes.
func TestInClusterLogsNeedPodsLog(t *testing.T) {
	c, cfg := cluster(t)
	g := NewWithT(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	startKubelet(t, c, "kubelet-pods-b")
	workload(t, c, "pods-b", "kubelet-pods-b")
	g.Expect(c.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: "pods-b", Name: "dave"}})).To(Succeed())
	grant(t, c, "pods-b", "dave", "read", "get", "list", "watch")
	role := func(name string, rules ...rbacv1.PolicyRule) {
		g.Expect(c.Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: "pods-b", Name: name}, Rules: rules})).To(Succeed())
		g.Expect(c.Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: "pods-b", Name: name},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: "pods-b", Name: "dave"}}})).To(Succeed())
	}
	role("deployments", rbacv1.PolicyRule{APIGroups: []string{"apps"}, Resources: []string{"deployments"}, Verbs: []string{"get"}})
	cs, err := kubernetes.NewForConfig(cfg)
	g.Expect(err).NotTo(HaveOccurred())
	tr, err := cs.CoreV1().ServiceAccounts("pods-b").CreateToken(ctx, "dave", &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	token := tr.Status.Token
	// Answers are kept a nanosecond: each request is authorized anew, as the grants change.
	s, err := New(ctx, Options{Config: cfg, InCluster: &InCluster{Client: c, CacheTTL: time.Nanosecond}})
	g.Expect(err).NotTo(HaveOccurred())
	const object = "/targets/pods-b/web/objects/pods-b_web_apps_Deployment"
	const log = object + "/logs?pod=web-7d9f-crash&container=app"

	g.Eventually(func() string { return as(s, token, "GET", object, nil).Body.String() }).WithTimeout(10 * time.Second).WithPolling(300 * time.Millisecond).
		Should(ContainSubstring("you may not list its Pods"))
	g.Expect(as(s, token, "GET", object, nil).Body.String()).NotTo(ContainSubstring("web-7d9f-crash"))
	owned := as(s, token, "GET", object+"/owned", nil).Body.String()
	g.Expect(owned).To(ContainSubstring("you may not list ReplicaSets in namespace pods-b"))
	g.Expect(owned).NotTo(ContainSubstring("web-7d9f"))
	graph := as(s, token, "GET", "/targets/pods-b/web/graph", nil).Body.String()
	g.Expect(graph).To(ContainSubstring("you may not list ReplicaSets in namespace pods-b"))
	g.Expect(graph).To(ContainSubstring(`<title>Deployment.apps web: `))
	g.Expect(graph).NotTo(ContainSubstring("web-7d9f"))
	refused := as(s, token, "GET", log, nil)
	g.Expect(refused.Code).To(Equal(http.StatusForbidden))
	g.Expect(refused.Body.String()).To(ContainSubstring("may not list pods"))

	role("pods", rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"list"}})
	g.Eventually(func() string { return as(s, token, "GET", object, nil).Body.String() }).WithTimeout(10 * time.Second).WithPolling(300 * time.Millisecond).
		Should(ContainSubstring("web-7d9f-crash"))
	refused = as(s, token, "GET", log, nil)
	g.Expect(refused.Code).To(Equal(http.StatusForbidden))
	g.Expect(refused.Body.String()).To(ContainSubstring("may not get pods"))
	g.Expect(refused.Body.String()).NotTo(ContainSubstring("line 1"))
	g.Expect(as(s, token, "GET", object+"/logs?pod=other-app&container=app", nil).Code).To(Equal(http.StatusNotFound),
		"a Pod that is not the Deployment's is a 404 whatever the user may do")

	role("logs", rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"pods/log"}, Verbs: []string{"get"}})
	g.Eventually(func() string { return as(s, token, "GET", log, nil).Body.String() }).WithTimeout(10 * time.Second).WithPolling(300 * time.Millisecond).
		Should(ContainSubstring("log of web-7d9f-crash/app line 1"))
}

// TestWorkloadLogsAndClustersInTheBrowser opens, in Chromium, a Deployment's page and a
// crash-looping Pod's log (streamed into the page as text), the Deployment's node of its
// SyncTarget's tree (its ReplicaSet and Pods), then the clusters page.
func TestWorkloadLogsAndClustersInTheBrowser(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a browser")
	}
	c, cfg := cluster(t)
	g := NewWithT(t)
	startKubelet(t, c, "kubelet-pods-c")
	st := workload(t, c, "pods-c", "kubelet-pods-c")
	s := NewWithStore(Options{Config: cfg}, NewMemoryStore([]convergev1.SyncTarget{*st}, nil), c)
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	ctx := browsertest.New(t)

	g.Expect(chromedp.Do(ctx, chromedp.Navigate(srv.URL+"/targets/pods-c/web/objects/pods-c_web_apps_Deployment"),
		chromedp.WaitVisible(chromedp.CSS("table.pods")))).To(Succeed())
	g.Expect(within(ctx, chromedp.Click(chromedp.CSS(`a.logs[data-pod="web-7d9f-crash"][data-container="app"]`)),
		chromedp.WaitVisible(chromedp.CSS("#logpane")))).To(Succeed())
	g.Eventually(func() string {
		log, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.querySelector('#log').textContent`))
		return log
	}).WithTimeout(10*time.Second).Should(ContainSubstring("line 3 <b>not html</b>"), "the log is text, never markup")
	bold, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll('#log b').length`))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(bold).To(BeZero())
	browsertest.Screenshot(t, ctx, "memory-pods")

	// The SyncTarget's tree: the Deployment's node opens on what it owns, with health.
	g.Expect(chromedp.Do(ctx, chromedp.Navigate(srv.URL+"/targets/pods-c/web"), chromedp.WaitVisible(chromedp.CSS("details.owns")))).To(Succeed())
	g.Expect(within(ctx, chromedp.Click(chromedp.CSS("details.owns summary")), chromedp.WaitVisible(chromedp.CSS("ul.owned ul.owned")))).To(Succeed())
	tree, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.querySelector('details.owns').innerText`))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(tree).To(And(ContainSubstring("ReplicaSet web-7d9f"), ContainSubstring("Pod web-7d9f-crash")))
	browsertest.Screenshot(t, ctx, "memory-owned")

	g.Expect(chromedp.Do(ctx, chromedp.Navigate(srv.URL+"/clusters"), chromedp.WaitVisible(chromedp.CSS("table.clusters")))).To(Succeed())
	browsertest.Screenshot(t, ctx, "memory-clusters")
}
