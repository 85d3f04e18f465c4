package fleet

import (
	"context"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
	"github.com/converge-gitops/converge/internal/localcluster"
	"github.com/converge-gitops/converge/internal/localcluster/clustertest"
	"github.com/converge-gitops/converge/sources"
	"github.com/converge-gitops/converge/sync/render"
)

// The cluster tests share one API server with the CRDs and one manager running the set
// controller (and no SyncTarget controller: the tests write the SyncTargets' status); the
// pure tests never start them. Each test has a namespace of its own.
var (
	shared = clustertest.NewShared(localcluster.Options{CRDDirectoryPaths: []string{clustertest.CRDDir()}})
	start  sync.Once
	k8s    client.Client
	nsSeq  atomic.Int64
)

var cacheDir string

// forges is the controller's pull request lister: a test wakes a set through it as a
// signed webhook of the forge does.
var forges *ForgeLister

// stopManager stops the controller's manager and waits for it, before the cluster stops.
var stopManager = func() {}

func TestMain(m *testing.M) {
	render.ServeWorkerIfAsked() // this binary is the render worker of the previews' diffs
	code := m.Run()
	stopManager()
	code = shared.Stop(code)
	if cacheDir != "" {
		_ = os.RemoveAll(cacheDir)
	}
	os.Exit(code)
}

// cluster starts the shared cluster and the controller on first use and returns a client
// and a new namespace.
func cluster(t *testing.T) string {
	t.Helper()
	c := shared.Get(t)
	start.Do(func() {
		dir, err := os.MkdirTemp("", "converge-fleet-test-")
		if err == nil {
			cacheDir = dir
			err = runController(c, dir)
		}
		if err != nil {
			t.Fatal(err)
		}
	})
	if k8s == nil {
		t.Fatal("the controller did not start")
	}
	ns := fmt.Sprintf("fleet-%d", nsSeq.Add(1))
	if err := k8s.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	return ns
}

// runController runs the set controller against cfg for the rest of the test binary.
func runController(c *localcluster.Cluster, cacheDir string) error {
	scheme := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(scheme)
	_ = convergev1.AddToScheme(scheme)
	ctrl.SetLogger(logr.Discard())
	mgr, err := ctrl.NewManager(c.Config, ctrl.Options{Scheme: scheme, Metrics: metricsserver.Options{BindAddress: "0"},
		Client: client.Options{Cache: &client.CacheOptions{DisableFor: []client.Object{&corev1.Secret{}}}}})
	if err != nil {
		return err
	}
	r, err := SetupWithManager(mgr, Options{Cache: sources.CacheOptions{Dir: cacheDir}, AllowLoopback: true})
	if err != nil {
		return err
	}
	forges = r.PullRequests.(*ForgeLister)
	cl, err := client.New(c.Config, client.Options{Scheme: scheme})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := mgr.Start(ctx); err != nil {
			fmt.Fprintln(os.Stderr, "manager:", err)
		}
	}()
	stopManager = func() { cancel(); <-done }
	k8s = cl
	return nil
}

func getSet(g Gomega, ns, name string) *convergev1.SyncTargetSet {
	set := &convergev1.SyncTargetSet{}
	g.Expect(k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, set)).To(Succeed())
	return set
}

func setReady(set *convergev1.SyncTargetSet) metav1.Condition {
	if c := apimeta.FindStatusCondition(set.Status.Conditions, convergev1.ReadyCondition); c != nil {
		return *c
	}
	return metav1.Condition{}
}

// generated lists the SyncTargets carrying the set's label, by name.
func generated(g Gomega, ns, set string) map[string]*convergev1.SyncTarget {
	list := &convergev1.SyncTargetList{}
	g.Expect(k8s.List(context.Background(), list, client.InNamespace(ns), client.MatchingLabels{convergev1.SetLabel: set})).To(Succeed())
	out := map[string]*convergev1.SyncTarget{}
	for i := range list.Items {
		out[list.Items[i].Name] = &list.Items[i]
	}
	return out
}

func eventually(t *testing.T, f func(g Gomega)) {
	t.Helper()
	NewWithT(t).Eventually(f).WithTimeout(30 * time.Second).WithPolling(100 * time.Millisecond).Should(Succeed())
}

// markTarget writes the status the SyncTarget controller would: Ready (or not, with
// reason) at the SyncTarget's current generation.
func markTarget(t *testing.T, ns, name string, status metav1.ConditionStatus, reason string) {
	t.Helper()
	eventually(t, func(g Gomega) {
		st := &convergev1.SyncTarget{}
		g.Expect(k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, st)).To(Succeed())
		st.Status.ObservedGeneration = st.Generation
		apimeta.SetStatusCondition(&st.Status.Conditions, metav1.Condition{Type: convergev1.ReadyCondition,
			Status: status, Reason: reason, Message: "set by the test", ObservedGeneration: st.Generation})
		g.Expect(k8s.Status().Update(context.Background(), st)).To(Succeed())
	})
}
