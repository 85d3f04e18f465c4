package remote

import (
	"context"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/metadata"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/converge-gitops/converge/health"
	"github.com/converge-gitops/converge/internal/localcluster"
	"github.com/converge-gitops/converge/internal/localcluster/clustertest"
)

// TestARealAPIServerAnswersThrough: everything converge asks a remote cluster (discovery,
// reads, writes, JSON and protobuf watches, refusals as Status) passes the transport's
// checks of its answers unchanged.
func TestARealAPIServerAnswersThrough(t *testing.T) {
	lc := clustertest.Start(t, localcluster.Options{})
	kc, err := lc.KubeconfigBytes()
	if err != nil {
		t.Fatal(err)
	}
	cs := NewClusters(Options{Secrets: secretReader(t, map[string][]byte{"value": kc}), AllowLoopback: true})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cluster, err := cs.Acquire(ctx, syncTarget("app", "kc", ""))
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Release(client.ObjectKey{Namespace: "team", Name: "app"})
	c, err := cluster.Client("")
	if err != nil {
		t.Fatal(err)
	}
	wc := c.(client.WithWatch)
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team"}}); err != nil {
		t.Fatal(err)
	}
	err = c.Get(ctx, client.ObjectKey{Namespace: "team", Name: "cm"}, &corev1.ConfigMap{})
	if !apierrors.IsNotFound(err) {
		t.Fatalf("want the API server's NotFound, got %v", err)
	}
	list := &unstructured.UnstructuredList{}
	list.SetGroupVersionKind(schema.GroupVersionKind{Version: "v1", Kind: "ConfigMapList"})
	w, err := wc.Watch(ctx, list, client.InNamespace("team"))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	md, err := metadata.NewForConfig(cluster.config)
	if err != nil {
		t.Fatal(err)
	}
	mw, err := md.Resource(corev1.SchemeGroupVersion.WithResource("configmaps")).Namespace("team").Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer mw.Stop()

	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "cm"}, Data: map[string]string{"kind": "x"}}
	if err := c.Create(ctx, cm); err != nil {
		t.Fatal(err)
	}
	for name, ch := range map[string]<-chan watch.Event{"json watch": w.ResultChan(), "protobuf metadata watch": mw.ResultChan()} {
		if ev := firstEvent(t, ch, "cm"); ev.Type != watch.Added {
			t.Fatalf("%s: want cm added, got %s %v", name, ev.Type, ev.Object)
		}
	}
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(schema.GroupVersionKind{Version: "v1", Kind: "ConfigMap"})
	if err := c.Get(ctx, client.ObjectKeyFromObject(cm), u); err != nil || u.GetName() != "cm" {
		t.Fatalf("unstructured get: %v", err)
	}
	if _, err := md.Resource(corev1.SchemeGroupVersion.WithResource("configmaps")).Namespace("team").List(ctx, metav1.ListOptions{}); err != nil {
		t.Fatalf("protobuf metadata list: %v", err)
	}
	checker, err := cluster.Checker("")
	if err != nil {
		t.Fatal(err)
	}
	ref := health.ObjectRef{GVK: schema.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}, Namespace: "team", Name: "cm"}
	if _, err := checker.Wait(ctx, []health.ObjectRef{ref}, health.Options{Timeout: 30 * time.Second}); err != nil {
		t.Fatalf("health wait: %v", err)
	}
	stranger, err := cluster.Client("stranger")
	if err != nil {
		t.Fatal(err)
	}
	if err := stranger.Get(ctx, client.ObjectKeyFromObject(cm), &corev1.ConfigMap{}); !apierrors.IsForbidden(err) {
		t.Fatalf("want the API server's Forbidden for an impersonated stranger, got %v", err)
	}

	// Discovery passes too: the capabilities a chart is rendered for are the cluster's,
	// the same through the remote transport as straight from the daemon's config.
	caps, err := cluster.Capabilities()
	if err != nil {
		t.Fatal(err)
	}
	version, err := discovery.NewDiscoveryClientForConfigOrDie(lc.Config).ServerVersion()
	if err != nil {
		t.Fatal(err)
	}
	if caps.KubeVersion != version.GitVersion || caps.KubeVersion == "" {
		t.Errorf("kube version %q, want the API server's %q", caps.KubeVersion, version.GitVersion)
	}
	for _, want := range []string{"v1", "v1/ConfigMap", "apps/v1", "apps/v1/Deployment", "apps/v1/Scale", "rbac.authorization.k8s.io/v1/ClusterRole"} {
		if !slices.Contains(caps.APIVersions, want) {
			t.Errorf("capabilities lack %s", want)
		}
	}
	if !slices.IsSorted(caps.APIVersions) || slices.Contains(caps.APIVersions, "apps/v1/NoSuchKind") {
		t.Errorf("capabilities: sorted, only what is served")
	}
	direct, err := NewIdentities("", lc.Config, nil, nil).Capabilities()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(direct.APIVersions, caps.APIVersions) || direct.KubeVersion != caps.KubeVersion {
		t.Errorf("through the remote transport: %d API versions, straight: %d", len(caps.APIVersions), len(direct.APIVersions))
	}
}

// firstEvent returns the first event of ch about the object name, skipping others.
func firstEvent(t *testing.T, ch <-chan watch.Event, name string) watch.Event {
	t.Helper()
	timeout := time.After(30 * time.Second)
	for {
		select {
		case ev, ok := <-ch:
			if !ok {
				t.Fatal("the watch ended")
			}
			if o, ok := ev.Object.(metav1.Object); !ok || o.GetName() == name {
				return ev
			}
		case <-timeout:
			t.Fatalf("no event about %s", name)
		}
	}
}
