package ui

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
)

// grant lets the service account ns/sa do verbs on SyncTargets of ns.
func grant(t *testing.T, c client.Client, ns, sa, name string, verbs ...string) {
	t.Helper()
	grantOn(t, c, ns, sa, name, "synctargets", verbs...)
}

// grantOn lets the service account ns/sa do verbs on converge's resource of ns.
func grantOn(t *testing.T, c client.Client, ns, sa, name, resource string, verbs ...string) {
	t.Helper()
	ctx := context.Background()
	if err := c.Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Rules: []rbacv1.PolicyRule{
		{APIGroups: []string{convergev1.GroupVersion.Group}, Resources: []string{resource}, Verbs: verbs}}}); err != nil {
		t.Fatal(err)
	}
	if err := c.Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: sa}}}); err != nil {
		t.Fatal(err)
	}
}

// as sends a request with a bearer token, from httptest's client address.
func as(s http.Handler, token, method, path string, form url.Values) *httptest.ResponseRecorder {
	return from(s, "192.0.2.1:1234", token, method, path, form)
}

// TestInClusterAuthorizesEachUser serves the UI with the server's (admin) identity to a
// service account that may read the SyncTargets of one namespace: it sees that one only,
// may not act until it is allowed to, and hears only of the changes it may see.
func TestInClusterAuthorizesEachUser(t *testing.T) {
	c, cfg := cluster(t)
	g := NewWithT(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	createTarget(t, c, fakeTarget("ic-a", "web", true))
	createTarget(t, c, fakeTarget("ic-b", "db", true))
	g.Expect(c.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: "ic-a", Name: "alice"}})).To(Succeed())
	grant(t, c, "ic-a", "alice", "read", "get", "list", "watch")
	cs, err := kubernetes.NewForConfig(cfg)
	g.Expect(err).NotTo(HaveOccurred())
	tr, err := cs.CoreV1().ServiceAccounts("ic-a").CreateToken(ctx, "alice", &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	token := tr.Status.Token

	s, err := New(ctx, Options{Config: cfg, InCluster: &InCluster{Client: c, CacheTTL: time.Nanosecond}})
	g.Expect(err).NotTo(HaveOccurred())

	g.Expect(as(s, "", "GET", "/", nil).Code).To(Equal(http.StatusUnauthorized))
	g.Expect(as(s, "", "GET", "/", nil).Body.String()).To(ContainSubstring(`<form method="post" action="/login"`))
	g.Expect(as(s, "not-a-token", "GET", "/", nil).Code).To(Equal(http.StatusUnauthorized))

	page := as(s, token, "GET", "/", nil)
	g.Expect(page.Code).To(Equal(http.StatusOK))
	g.Expect(page.Body.String()).To(ContainSubstring(`href="/targets/ic-a/web"`))
	g.Expect(page.Body.String()).NotTo(ContainSubstring(`href="/targets/ic-b/db"`))

	other := as(s, token, "GET", "/targets/ic-b/db", nil)
	g.Expect(other.Code).To(Equal(http.StatusForbidden))
	g.Expect(other.Body.String()).To(ContainSubstring("you (user system:serviceaccount:ic-a:alice) may not get synctargets in namespace ic-b"))
	g.Expect(as(s, token, "GET", "/targets/ic-a/web", nil).Code).To(Equal(http.StatusOK))
	g.Expect(as(s, token, "GET", "/targets/ic-a/web/diff", nil).Body.String()).To(ContainSubstring("with your own credentials"))

	refused := as(s, token, "POST", "/targets/ic-a/web/suspend", nil)
	g.Expect(refused.Code).To(Equal(http.StatusForbidden))
	g.Expect(refused.Body.String()).To(ContainSubstring("you (user system:serviceaccount:ic-a:alice) may not patch synctargets in namespace ic-a"))
	st := &convergev1.SyncTarget{}
	g.Expect(c.Get(ctx, client.ObjectKey{Namespace: "ic-a", Name: "web"}, st)).To(Succeed())
	g.Expect(st.Spec.Suspend).To(BeFalse(), "not with the server's rights")

	grant(t, c, "ic-a", "alice", "patch", "patch")
	g.Eventually(func() int { return as(s, token, "POST", "/targets/ic-a/web/suspend", nil).Code }).Should(Equal(http.StatusOK))
	g.Expect(c.Get(ctx, client.ObjectKey{Namespace: "ic-a", Name: "web"}, st)).To(Succeed())
	g.Expect(st.Spec.Suspend).To(BeTrue())

	login := as(s, "", "POST", "/login", url.Values{"token": {token}})
	g.Expect(login.Code).To(Equal(http.StatusSeeOther))
	req := httptest.NewRequest("GET", "http://ui.example/", nil)
	req.AddCookie(login.Result().Cookies()[0])
	rec := httptest.NewRecorder()
	s.ServeHTTP(rec, req)
	g.Expect(rec.Code).To(Equal(http.StatusOK), "the login cookie carries the token")
}

// TestInClusterEventsFollowOnlyWhatTheUserMaySee streams changes to a user who may see
// one namespace: a change in another never reaches it.
func TestInClusterEventsFollowOnlyWhatTheUserMaySee(t *testing.T) {
	c, cfg := cluster(t)
	g := NewWithT(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	web := createTarget(t, c, fakeTarget("ic-c", "web", true))
	db := createTarget(t, c, fakeTarget("ic-d", "db", true))
	g.Expect(c.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: "ic-c", Name: "bob"}})).To(Succeed())
	grant(t, c, "ic-c", "bob", "read", "get", "list", "watch")
	cs, err := kubernetes.NewForConfig(cfg)
	g.Expect(err).NotTo(HaveOccurred())
	tr, err := cs.CoreV1().ServiceAccounts("ic-c").CreateToken(ctx, "bob", &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	g.Expect(err).NotTo(HaveOccurred())

	s, err := New(ctx, Options{Config: cfg, InCluster: &InCluster{Client: c}})
	g.Expect(err).NotTo(HaveOccurred())
	srv := httptest.NewServer(s)
	defer srv.Close()
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/events", nil)
	req.Header.Set("Authorization", "Bearer "+tr.Status.Token)
	events := streamRequest(t, req)
	g.Eventually(s.Subscribers).Should(Equal(1))

	db.Status.Conditions[0].Message = "a secret change"
	g.Expect(c.Status().Update(ctx, db)).To(Succeed())
	web.Status.Conditions[0].Message = "a visible change"
	g.Expect(c.Status().Update(ctx, web)).To(Succeed())
	var got string
	g.Eventually(events).WithTimeout(10 * time.Second).Should(Receive(&got))
	g.Expect(got).To(Equal("target ic-c/web"), "the change in ic-d was not sent")
}
