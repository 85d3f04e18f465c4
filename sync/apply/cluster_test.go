package apply

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/converge-gitops/converge/internal/localcluster"
	"github.com/converge-gitops/converge/internal/localcluster/clustertest"
)

// The cluster tests share one API server (etcd and kube-apiserver, no controllers: the
// API server establishes CRDs itself), started by the first test that needs it and
// stopped by TestMain. The pure tests never start it.
var shared = clustertest.NewShared(localcluster.Options{})

func TestMain(m *testing.M) { os.Exit(shared.Stop(m.Run())) }

// testCluster returns the shared cluster, starting it on first use.
func testCluster(t *testing.T) *localcluster.Cluster {
	t.Helper()
	return shared.Get(t)
}

// An apply of a CRD, a Namespace and objects of both in one go waits, between the
// stages, for the CRD to be Established (and served) through the health engine, which
// watches it when the client can watch and lists it again while it cannot (the
// daemon's client today): either way the Gizmo of the next stage applies. (The watch
// itself is tested deterministically in TestStageWaitGoesThroughTheHealthEngine.)
func TestApplyWaitsForTheCRDStageThroughTheHealthEngine(t *testing.T) {
	cfg := testCluster(t).Config
	tests := []struct {
		name  string
		watch bool
	}{
		{name: "watching client", watch: true},
		{name: "client that cannot watch", watch: false},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			base, err := client.NewWithWatch(cfg, client.Options{})
			g.Expect(err).NotTo(HaveOccurred())
			var crdLists, crdWatches atomic.Int32
			isCRDs := func(l client.ObjectList) bool {
				return l.GetObjectKind().GroupVersionKind().Kind == "CustomResourceDefinitionList"
			}
			counted := interceptor.NewClient(base, interceptor.Funcs{
				List: func(ctx context.Context, c client.WithWatch, l client.ObjectList, opts ...client.ListOption) error {
					if isCRDs(l) {
						crdLists.Add(1)
					}
					return c.List(ctx, l, opts...)
				},
				Watch: func(ctx context.Context, c client.WithWatch, l client.ObjectList, opts ...client.ListOption) (watch.Interface, error) {
					if isCRDs(l) {
						crdWatches.Add(1)
					}
					return c.Watch(ctx, l, opts...)
				},
			})
			var c client.Client = counted
			if !tt.watch {
				c = struct{ client.Client }{counted}
			}

			group := fmt.Sprintf("stage%d.example.com", i)
			objects := []*unstructured.Unstructured{
				parse(t, `{apiVersion: example.com/v1, kind: Gizmo, metadata: {name: g, namespace: shop`+fmt.Sprint(i)+`}, spec: {size: 3}}`),
				parse(t, `{apiVersion: v1, kind: Namespace, metadata: {name: shop`+fmt.Sprint(i)+`}}`),
				parse(t, strings.ReplaceAll(`apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: gizmos.GROUP}
spec:
  group: GROUP
  names: {kind: Gizmo, plural: gizmos, listKind: GizmoList, singular: gizmo}
  scope: Namespaced
  versions:
  - name: v1
    served: true
    storage: true
    schema: {openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}}
`, "GROUP", group)),
			}
			objects[0].SetAPIVersion(group + "/v1")

			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			defer cancel()
			res, err := Applier{}.Apply(ctx, c, objects, nil, 30*time.Second, Options{})
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(res.Created).To(Equal(3))
			gizmo := &unstructured.Unstructured{}
			gizmo.SetGroupVersionKind(objects[0].GroupVersionKind())
			g.Expect(c.Get(ctx, client.ObjectKeyFromObject(objects[0]), gizmo)).To(Succeed())

			// The answer to its creation shows the CRD Installing: the engine reads it (by
			// then the list may find it Established already, and no watch is needed).
			g.Expect(crdLists.Load()).To(BeNumerically(">=", 1), "the new CRD was read until Established")
			if !tt.watch {
				g.Expect(crdWatches.Load()).To(BeZero())
			}
		})
	}
}
