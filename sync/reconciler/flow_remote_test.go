package reconciler

import (
	"context"
	"errors"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
	"github.com/converge-gitops/converge/sync/cluster"
	"github.com/converge-gitops/converge/sync/reconciler/reconcilertest"
)

// The flow of a SyncTarget with spec.kubeConfig, driven with fakes: the SyncTarget, its
// Secrets and its status are on the daemon's cluster (f.c), its objects on the remote
// cluster of the kubeconfig Secret "prod-kc" (remoteFlow.rc).

type remoteFlow struct {
	*flow
	clusters *reconcilertest.Clusters
	cluster  *reconcilertest.Cluster
	rc       client.WithWatch
}

func newRemoteFlow(t *testing.T, revision string, mutate ...func(*convergev1.SyncTarget)) *remoteFlow {
	t.Helper()
	remote := func(st *convergev1.SyncTarget) {
		st.Spec.KubeConfig = &convergev1.KubeConfigReference{SecretRef: convergev1.KubeConfigSecretReference{Name: "prod-kc"}}
	}
	f := newFlow(t, revision, append([]func(*convergev1.SyncTarget){remote}, mutate...)...)
	rc := fake.NewClientBuilder().WithScheme(f.c.Scheme()).Build()
	clusters := f.r.Clusters.(*reconcilertest.Clusters)
	return &remoteFlow{flow: f, clusters: clusters, cluster: clusters.AddRemote("prod-kc", rc), rc: rc}
}

// remoteLive returns the data of the ConfigMap name on the remote cluster, nil when it
// does not exist there.
func (f *remoteFlow) remoteLive(name string) map[string]any { return liveIn(f.rc, name) }

// reconcileErr runs one reconcile and returns its error and the SyncTarget afterwards.
func (f *remoteFlow) reconcileErr() (*convergev1.SyncTarget, error) {
	f.t.Helper()
	_, err := f.r.Reconcile(context.Background(), ctrl.Request{NamespacedName: f.key})
	st := &convergev1.SyncTarget{}
	f.g.Expect(f.c.Get(context.Background(), f.key, st)).To(Succeed())
	return st, err
}

// TestFlowRemoteTargetDeploysToItsCluster: the objects go to the remote cluster, none to
// the daemon's; the spec.postBuild variables are read on the daemon's cluster; the remote
// cluster is looked up once per reconcile, however many steps use it.
func TestFlowRemoteTargetDeploysToItsCluster(t *testing.T) {
	f := newRemoteFlow(t, rev1, substituteFromEnv)
	f.createEnv("prod")
	f.objects.Set(rev1, configMap("web", "${stage}"))

	before := f.clusters.Lookups()
	st := f.reconcile()
	f.g.Expect(newestResult(st)).To(Equal(convergev1.SyncSucceeded), "%v", st.Status.Conditions)
	f.g.Expect(f.clusters.Lookups()-before).To(Equal(1), "one look-up of the remote cluster for render, apply, drift and health")
	f.g.Expect(f.remoteLive("web")).To(Equal(map[string]any{"v": "prod"}), "on the remote cluster, the daemon's variable substituted")
	f.g.Expect(f.live("web")).To(BeNil(), "nothing on the daemon's cluster")

	// An idle reconcile looks the cluster up at most once.
	before = f.clusters.Lookups()
	f.reconcile()
	f.g.Expect(f.clusters.Lookups() - before).To(BeNumerically("<=", 1))
}

// TestFlowRemoteTargetRollsBack: a revision failing health on the remote cluster is rolled
// back there, and what it added there is pruned.
func TestFlowRemoteTargetRollsBack(t *testing.T) {
	f := newRemoteFlow(t, rev1)
	f.objects.Set(rev1, configMap("web", "one"))
	f.reconcile()

	f.source.Push(rev2)
	f.objects.Set(rev2, configMap("web", "two"), unhealthy(configMap("extra", "two")))
	st := f.reconcile()
	f.g.Expect(newestResult(st)).To(Equal(convergev1.SyncRolledBack), "%v", st.Status.Conditions)
	f.g.Expect(st.Status.LastHealthyRevision).To(Equal(rev1))
	f.g.Expect(f.remoteLive("web")).To(Equal(map[string]any{"v": "one"}))
	f.g.Expect(f.remoteLive("extra")).To(BeNil(), "what the failed revision added is pruned on the remote cluster")
	f.g.Expect(f.live("web")).To(BeNil())
}

