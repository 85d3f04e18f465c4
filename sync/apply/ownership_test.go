package apply

import (
	"context"
	"testing"

	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
)

func ownedConfigMap(name string, owner client.ObjectKey) *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetAPIVersion("v1")
	u.SetKind("ConfigMap")
	u.SetNamespace("app")
	u.SetName(name)
	if owner.Name != "" {
		u.SetLabels(map[string]string{convergev1.NameLabel: owner.Name, convergev1.NamespaceLabel: owner.Namespace})
	}
	return u
}

// TestCheckOwnershipCached: a kind the watch cache answers for costs no request unless it
// shows another SyncTarget's claim; then the conflict is decided from what the caller's
// identity reads, as without a cache.
func TestCheckOwnershipCached(t *testing.T) {
	me := client.ObjectKey{Namespace: "team", Name: "me"}
	other := client.ObjectKey{Namespace: "team", Name: "other"}
	cmGVK := schema.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}
	exists := func(_ context.Context, k client.ObjectKey) (bool, error) { return k == other, nil }
	cacheOf := func(objs ...*unstructured.Unstructured) Managed {
		return func(gvk schema.GroupVersionKind, ns, name string) (map[string]string, bool, bool) {
			if gvk != cmGVK {
				return nil, false, false
			}
			for _, o := range objs {
				if o.GetNamespace() == ns && o.GetName() == name {
					return o.GetLabels(), true, true
				}
			}
			return nil, false, true
		}
	}
	scheme := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(scheme)
	type calls struct{ gets, lists int }
	clientWith := func(forbidden bool, live ...client.Object) (client.Client, *calls) {
		n := &calls{}
		c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(live...).WithInterceptorFuncs(interceptor.Funcs{
			Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
				n.gets++
				if forbidden {
					return apierrors.NewForbidden(schema.GroupResource{Resource: "configmaps"}, key.Name, nil)
				}
				return c.Get(ctx, key, obj, opts...)
			},
			List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
				n.lists++
				return c.List(ctx, list, opts...)
			},
		}).Build()
		return c, n
	}

	t.Run("absent or unlabelled: no request", func(t *testing.T) {
		g := NewWithT(t)
		c, n := clientWith(false)
		_, err := CheckOwnershipCached(t.Context(), c, me, exists, cacheOf(),
			[]*unstructured.Unstructured{ownedConfigMap("a", me), ownedConfigMap("b", me)})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(*n).To(Equal(calls{}))
	})
	t.Run("several owned already: no request, the apply lists what it applies, once", func(t *testing.T) {
		g := NewWithT(t)
		a, b, c1 := ownedConfigMap("a", me), ownedConfigMap("b", me), ownedConfigMap("c", me)
		c, n := clientWith(false, a.DeepCopy(), b.DeepCopy(), c1.DeepCopy())
		objects := []*unstructured.Unstructured{a, b, c1}
		live, err := CheckOwnershipCached(t.Context(), c, me, exists, cacheOf(a, b, c1), objects)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(*n).To(Equal(calls{}))

		// A commit that changes one of them: nothing to list, its dry-run reads it.
		g.Expect(listOwned(t.Context(), c, objects[:1], live).Get(a)).To(BeNil())
		g.Expect(*n).To(Equal(calls{}))
		// A full apply: one list, kept.
		live = listOwned(t.Context(), c, objects, live)
		g.Expect(live.Get(a)).NotTo(BeNil())
		g.Expect(live.Get(c1)).NotTo(BeNil())
		listOwned(t.Context(), c, objects, live)
		g.Expect(*n).To(Equal(calls{lists: 1}))
	})
	t.Run("read without a cache: listed once, for the check and the apply", func(t *testing.T) {
		g := NewWithT(t)
		a, b := ownedConfigMap("a", me), ownedConfigMap("b", me)
		c, n := clientWith(false, a.DeepCopy(), b.DeepCopy())
		live, err := CheckOwnership(t.Context(), c, me, exists, []*unstructured.Unstructured{a, b})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(*n).To(Equal(calls{lists: 2}), "the metadata of what converge manages, then the owner's whole")
		listOwned(t.Context(), c, []*unstructured.Unstructured{a, b}, live)
		g.Expect(*n).To(Equal(calls{lists: 2}))
		g.Expect(live.Get(b)).NotTo(BeNil())
	})
	t.Run("another's claim: read through the client and refused", func(t *testing.T) {
		g := NewWithT(t)
		theirs := ownedConfigMap("a", other)
		c, n := clientWith(false, theirs.DeepCopy())
		_, err := CheckOwnershipCached(t.Context(), c, me, exists, cacheOf(theirs), []*unstructured.Unstructured{ownedConfigMap("a", me)})
		g.Expect(err).To(MatchError(ContainSubstring("ConfigMap app/a is managed by SyncTarget team/other")))
		g.Expect(n.gets).To(Equal(1))
	})
	t.Run("another's claim the caller may not read: the apply decides", func(t *testing.T) {
		g := NewWithT(t)
		theirs := ownedConfigMap("a", other)
		c, n := clientWith(true, theirs.DeepCopy())
		_, err := CheckOwnershipCached(t.Context(), c, me, exists, cacheOf(theirs), []*unstructured.Unstructured{ownedConfigMap("a", me)})
		g.Expect(err).NotTo(HaveOccurred(), "the cache's view is never reported to the caller")
		g.Expect(n.gets).To(Equal(1))
	})
	t.Run("a kind the cache does not know: read", func(t *testing.T) {
		g := NewWithT(t)
		c, n := clientWith(false)
		sa := ownedConfigMap("sa", me)
		sa.SetKind("ServiceAccount")
		_, err := CheckOwnershipCached(t.Context(), c, me, exists, cacheOf(), []*unstructured.Unstructured{sa})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(n.gets).To(Equal(1))
	})
}
