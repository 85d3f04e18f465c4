package e2e

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
)

// Scenario 13: the CLI against the live system. `converge diff` shows a change not pushed
// yet and exits 1, and exits 0 once it is deployed; `converge reconcile --wait` returns 0
// on a healthy revision and non-zero, with the reason, on a rolled-back one; and a push
// followed by `converge reconcile --wait` deploys the push without waiting for a poll.
func TestCLI(t *testing.T) {
	run(t, 13, "CLI against the live system", parallel, func(s *scenario) {
		g := NewWithT(t)
		r := s.repo("app")
		web := deployment("web", 1, "example.com/web:1", "")
		rev1 := r.commit(map[string]string{"settings.yaml": configMap("settings", "1"), "web.yaml": web})
		// The repository root is the path: a working copy renders as the daemon renders it.
		st := s.syncTarget("web", r, func(st *convergev1.SyncTarget) {
			st.Spec.Path = ""
			st.Spec.Timeout = &metav1.Duration{Duration: time.Minute}
		})
		s.waitHealthy(st, rev1, 90*time.Second)

		// A change in a working copy, not pushed yet.
		work := t.TempDir()
		next := map[string]string{"settings.yaml": configMap("settings", "2"), "web.yaml": web}
		writeFiles(t, work, next)
		res := s.cli(time.Minute, "diff", "--target", "web", "-n", s.ns, "--path", work)
		g.Expect(res.code).To(Equal(1), "changes: exit 1\n%s", res)
		g.Expect(res.stdout).To(ContainSubstring("ConfigMap "+s.app+"/settings"), "the change is shown")
		g.Expect(res.stdout).To(ContainSubstring("1 to change"))
		g.Expect(res.stdout).NotTo(MatchRegexp(`~ \S+ Deployment `+s.app+`/web`), "the unchanged Deployment is not a change")
		g.Expect(configMapValue(g, s.app, "settings")).To(Equal("1"), "diff changes nothing")

		// Pushed and deployed: diff has nothing to show; reconcile --wait succeeds.
		rev2 := r.commit(next)
		s.waitHealthy(st, rev2, 60*time.Second)
		res = s.cli(time.Minute, "diff", "--target", "web", "-n", s.ns, "--path", work)
		g.Expect(res.code).To(Equal(0), "no changes: exit 0\n%s", res)
		res = s.cli(3*time.Minute, "reconcile", "web", "-n", s.ns, "--wait")
		g.Expect(res.code).To(Equal(0), res.String())
		healthy(g, get(g, st), rev2)

		// A commit that can never become healthy: once the daemon has rolled it back,
		// reconcile --wait retries it, and fails with what happened and why.
		rev3 := r.commit(map[string]string{"web.yaml": deployment("web", 1, "example.com/web:2", "no-such-node: anywhere")})
		s.eventually(st, 90*time.Second, func(g Gomega, st *convergev1.SyncTarget) {
			g.Expect(st.Status.History[0]).To(And(HaveField("Revision", rev3), HaveField("Result", convergev1.SyncRolledBack)))
		})
		attempts := len(get(g, st).Status.History)
		res = s.cli(3*time.Minute, "reconcile", "web", "-n", s.ns, "--wait")
		g.Expect(res.code).NotTo(Equal(0), "a rolled-back revision fails the command\n%s", res)
		s.expectOutput(res, rolledBack, "reconcile --wait says the revision was rolled back")
		s.expectOutput(res, "ProgressDeadlineExceeded", "reconcile --wait says why")
		latest := get(g, st)
		g.Expect(latest.Status.History).To(HaveLen(attempts+1), "the request retried the rolled-back revision once")
		g.Expect(ready(latest).Reason).To(Equal(convergev1.RolledBackReason))
		g.Expect(latest.Status.History[0]).To(And(HaveField("Revision", rev3), HaveField("Result", convergev1.SyncRolledBack)))
		g.Expect(latest.Status.LastAppliedRevision).To(Equal(rev2))
		d := &appsv1.Deployment{}
		object(g, s.app, "web", d)
		g.Expect(d.Spec.Template.Spec.NodeSelector).To(BeEmpty())
		s.expectEvent(st, corev1.EventTypeWarning, convergev1.RolledBackReason, rev3, rev2)
		res = s.cli(time.Minute, "get", "web", "-n", s.ns)
		g.Expect(res.code).To(Equal(0), res.String())
		s.expectOutput(res, rolledBack, "converge get shows the rollback")
		res = s.cli(time.Minute, "history", "web", "-n", s.ns)
		g.Expect(res.code).To(Equal(0), res.String())
		s.expectOutput(res, string(convergev1.SyncRolledBack), "converge history shows the rollback")

		// A SyncTarget that polls once an hour: a push, then reconcile --wait, deploys it.
		hr := s.repo("hourly")
		first := hr.commit(map[string]string{"deploy/cm.yaml": configMap("hourly", "1")})
		hourly := s.syncTarget("hourly", hr, func(st *convergev1.SyncTarget) {
			st.Spec.Source.Interval = &metav1.Duration{Duration: time.Hour}
		})
		s.waitHealthy(hourly, first, 90*time.Second)
		pushed := hr.commit(map[string]string{"deploy/cm.yaml": configMap("hourly", "2")})
		requested := time.Now()
		res = s.cli(3*time.Minute, "reconcile", "hourly", "-n", s.ns, "--wait")
		g.Expect(res.code).To(Equal(0), res.String())
		took := time.Since(requested)
		g.Expect(get(g, hourly).Status.LastAppliedRevision).To(Equal(pushed), "reconcile fetched the push")
		s.latency("push, reconcile --wait→Ready", took)
		g.Expect(configMapValue(g, s.app, "hourly")).To(Equal("2"))
	})
}
