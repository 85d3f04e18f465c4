package ui

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	. "github.com/onsi/gomega"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
	"github.com/converge-gitops/converge/internal/browsertest"
)

// objectTarget is a SyncTarget whose inventory lists a ConfigMap that converge and kubectl
// both wrote, with an event, and a Secret; the fake cluster holds them.
func objectTarget(t *testing.T) (*Server, convergev1.SyncTarget) {
	t.Helper()
	st := fakeTarget("shop", "web", true)
	st.Status.Inventory = &convergev1.ResourceInventory{Entries: []convergev1.InventoryEntry{
		{ID: "shop_settings__ConfigMap", Version: "v1"}, {ID: "shop_db__Secret", Version: "v1"}, {ID: "shop_gone__ConfigMap", Version: "v1"}}}
	at := metav1.NewTime(fixedNow.Add(-2 * time.Minute))
	managed := []metav1.ManagedFieldsEntry{
		{Manager: "converge", Operation: metav1.ManagedFieldsOperationApply, Time: &at, FieldsType: "FieldsV1", FieldsV1: metav1.NewFieldsV1(`{"f:data":{"f:mode":{}}}`)},
		{Manager: "kubectl-edit", Operation: metav1.ManagedFieldsOperationUpdate, Time: &at, FieldsType: "FieldsV1", FieldsV1: metav1.NewFieldsV1(`{"f:data":{"f:debug":{}}}`)}}
	// The fake client keeps no managed fields: they are added as the API server would return them.
	s, c := testServer(t, []convergev1.SyncTarget{st}, nil, &interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if err := c.Get(ctx, key, obj, opts...); err != nil {
				return err
			}
			if key.Name == "settings" {
				obj.SetManagedFields(managed)
			}
			return nil
		}})
	ctx := context.Background()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "settings", UID: "cm-uid"},
		Data: map[string]string{"mode": "blue", "debug": "true"}}
	if err := c.Create(ctx, cm); err != nil {
		t.Fatal(err)
	}
	if err := c.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "db"},
		Data: map[string][]byte{"password": []byte("hunter2-s3cret")}}); err != nil {
		t.Fatal(err)
	}
	for i, e := range []corev1.Event{
		{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "settings.1"}, Reason: "Edited", Message: "debug turned on",
			InvolvedObject: corev1.ObjectReference{Kind: "ConfigMap", Name: "settings", UID: "cm-uid"}, Type: corev1.EventTypeNormal},
		{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "other.1"}, Reason: "Other", Message: "not this one",
			InvolvedObject: corev1.ObjectReference{Kind: "ConfigMap", Name: "other", UID: "other-uid"}, Type: corev1.EventTypeWarning},
	} {
		e.LastTimestamp = metav1.NewTime(fixedNow.Add(-time.Duration(i+1) * time.Minute))
		if err := c.Create(ctx, &e); err != nil {
			t.Fatal(err)
		}
	}
	return s, st
}

// TestObjectPageShowsWhoWroteItItsEventsAndManifest: an object of the inventory shows its
// field managers (converge's and kubectl's), its own events and its live manifest; a
// Secret shows its metadata and never its data; an object the inventory does not list is
// a 404, and one that is gone says so.
func TestObjectPageShowsWhoWroteItItsEventsAndManifest(t *testing.T) {
	g := NewWithT(t)
	s, _ := objectTarget(t)

	target := get(t, s, "/targets/shop/web").Body.String()
	g.Expect(target).To(ContainSubstring(`<a class="obj" href="/targets/shop/web/objects/shop_settings__ConfigMap">settings</a>`))

	rec := get(t, s, "/targets/shop/web/objects/shop_settings__ConfigMap")
	g.Expect(rec.Code).To(Equal(http.StatusOK))
	body := rec.Body.String()
	g.Expect(body).To(MatchRegexp(`<tr class="m-converge"><td><code>converge</code><td>Apply<td><td><time[^>]*>2m ago</time></tr>`))
	g.Expect(body).To(MatchRegexp(`<tr><td><code>kubectl-edit</code><td>Update<td><td>`))
	g.Expect(body).To(ContainSubstring("debug turned on"))
	g.Expect(body).NotTo(ContainSubstring("not this one"), "another object's event")
	g.Expect(body).To(ContainSubstring("debug: &#34;true&#34;"))
	g.Expect(body).NotTo(ContainSubstring("managedFields"), "the managed fields are shown as a table, not in the manifest")

	secret := get(t, s, "/targets/shop/web/objects/shop_db__Secret").Body.String()
	g.Expect(secret).To(ContainSubstring("A Secret&#39;s data is never shown"))
	g.Expect(secret).To(ContainSubstring("name: db"))
	g.Expect(secret).NotTo(ContainSubstring("hunter2"))
	g.Expect(secret).NotTo(ContainSubstring("aHVudGVyMi1zM2NyZXQ"), "nor base64")
	g.Expect(secret).NotTo(ContainSubstring("password"), "nor its keys")

	g.Expect(get(t, s, "/targets/shop/web/objects/shop_gone__ConfigMap").Body.String()).To(ContainSubstring("not found in the cluster"))
	missing := get(t, s, "/targets/shop/web/objects/kube-system_coredns__ConfigMap")
	g.Expect(missing.Code).To(Equal(http.StatusNotFound))
	g.Expect(missing.Body.String()).To(ContainSubstring("SyncTarget shop/web has no object kube-system_coredns__ConfigMap in its inventory"))
}

