package reconciler_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
)

// TestImmutableFieldChange: a change to an immutable field is reported, not forced; with
// the opt-in annotation the object is recreated.
func TestImmutableFieldChange(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newFixture(t)
	web := deployment("web", 1, "")
	rev := f.commit(map[string]string{"deploy/web.yaml": web})
	st := f.syncTarget("web", func(st *convergev1.SyncTarget) {
		st.Spec.Rollback = &convergev1.RollbackSpec{Enabled: new(false)}
	})
	eventually(t, st, func(g Gomega, st *convergev1.SyncTarget) {
		g.Expect(st.Status.LastHealthyRevision).To(Equal(rev))
	})
	g := NewWithT(t)
	before := &appsv1.Deployment{}
	g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: f.app, Name: "web"}, before)).To(Succeed())

	// spec.selector of a Deployment is immutable.
	changed := strings.NewReplacer("matchLabels: {app: web}", "matchLabels: {app: web, tier: front}",
		"labels: {app: web}", "labels: {app: web, tier: front}").Replace(web)
	immutable := f.commit(map[string]string{"deploy/web.yaml": changed})
	eventually(t, st, func(g Gomega, st *convergev1.SyncTarget) {
		g.Expect(st.Status.LastAttemptedRevision).To(Equal(immutable))
		g.Expect(ready(st).Reason).To(Equal(convergev1.ApplyFailedReason))
		g.Expect(ready(st).Message).To(ContainSubstring("field is immutable"))
	})
	after := &appsv1.Deployment{}
	g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: f.app, Name: "web"}, after)).To(Succeed())
	g.Expect(after.UID).To(Equal(before.UID), "not recreated without the opt-in")

	forced := f.commit(map[string]string{"deploy/web.yaml": strings.Replace(changed,
		"metadata:\n  name: web\n", "metadata:\n  name: web\n  annotations: {converge.dev/force: enabled}\n", 1)})
	eventually(t, st, func(g Gomega, st *convergev1.SyncTarget) {
		g.Expect(st.Status.LastHealthyRevision).To(Equal(forced), ready(st).Message)
	})
	g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: f.app, Name: "web"}, after)).To(Succeed())
	g.Expect(after.UID).NotTo(Equal(before.UID), "recreated with the opt-in annotation")
	g.Expect(after.Spec.Selector.MatchLabels).To(HaveKeyWithValue("tier", "front"))
}

// TestRequestedAtRetriesARolledBackRevision: a rolled-back revision is tried again when a
// user asks (converge.dev/requestedAt), not before.
func TestRequestedAtRetriesARolledBackRevision(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	good := f.commit(map[string]string{"deploy/web.yaml": deployment("web", 1, "")})
	st := f.syncTarget("web", func(st *convergev1.SyncTarget) {
		st.Spec.Timeout = &metav1.Duration{Duration: 30 * time.Second}
	})
	eventually(t, st, func(g Gomega, st *convergev1.SyncTarget) {
		g.Expect(st.Status.LastHealthyRevision).To(Equal(good))
	})
	bad := f.commit(map[string]string{"deploy/web.yaml": deployment("web", 1, "no-such-node: anywhere")})
	eventually(t, st, func(g Gomega, st *convergev1.SyncTarget) {
		g.Expect(ready(st).Reason).To(Equal(convergev1.RolledBackReason))
	})
	g := NewWithT(t)
	attempts := func(st *convergev1.SyncTarget) int {
		n := 0
		for _, e := range st.Status.History {
			if e.Revision == bad {
				n++
			}
		}
		return n
	}
	g.Expect(attempts(get(g, st))).To(Equal(1))

	latest := get(g, st)
	if latest.Annotations == nil {
		latest.Annotations = map[string]string{}
	}
	latest.Annotations[convergev1.RequestedAtAnnotation] = fmt.Sprint(time.Now().UnixNano())
	g.Expect(k8s.Update(context.Background(), latest)).To(Succeed())
	eventually(t, st, func(g Gomega, st *convergev1.SyncTarget) {
		g.Expect(attempts(st)).To(Equal(2), "tried again on request")
		g.Expect(st.Status.LastHandledReconcileAt).To(Equal(latest.Annotations[convergev1.RequestedAtAnnotation]))
		g.Expect(ready(st).Reason).To(Equal(convergev1.RolledBackReason))
	})
}

// TestColdSyncOfWatchedKindsReadsNothing: deploying objects whose kinds the daemon watches
// already (another SyncTarget has some) costs, per object, one dry-run and one write: the
// ownership check answers from the watch, nothing is listed, and objects the apply's answer
// shows ready need no watch for their health.
func TestColdSyncOfWatchedKindsReadsNothing(t *testing.T) {
	files := map[string]string{
		"deploy/conf.yaml": configMap("conf", "v"),
		"deploy/sa.yaml":   "apiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: sa\n",
		"deploy/svc.yaml": "apiVersion: v1\nkind: Service\nmetadata:\n  name: web\nspec:\n  selector:\n    app: web\n" +
			"  ports:\n  - port: 80\n",
	}
	first := newFixture(t)
	firstRev := first.commit(files)
	eventually(t, first.syncTarget("first", nil), func(g Gomega, st *convergev1.SyncTarget) {
		g.Expect(st.Status.LastHealthyRevision).To(Equal(firstRev), ready(st).Message)
	})

	f := newFixture(t)
	rev := f.commit(files)
	stop := recorder.start()
	st := f.syncTarget("cold", nil)
	eventually(t, st, func(g Gomega, st *convergev1.SyncTarget) {
		g.Expect(st.Status.LastHealthyRevision).To(Equal(rev), ready(st).Message)
	})
	var objectRequests []string // those about the objects: in the target namespace
	for _, r := range stop() {
		if strings.Contains(r, "/namespaces/"+f.app+"/") {
			objectRequests = append(objectRequests, r)
		}
	}
	t.Logf("%d requests about the objects:\n%s", len(objectRequests), strings.Join(objectRequests, "\n"))
	g := NewWithT(t)
	g.Expect(objectRequests).NotTo(ContainElement(ContainSubstring("watch=true")))
	byName := func(method, kind, name string) string {
		return method + " /api/v1/namespaces/" + f.app + "/" + kind + "/" + name
	}
	for _, o := range []struct{ kind, name string }{{"configmaps", "conf"}, {"serviceaccounts", "sa"}, {"services", "web"}} {
		var dryRuns, writes int
		for _, r := range objectRequests {
			switch {
			case strings.HasPrefix(r, byName("PATCH", o.kind, o.name)+"?") && strings.Contains(r, "dryRun=All"):
				dryRuns++
			case strings.HasPrefix(r, byName("PATCH", o.kind, o.name)+"?"):
				writes++
			}
		}
		g.Expect([]int{dryRuns, writes}).To(Equal([]int{1, 1}), "%s %s: dry-runs, writes", o.kind, o.name)
	}
	g.Expect(objectRequests).To(HaveLen(6), "nothing else: no read, no list of a kind")
}