// TestFlowRemoteClusterAway: a remote cluster that cannot be reached fails no revision:
// nothing is rolled back or recorded as failed, the status says why, the reconcile is
// retried; back, the new revision deploys.
func TestFlowRemoteClusterAway(t *testing.T) {
	f := newRemoteFlow(t, rev1)
	f.objects.Set(rev1, configMap("web", "one"))
	f.reconcile()

	f.cluster.Away(true)
	f.source.Push(rev2)
	f.objects.Set(rev2, configMap("web", "two"))
	st, err := f.reconcileErr()
	f.g.Expect(err).To(MatchError(ContainSubstring("unreachable")), "retried with backoff")
	f.g.Expect(readyReason(st)).To(Equal(convergev1.ApplyFailedReason))
	f.g.Expect(st.Status.History).To(HaveLen(1), "no history entry for a revision the cluster never saw")
	f.g.Expect(st.Status.LastAppliedRevision).To(Equal(rev1))
	f.g.Expect(st.Status.LastHealthyRevision).To(Equal(rev1))

	f.cluster.Away(false)
	st = f.reconcile()
	f.g.Expect(st.Status.LastHealthyRevision).To(Equal(rev2))
	f.g.Expect(f.remoteLive("web")).To(Equal(map[string]any{"v": "two"}))
}

// TestFlowRemoteDriftRestored: an object edited by hand on the remote cluster is put back
// by the full sync, on that cluster.
func TestFlowRemoteDriftRestored(t *testing.T) {
	f := newRemoteFlow(t, rev1)
	f.objects.Set(rev1, configMap("web", "one"))
	f.reconcile()

	f.edit(f.rc, "web", "edited")

	f.clk.Step(11 * time.Minute) // past FullSyncInterval
	st := f.reconcile()
	f.g.Expect(f.remoteLive("web")).To(Equal(map[string]any{"v": "one"}))
	f.g.Expect(f.live("web")).To(BeNil())
	f.g.Expect(st.Status.LastAppliedRevision).To(Equal(rev1))
	f.g.Expect(readyReason(st)).To(Equal(convergev1.SucceededReason))
}

// TestFlowRemoteTargetLetsGoOfItsCluster: a SyncTarget that leaves its remote cluster, and
// one that is gone, let go of it.
func TestFlowRemoteTargetLetsGoOfItsCluster(t *testing.T) {
	f := newRemoteFlow(t, rev1, func(st *convergev1.SyncTarget) { st.Spec.Prune = false })
	f.objects.Set(rev1, configMap("web", "one"))
	f.reconcile()
	f.g.Expect(f.clusters.Released()).To(BeEmpty())

	st := &convergev1.SyncTarget{}
	f.g.Expect(f.c.Get(context.Background(), f.key, st)).To(Succeed())
	st.Spec.KubeConfig = nil
	st.Generation++ // as the API server counts a change of spec
	f.g.Expect(f.c.Update(context.Background(), st)).To(Succeed())
	f.reconcile()
	f.g.Expect(f.clusters.Released()).To(ContainElement(f.key), "it left its remote cluster")
	f.g.Expect(f.live("web")).To(Equal(map[string]any{"v": "one"}), "now deployed to the daemon's cluster")

	// Back to the remote cluster, then deleted: it lets go of it again.
	f.g.Expect(f.c.Get(context.Background(), f.key, st)).To(Succeed())
	st.Spec.KubeConfig = &convergev1.KubeConfigReference{SecretRef: convergev1.KubeConfigSecretReference{Name: "prod-kc"}}
	st.Generation++
	f.g.Expect(f.c.Update(context.Background(), st)).To(Succeed())
	f.reconcile()
	f.g.Expect(f.c.Get(context.Background(), f.key, st)).To(Succeed())
	st.Finalizers = nil
	f.g.Expect(f.c.Update(context.Background(), st)).To(Succeed())
	f.g.Expect(f.c.Delete(context.Background(), st)).To(Succeed())
	_, err := f.r.Reconcile(context.Background(), ctrl.Request{NamespacedName: f.key})
	f.g.Expect(err).NotTo(HaveOccurred())
	f.g.Expect(f.clusters.Released()).To(Equal([]types.NamespacedName{f.key, f.key}), "the deleted SyncTarget let go of it")
}