// TestObjectInTheBrowser opens an object from a SyncTarget's tree in Chromium.
func TestObjectInTheBrowser(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a browser")
	}
	g := NewWithT(t)
	s, _ := objectTarget(t)
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)

	ctx := browsertest.New(t)
	g.Expect(chromedp.Do(ctx, chromedp.Navigate(srv.URL+"/targets/shop/web"), chromedp.WaitVisible(chromedp.CSS("ul.tree")))).To(Succeed())
	g.Expect(within(ctx, chromedp.Click(chromedp.CSS(`a.obj[href$="shop_settings__ConfigMap"]`)), chromedp.WaitVisible(chromedp.CSS("pre.manifest")))).To(Succeed())
	text, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.body.innerText`))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(text).To(ContainSubstring("kubectl-edit"))
	g.Expect(text).To(ContainSubstring("debug turned on"))
	browsertest.Screenshot(t, ctx, "memory-object")
}

// TestInClusterObjectPageAsksForTheObject: in the cluster, a user who may read a
// SyncTarget but not its ConfigMap sees that it may not, and nothing of the ConfigMap; once
// allowed to get ConfigMaps, the user sees it.
func TestInClusterObjectPageAsksForTheObject(t *testing.T) {
	c, cfg := cluster(t)
	g := NewWithT(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	st := fakeTarget("obj-a", "web", true)
	st.Status.Inventory = &convergev1.ResourceInventory{Entries: []convergev1.InventoryEntry{{ID: "obj-a_settings__ConfigMap", Version: "v1"}}}
	createTarget(t, c, st)
	g.Expect(c.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "obj-a", Name: "settings"},
		Data: map[string]string{"mode": "blue-green"}})).To(Succeed())
	g.Expect(c.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: "obj-a", Name: "carol"}})).To(Succeed())
	grant(t, c, "obj-a", "carol", "read", "get", "list", "watch")
	cs, err := kubernetes.NewForConfig(cfg)
	g.Expect(err).NotTo(HaveOccurred())
	tr, err := cs.CoreV1().ServiceAccounts("obj-a").CreateToken(ctx, "carol", &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	token := tr.Status.Token
	s, err := New(ctx, Options{Config: cfg, InCluster: &InCluster{Client: c, CacheTTL: time.Nanosecond}})
	g.Expect(err).NotTo(HaveOccurred())

	refused := as(s, token, "GET", "/targets/obj-a/web/objects/obj-a_settings__ConfigMap", nil).Body.String()
	g.Expect(refused).To(ContainSubstring("you may not read it"))
	g.Expect(refused).NotTo(ContainSubstring("blue-green"))

	if err := c.Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: "obj-a", Name: "configmaps"}, Rules: []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get"}}}}); err != nil {
		t.Fatal(err)
	}
	g.Expect(c.Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: "obj-a", Name: "configmaps"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "configmaps"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: "obj-a", Name: "carol"}}})).To(Succeed())
	g.Eventually(func() string {
		return as(s, token, "GET", "/targets/obj-a/web/objects/obj-a_settings__ConfigMap", nil).Body.String()
	}).Should(ContainSubstring("blue-green"))
}
