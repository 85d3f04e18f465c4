package tree

import (
	"context"
	"fmt"
	"testing"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
)

// TestOwnedIndexAnswersAsLoadOwned: the index of 40 Deployments and their Services
// answers for each what LoadOwned reads for it alone — newest ReplicaSet first, its
// Pods, a Service's EndpointSlices, a stranger's Pod left out — with one list per kind
// and namespace, not one per object; a kind the caller may not list is noted.
func TestOwnedIndexAnswersAsLoadOwned(t *testing.T) {
	g := NewWithT(t)
	s := runtime.NewScheme()
	g.Expect(clientgoscheme.AddToScheme(s)).To(Succeed())
	var objs []client.Object
	var nodes []Node
	for i := range 40 {
		name := fmt.Sprintf("web-%02d", i)
		uid := types.UID("dep-" + name)
		sel := map[string]string{"app": name}
		objs = append(objs,
			&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: name, UID: uid},
				Spec: appsv1.DeploymentSpec{Selector: &metav1.LabelSelector{MatchLabels: sel}}},
			&appsv1.ReplicaSet{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: name + "-rs", UID: uid + "-rs", Labels: sel,
				OwnerReferences: controlledBy("Deployment", name, uid)},
				Spec: appsv1.ReplicaSetSpec{Selector: &metav1.LabelSelector{MatchLabels: sel}}},
			&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: name + "-rs-1", Labels: sel,
				OwnerReferences: controlledBy("ReplicaSet", name+"-rs", uid+"-rs")}},
			&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: name + "-stranger", Labels: sel,
				OwnerReferences: controlledBy("ReplicaSet", "other", "rs-other")}},
			&corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: name, UID: uid + "-svc"}},
			&discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: name + "-abcde",
				Labels: map[string]string{"kubernetes.io/service-name": name}}, AddressType: discoveryv1.AddressTypeIPv4})
		nodes = append(nodes,
			Node{APIVersion: "apps/v1", Kind: "Deployment", Namespace: "shop", Name: name, UID: uid},
			Node{APIVersion: "v1", Kind: "Service", Namespace: "shop", Name: name, UID: uid + "-svc"},
			Node{APIVersion: "v1", Kind: "ConfigMap", Namespace: "shop", Name: name, UID: uid + "-cm"})
	}
	lists := map[string]int{}
	base := fake.NewClientBuilder().WithScheme(s).WithObjects(objs...).Build()
	c := interceptor.NewClient(base, interceptor.Funcs{
		List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
			lists[fmt.Sprintf("%T", list)+list.GetObjectKind().GroupVersionKind().Kind]++
			return c.List(ctx, list, opts...)
		}})

	ix := LoadOwnedIndex(context.Background(), c, nodes, nil)
	g.Expect(ix.Notes).To(BeEmpty())
	total := 0
	for _, n := range lists {
		total += n
	}
	g.Expect(total).To(Equal(3), "one list each of ReplicaSets, Pods and EndpointSlices: %v", lists)
	for i, n := range nodes {
		got := ix.Of(n)
		switch n.Kind {
		case "ConfigMap":
			g.Expect(got).To(BeEmpty())
			continue
		case "Deployment":
			g.Expect(got).To(ConsistOf(And(HaveField("Kind", "ReplicaSet"),
				HaveField("Owned", ConsistOf(HaveField("Name", n.Name+"-rs-1"))))))
		case "Service":
			g.Expect(got).To(ConsistOf(HaveField("Name", n.Name+"-abcde")))
		}
		live := asLive(t, base, objs[i/3*6+map[string]int{"Deployment": 0, "Service": 4}[n.Kind]],
			schema.FromAPIVersionAndKind(n.APIVersion, n.Kind))
		g.Expect(got).To(Equal(LoadOwned(context.Background(), base, live, nil).Owned), "%s %s", n.Kind, n.Name)
	}

	noPods := func(_ context.Context, gvk schema.GroupVersionKind, _ string) bool { return gvk.Kind != "Pod" }
	ix = LoadOwnedIndex(context.Background(), base, nodes[:1], noPods)
	g.Expect(ix.Notes).To(ConsistOf("you may not list Pods in namespace shop"))
	g.Expect(ix.Of(nodes[0])).To(ConsistOf(HaveField("Owned", BeEmpty())))
	g.Expect(ix.Of(Node{APIVersion: "apps/v1", Kind: "Deployment", Namespace: "shop", Name: "unread"})).To(BeEmpty(), "an object not read has no UID")
}
