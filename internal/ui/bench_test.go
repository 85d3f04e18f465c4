package ui

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
)

// BenchmarkOverview1000 renders the overview of 1000 SyncTargets from memory and
// reports the page's size, as sent to a browser (gzip) and uncompressed.
func BenchmarkOverview1000(b *testing.B) {
	s := NewWithStore(Options{Now: func() time.Time { return fixedNow }}, NewMemoryStore(fakeTargets(1000), nil), nil)
	var plain, gzipped int
	for b.Loop() {
		plain = overviewBytes(b, s, "")
		gzipped = overviewBytes(b, s, "gzip")
	}
	b.ReportMetric(float64(plain), "bytes/page")
	b.ReportMetric(float64(gzipped), "gzip-bytes/page")
}

func overviewBytes(b *testing.B, s *Server, encoding string) int {
	req := httptest.NewRequest(http.MethodGet, "/", nil)
	req.Header.Set("Accept-Encoding", encoding)
	rec := httptest.NewRecorder()
	s.ServeHTTP(rec, req)
	if rec.Code != http.StatusOK {
		b.Fatalf("status %d: %s", rec.Code, rec.Body)
	}
	return rec.Body.Len()
}

// BenchmarkResourceGraph1000 draws the resource graph of a SyncTarget of 1000 objects
// (250 Deployments with a ReplicaSet and 2 Pods each, 250 Services with an
// EndpointSlice each, 500 ConfigMaps), read from an in-memory client, folded as it
// opens and with every kind open; the baseline is the SyncTarget's page (its object
// tree) in the same process. It reports the ratio of each graph's time to the page's,
// the pages' sizes, the nodes drawn and the lists one graph makes.
func BenchmarkResourceGraph1000(b *testing.B) {
	st, objs := bigTarget(250, 250, 500)
	var lists atomic.Int32
	c := interceptor.NewClient(fake.NewClientBuilder().WithScheme(scheme()).WithObjects(objs...).Build(), interceptor.Funcs{
		List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
			lists.Add(1)
			return c.List(ctx, list, opts...)
		}})
	s := NewWithStore(Options{Now: func() time.Time { return fixedNow }}, NewMemoryStore([]convergev1.SyncTarget{st}, nil), c)
	page := func(path string) (time.Duration, string) {
		start := time.Now()
		rec := httptest.NewRecorder()
		s.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		if rec.Code != http.StatusOK {
			b.Fatalf("%s: status %d", path, rec.Code)
		}
		return time.Since(start), rec.Body.String()
	}
	const open = "/targets/big/app/graph?open=big%2FConfigMap,big%2FDeployment.apps,big%2FService"
	var tPage, tFolded, tOpen time.Duration
	var pageBody, folded, opened string
	for b.Loop() {
		var d time.Duration
		d, pageBody = page("/targets/big/app")
		tPage += d
		d, folded = page("/targets/big/app/graph")
		tFolded += d
		lists.Store(0)
		d, opened = page(open)
		tOpen += d
	}
	b.ReportMetric(float64(tFolded)/float64(tPage), "folded-x-page")
	b.ReportMetric(float64(tOpen)/float64(tPage), "open-x-page")
	b.ReportMetric(float64(len(pageBody)), "page-bytes")
	b.ReportMetric(float64(len(folded)), "folded-bytes")
	b.ReportMetric(float64(len(opened)), "open-bytes")
	b.ReportMetric(float64(strings.Count(folded, "<rect ")), "folded-nodes")
	b.ReportMetric(float64(strings.Count(opened, "<rect ")), "open-nodes")
	b.ReportMetric(float64(lists.Load()), "lists/graph")
}

// bigTarget is a SyncTarget of deployments Deployments (each with a ReplicaSet of 2
// ready Pods), services Services (each with an EndpointSlice) and configMaps
// ConfigMaps in namespace big, and those objects.
func bigTarget(deployments, services, configMaps int) (convergev1.SyncTarget, []client.Object) {
	st := fakeTarget("big", "app", true)
	st.Status.Inventory = &convergev1.ResourceInventory{}
	var objs []client.Object
	add := func(o client.Object, id string) {
		objs = append(objs, o)
		if id != "" {
			st.Status.Inventory.Entries = append(st.Status.Inventory.Entries, convergev1.InventoryEntry{ID: id, Version: "v1"})
		}
	}
	meta := func(name string, uid types.UID, owner *metav1.OwnerReference, labels map[string]string) metav1.ObjectMeta {
		m := metav1.ObjectMeta{Namespace: "big", Name: name, UID: uid, Labels: labels}
		if owner != nil {
			m.OwnerReferences = []metav1.OwnerReference{*owner}
		}
		return m
	}
	ready := corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}
	for i := range deployments {
		name := fmt.Sprintf("web-%03d", i)
		sel := map[string]string{"app": name}
		uid := types.UID("uid-" + name)
		add(&appsv1.Deployment{ObjectMeta: meta(name, uid, nil, sel),
			Spec: appsv1.DeploymentSpec{Replicas: ptr.To[int32](2), Selector: &metav1.LabelSelector{MatchLabels: sel}},
			Status: appsv1.DeploymentStatus{Replicas: 2, UpdatedReplicas: 2, ReadyReplicas: 2, AvailableReplicas: 2,
				Conditions: []appsv1.DeploymentCondition{{Type: appsv1.DeploymentAvailable, Status: corev1.ConditionTrue},
					{Type: appsv1.DeploymentProgressing, Status: corev1.ConditionTrue, Reason: "NewReplicaSetAvailable"}}}},
			"big_"+name+"_apps_Deployment")
		add(&appsv1.ReplicaSet{ObjectMeta: meta(name+"-rs", uid+"-rs", &metav1.OwnerReference{APIVersion: "apps/v1", Kind: "Deployment",
			Name: name, UID: uid, Controller: ptr.To(true)}, sel), Spec: appsv1.ReplicaSetSpec{Selector: &metav1.LabelSelector{MatchLabels: sel}}}, "")
		for p := range 2 {
			add(&corev1.Pod{ObjectMeta: meta(fmt.Sprintf("%s-rs-%d", name, p), "", &metav1.OwnerReference{APIVersion: "apps/v1", Kind: "ReplicaSet",
				Name: name + "-rs", UID: uid + "-rs", Controller: ptr.To(true)}, sel), Status: ready}, "")
		}
	}
	for i := range services {
		name := fmt.Sprintf("svc-%03d", i)
		add(&corev1.Service{ObjectMeta: meta(name, types.UID("uid-"+name), nil, nil)}, "big_"+name+"__Service")
		add(&discoveryv1.EndpointSlice{ObjectMeta: meta(name+"-x", "", nil, map[string]string{"kubernetes.io/service-name": name}),
			AddressType: discoveryv1.AddressTypeIPv4}, "")
	}
	for i := range configMaps {
		name := fmt.Sprintf("cm-%03d", i)
		add(&corev1.ConfigMap{ObjectMeta: meta(name, types.UID("uid-"+name), nil, nil)}, "big_"+name+"__ConfigMap")
	}
	return st, objs
}
