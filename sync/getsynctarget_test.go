package sync

import (
	"context"
	"testing"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
)

// TestGetSyncTargetAroundAStaleCache: a cache behind our last status write is answered
// with what that write returned, without a request; a cache ahead of it, or an object
// that is not the one written (recreated), is read from the API server.
func TestGetSyncTargetAroundAStaleCache(t *testing.T) {
	scheme := runtime.NewScheme()
	_ = convergev1.AddToScheme(scheme)
	key := client.ObjectKey{Namespace: "team", Name: "app"}
	target := func(rv, uid, msg string) *convergev1.SyncTarget {
		st := &convergev1.SyncTarget{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name,
			ResourceVersion: rv, UID: types.UID(uid)}}
		st.Status.LastAttemptedRevision = msg
		return st
	}
	for _, tc := range []struct {
		name       string
		cached     string // the cache's resourceVersion
		uid        string // the cache's UID
		wantReads  int
		wantStatus string
	}{
		{name: "caught up", cached: "20", uid: "u1", wantReads: 0, wantStatus: "cache"},
		{name: "behind our write", cached: "10", uid: "u1", wantReads: 0, wantStatus: "written"},
		{name: "ahead of our write", cached: "30", uid: "u1", wantReads: 1, wantStatus: "api"},
		{name: "another object", cached: "10", uid: "u2", wantReads: 1, wantStatus: "api"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			cache := fake.NewClientBuilder().WithScheme(scheme).Build()
			cached := target("", tc.uid, "cache")
			g.Expect(cache.Create(context.Background(), cached)).To(Succeed())
			reads := 0
			api := interceptor.NewClient(fake.NewClientBuilder().WithScheme(scheme).WithObjects(target("", tc.uid, "api")).Build(),
				interceptor.Funcs{Get: func(ctx context.Context, c client.WithWatch, k client.ObjectKey, o client.Object, opts ...client.GetOption) error {
					reads++
					return c.Get(ctx, k, o, opts...)
				}})
			r := &Reconciler{Client: interceptor.NewClient(cache, interceptor.Funcs{
				Get: func(ctx context.Context, c client.WithWatch, k client.ObjectKey, o client.Object, opts ...client.GetOption) error {
					if err := c.Get(ctx, k, o, opts...); err != nil {
						return err
					}
					o.SetResourceVersion(tc.cached) // the version the cache holds
					return nil
				}}), APIReader: api}
			state := r.states.get(key)
			state.lastWrite, state.written = "20", target("20", "u1", "written")
			if tc.cached == "20" {
				state.written.Status.LastAttemptedRevision = "cache"
			}

			st, err := r.getSyncTarget(context.Background(), key)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(reads).To(Equal(tc.wantReads))
			g.Expect(st.Status.LastAttemptedRevision).To(Equal(tc.wantStatus))
		})
	}
}