// TestFlowChartRendersWithTheCapabilitiesOfItsCluster: a chart renders with the
// capabilities of the cluster it deploys to (a remote one's, not the daemon's); a revision
// that applies a CRD there makes them discovered again for the next render; discovery
// failing is no fault of the revision: nothing fails or rolls back, and it renders once
// discovery answers.
func TestFlowChartRendersWithTheCapabilitiesOfItsCluster(t *testing.T) {
	f := newRemoteFlow(t, rev1, func(st *convergev1.SyncTarget) { st.Spec.Helm = &convergev1.HelmSpec{} })
	local := f.clusters.Local().(*reconcilertest.Cluster)
	local.Caps = cluster.Capabilities{KubeVersion: "v1.36.0", APIVersions: []string{"v1"}}
	f.cluster.Caps = cluster.Capabilities{KubeVersion: "v1.37.2", APIVersions: []string{"v1", "example.com/v1"}}
	f.objects.Set(rev1, configMap("web", "one"))
	st := f.reconcile()
	f.g.Expect(newestResult(st)).To(Equal(convergev1.SyncSucceeded), "%v", st.Status.Conditions)
	rendered := f.objects.Capabilities()
	f.g.Expect(rendered).NotTo(BeEmpty())
	f.g.Expect(rendered[len(rendered)-1]).To(Equal(f.cluster.Caps), "the remote cluster's capabilities")
	f.g.Expect(f.cluster.Forgotten()).To(BeZero())

	crd := reconcilertest.Object("", "", "gadgets.example.com", nil)
	crd.SetAPIVersion("apiextensions.k8s.io/v1")
	crd.SetKind("CustomResourceDefinition")
	delete(crd.Object, "data")
	f.source.Push(rev2)
	f.objects.Set(rev2, crd, configMap("web", "two"))
	st = f.reconcile()
	f.g.Expect(st.Status.LastHealthyRevision).To(Equal(rev2), "%v", st.Status.Conditions)
	f.g.Expect(f.cluster.Forgotten()).To(Equal(1), "a CRD applied there: its capabilities are discovered again")
	f.g.Expect(local.Forgotten()).To(BeZero(), "the daemon's own cluster got no CRD")

	f.cluster.CapsErr = errors.New("the server is currently unable to handle the request")
	f.source.Push(rev3)
	f.objects.Set(rev3, crd, configMap("web", "three"))
	before := len(f.objects.Capabilities())
	st, _ = f.reconcileErr()
	f.g.Expect(f.objects.Capabilities()).To(HaveLen(before), "nothing is rendered without the capabilities")
	f.g.Expect(st.Status.LastHealthyRevision).To(Equal(rev2))
	f.g.Expect(readyReason(st)).To(Equal(convergev1.ApplyFailedReason), "said as the cluster failing, not the commit")
	for _, h := range st.Status.History {
		f.g.Expect(h.Revision == rev3 && h.Result == convergev1.SyncFailed).To(BeFalse(), "discovery failing fails no revision: %+v", h)
	}
	f.cluster.CapsErr = nil
	f.clk.Step(time.Minute)
	st = f.reconcile()
	f.g.Expect(st.Status.LastHealthyRevision).To(Equal(rev3), "%v", st.Status.Conditions)
	f.g.Expect(f.remoteLive("web")).To(Equal(map[string]any{"v": "three"}))
}
