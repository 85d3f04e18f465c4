package tree

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
)

func controlledBy(kind, name string, uid types.UID) []metav1.OwnerReference {
	return []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: kind, Name: name, UID: uid, Controller: ptr.To(true)}}
}

// asLive reads obj back as the live object a page would hold.
func asLive(t *testing.T, c client.Client, obj client.Object, gvk schema.GroupVersionKind) *unstructured.Unstructured {
	t.Helper()
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(gvk)
	if err := c.Get(context.Background(), client.ObjectKeyFromObject(obj), u); err != nil {
		t.Fatal(err)
	}
	return u
}

// A Deployment owns its ReplicaSets, newest first, and they their Pods, each with its
// health; a Pod of the same labels that another controller owns is not the Deployment's;
// a Service owns its EndpointSlices; a kind the caller may not list is left out, noted.
func TestLoadOwnedFollowsControllers(t *testing.T) {
	g := NewWithT(t)
	s := runtime.NewScheme()
	g.Expect(clientgoscheme.AddToScheme(s)).To(Succeed())
	labels := map[string]string{"app": "web"}
	old := metav1.NewTime(time.Now().Add(-time.Hour))
	dep := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web", UID: "dep"},
		Spec: appsv1.DeploymentSpec{Selector: &metav1.LabelSelector{MatchLabels: labels}}}
	rsNew := &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web-new", UID: "rs-new", Labels: map[string]string{"app": "web", "hash": "new"},
		CreationTimestamp: metav1.Now(), OwnerReferences: controlledBy("Deployment", "web", "dep"), Generation: 1},
		Spec:   appsv1.ReplicaSetSpec{Replicas: ptr.To[int32](1), Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web", "hash": "new"}}},
		Status: appsv1.ReplicaSetStatus{ObservedGeneration: 1, Replicas: 1, ReadyReplicas: 1, AvailableReplicas: 1, FullyLabeledReplicas: 1}}
	rsOld := &appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web-old", UID: "rs-old", Labels: map[string]string{"app": "web", "hash": "old"},
		CreationTimestamp: old, OwnerReferences: controlledBy("Deployment", "web", "dep")},
		Spec: appsv1.ReplicaSetSpec{Replicas: ptr.To[int32](0), Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web", "hash": "old"}}}}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web-new-1", Labels: map[string]string{"app": "web", "hash": "new"},
		OwnerReferences: controlledBy("ReplicaSet", "web-new", "rs-new")},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}}
	stranger := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web-stranger", Labels: map[string]string{"app": "web", "hash": "new"},
		OwnerReferences: controlledBy("ReplicaSet", "other", "rs-other")}}
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web", UID: "svc"}}
	slice := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web-abcde",
		Labels: map[string]string{"kubernetes.io/service-name": "web"}}, AddressType: discoveryv1.AddressTypeIPv4}
	c := fake.NewClientBuilder().WithScheme(s).WithObjects(dep, rsNew, rsOld, pod, stranger, svc, slice).Build()

	res := LoadOwned(context.Background(), c, asLive(t, c, dep, appsv1.SchemeGroupVersion.WithKind("Deployment")), nil)
	g.Expect(res.Notes).To(BeEmpty())
	g.Expect(res.Owned).To(HaveLen(2))
	g.Expect(res.Owned[0].Name).To(Equal("web-new"), "newest first")
	g.Expect(res.Owned[0].Kind).To(Equal("ReplicaSet"))
	g.Expect(res.Owned[0].Owned).To(HaveLen(1))
	g.Expect(res.Owned[0].Owned[0]).To(And(HaveField("Kind", "Pod"), HaveField("Name", "web-new-1")))
	g.Expect(res.Owned[0].Owned[0].Status).NotTo(BeEmpty())
	g.Expect(res.Owned[1].Name).To(Equal("web-old"))
	g.Expect(res.Owned[1].Owned).To(BeEmpty())

	res = LoadOwned(context.Background(), c, asLive(t, c, svc, corev1.SchemeGroupVersion.WithKind("Service")), nil)
	g.Expect(res.Owned).To(ConsistOf(HaveField("Name", "web-abcde")))

	noPods := func(_ context.Context, gvk schema.GroupVersionKind, _ string) bool { return gvk.Kind != "Pod" }
	res = LoadOwned(context.Background(), c, asLive(t, c, dep, appsv1.SchemeGroupVersion.WithKind("Deployment")), noPods)
	g.Expect(res.Owned).To(HaveLen(2))
	g.Expect(res.Owned[0].Owned).To(BeEmpty())
	g.Expect(res.Notes).To(ContainElement("you may not list Pods in namespace shop"))
	g.Expect(HasOwned(appsv1.SchemeGroupVersion.WithKind("Deployment"))).To(BeTrue())
	g.Expect(HasOwned(corev1.SchemeGroupVersion.WithKind("ConfigMap"))).To(BeFalse())
}
