package reconciler

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
	"github.com/converge-gitops/converge/health"
	"github.com/converge-gitops/converge/sync/reconciler/reconcilertest"
)

// checkedCluster is a fake cluster whose health checker is a real one over a fake
// dynamic client; it notes the users it is asked for.
type checkedCluster struct {
	*reconcilertest.Cluster
	checker *health.Checker
	users   *[]string
}

func (c checkedCluster) Checker(user string) (*health.Checker, error) {
	*c.users = append(*c.users, user)
	return c.checker, nil
}

// TestWatchHealthWatchesOnTheTargetsClusterAsItsUser: the daemon's health wait asks the
// SyncTarget's cluster for the checker of the identity that applied its objects, and
// waits there for the objects and the spec.healthChecks.
func TestWatchHealthWatchesOnTheTargetsClusterAsItsUser(t *testing.T) {
	g := NewWithT(t)
	scheme := runtime.NewScheme()
	g.Expect(clientgoscheme.AddToScheme(scheme)).To(Succeed())
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web"}}
	extra := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "extra"}}
	dyn := dynamicfake.NewSimpleDynamicClient(scheme, cm, extra)
	mapper := meta.NewDefaultRESTMapper(nil)
	mapper.Add(corev1.SchemeGroupVersion.WithKind("ConfigMap"), meta.RESTScopeNamespace)
	var users []string
	on := checkedCluster{checker: health.NewForClients(dyn, nil, mapper), users: &users}

	st := &convergev1.SyncTarget{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "app"}}
	st.Spec.HealthChecks = []convergev1.NamespacedObjectKindReference{{APIVersion: "v1", Kind: "ConfigMap", Name: "extra", Namespace: "shop"}}
	obj := &unstructured.Unstructured{}
	obj.SetAPIVersion("v1")
	obj.SetKind("ConfigMap")
	obj.SetNamespace("shop")
	obj.SetName("web")
	h := &WatchHealth{DefaultServiceAccount: "deployer"}
	err := h.Wait(context.Background(), on, st, []*unstructured.Unstructured{obj}, nil, time.Time{}, 10*time.Second, nil)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(users).To(Equal([]string{"system:serviceaccount:shop:deployer"}))

	st.Spec.HealthChecks = []convergev1.NamespacedObjectKindReference{{APIVersion: "not/a/version", Kind: "ConfigMap", Name: "extra"}}
	err = h.Wait(context.Background(), on, st, nil, nil, time.Time{}, time.Second, nil)
	g.Expect(err).To(MatchError(ContainSubstring("health check ConfigMap extra")))
}
