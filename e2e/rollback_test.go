package e2e

import (
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
)

// eventTime is when the daemon emitted an event.
func eventTime(e corev1.Event) time.Time {
	if !e.EventTime.IsZero() {
		return e.EventTime.Time
	}
	return e.FirstTimestamp.Time
}

// findEvent returns the newest event about st of reason whose message contains part.
func findEvent(g Gomega, st *convergev1.SyncTarget, reason, part string) (corev1.Event, bool) {
	var found corev1.Event
	ok := false
	for _, e := range events(g, st) {
		if e.Reason == reason && strings.Contains(e.Message, part) && (!ok || eventTime(e).After(eventTime(found))) {
			found, ok = e, true
		}
	}
	return found, ok
}

// rolledBack matches how the CLI may spell a rollback.
const rolledBack = `(?i)rolled ?back`

// Scenario 4: a commit whose Deployment can never become Available is rolled back to the
// previous revision on its own, the CLI shows it, later polls leave it alone, and the
// next good commit deploys normally.
func TestAutomaticRollback(t *testing.T) {
	run(t, 4, "automatic rollback", parallel, func(s *scenario) {
		g := NewWithT(t)
		r := s.repo("app")
		good := r.commit(map[string]string{
			"deploy/web.yaml": deployment("web", 1, "example.com/web:1", ""),
			"deploy/cm.yaml":  configMap("settings", "good"),
		})
		// The bad revision fails on its Deployment's 5 s progress deadline, not on this
		// timeout; a minute lets a loaded machine terminate the replaced Pods of the next
		// good commit in time.
		st := s.syncTarget("web", r, func(st *convergev1.SyncTarget) {
			st.Spec.Timeout = &metav1.Duration{Duration: time.Minute}
		})
		s.waitHealthy(st, good, 90*time.Second)

		committed := time.Now()
		bad := r.commit(map[string]string{
			"deploy/web.yaml":   deployment("web", 1, "example.com/web:2", "no-such-node: anywhere"),
			"deploy/extra.yaml": configMap("extra", "added by the bad revision"),
		})
		s.eventually(st, 90*time.Second, func(g Gomega, st *convergev1.SyncTarget) {
			g.Expect(ready(st).Reason).To(Equal(convergev1.RolledBackReason), ready(st).Message)
			g.Expect(ready(st).Status).To(Equal(metav1.ConditionFalse))
			g.Expect(ready(st).Message).To(And(ContainSubstring(bad), ContainSubstring(good),
				ContainSubstring("ProgressDeadlineExceeded"), ContainSubstring("Deployment "+s.app+"/web")))
			g.Expect(condition(st, convergev1.HealthyCondition).Status).To(Equal(metav1.ConditionFalse))
			g.Expect(condition(st, convergev1.ReconcilingCondition).Status).NotTo(Equal(metav1.ConditionTrue))
			g.Expect(st.Status.LastAttemptedRevision).To(Equal(bad))
			g.Expect(st.Status.LastAppliedRevision).To(Equal(good))
			g.Expect(st.Status.LastHealthyRevision).To(Equal(good))
			g.Expect(st.Status.History[0]).To(And(HaveField("Revision", bad), HaveField("Result", convergev1.SyncRolledBack),
				HaveField("Message", ContainSubstring("rolled back to "+good))))
			g.Expect(st.Status.History[1]).To(And(HaveField("Revision", good), HaveField("Result", convergev1.SyncSucceeded)))
		})
		s.latency("commit→rolled back", time.Since(committed))
		d := &appsv1.Deployment{}
		object(g, s.app, "web", d)
		g.Expect(d.Spec.Template.Spec.NodeSelector).To(BeEmpty(), "the Deployment is the good revision's again")
		g.Expect(d.Spec.Template.Spec.Containers[0].Image).To(Equal("example.com/web:1"))
		gone(g, s.app, "extra", &corev1.ConfigMap{})
		g.Expect(configMapValue(g, s.app, "settings")).To(Equal("good"))
		g.Eventually(func(g Gomega) {
			object(g, s.app, "web", d)
			g.Expect(d.Status.AvailableReplicas).To(Equal(int32(1)))
			g.Expect(d.Status.UpdatedReplicas).To(Equal(int32(1)))
		}).WithTimeout(30 * time.Second).Should(Succeed())

		s.expectEvent(st, corev1.EventTypeWarning, convergev1.HealthCheckFailedReason, bad)
		s.expectEvent(st, corev1.EventTypeWarning, convergev1.RolledBackReason, bad, good)
		failed, ok1 := findEvent(g, st, convergev1.HealthCheckFailedReason, bad)
		restored, ok2 := findEvent(g, st, convergev1.RolledBackReason, bad)
		g.Expect(ok1 && ok2).To(BeTrue())
		s.latency("rollback detection→restored", eventTime(restored).Sub(eventTime(failed)))

		// What a user sees.
		res := s.cli(time.Minute, "get", "web", "-n", s.ns)
		g.Expect(res.code).To(Equal(0), res.String())
		s.expectOutput(res, rolledBack, "converge get shows the rollback")
		s.expectOutput(res, "ProgressDeadlineExceeded", "converge get shows why")
		res = s.cli(time.Minute, "history", "web", "-n", s.ns)
		g.Expect(res.code).To(Equal(0), res.String())
		s.expectOutput(res, string(convergev1.SyncRolledBack), "converge history shows the rollback")
		s.expectOutput(res, strings.TrimPrefix(bad, "main@sha1:")[:7], "converge history shows the bad revision")
		res = s.cli(time.Minute, "history", "web", "-n", s.ns, "-o", "yaml")
		g.Expect(res.code).To(Equal(0), res.String())
		s.expectOutput(res, "ProgressDeadlineExceeded", "converge history -o yaml says why")

		// Polls every 2 s: the bad revision is not applied again.
		latest := get(g, st)
		object(g, s.app, "web", d)
		generation := d.Generation
		g.Consistently(func(g Gomega) {
			now := get(g, st)
			g.Expect(now.Status.History).To(HaveLen(len(latest.Status.History)))
			g.Expect(now.Status.LastAppliedRevision).To(Equal(good))
			g.Expect(now.Status.LastFetchedRevision).To(Equal(bad))
			d := &appsv1.Deployment{}
			object(g, s.app, "web", d)
			g.Expect(d.Generation).To(Equal(generation), "the Deployment is not written again")
		}).WithTimeout(6 * time.Second).WithPolling(250 * time.Millisecond).Should(Succeed())

		r.commit(map[string]string{"deploy/web.yaml": deployment("web", 2, "example.com/web:3", "")})
		next := r.remove("deploy/extra.yaml")
		s.eventually(st, 90*time.Second, func(g Gomega, st *convergev1.SyncTarget) {
			healthy(g, st, next)
			g.Expect(st.Status.Inventory.Entries).To(HaveLen(2))
		})
		object(g, s.app, "web", d)
		g.Expect(d.Spec.Template.Spec.Containers[0].Image).To(Equal("example.com/web:3"))
		g.Expect(d.Status.AvailableReplicas).To(Equal(int32(2)))
		s.expectEvent(st, corev1.EventTypeNormal, convergev1.SucceededReason, next)
	})
}

// Scenario 5: malformed YAML, then a schema-invalid object: nothing of either commit is
// applied, the cluster keeps the last good revision, and status says what and where.
func TestInvalidCommit(t *testing.T) {
	run(t, 5, "invalid commit", parallel, func(s *scenario) {
		g := NewWithT(t)
		r := s.repo("app")
		good := r.commit(map[string]string{"deploy/a.yaml": configMap("a", "1")})
		st := s.syncTarget("cfg", r, nil)
		s.waitHealthy(st, good, 90*time.Second)

		broken := r.commit(map[string]string{
			"deploy/a.yaml":     configMap("a", "2"),
			"deploy/sub/b.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: b\n",
		})
		s.eventually(st, 60*time.Second, func(g Gomega, st *convergev1.SyncTarget) {
			g.Expect(ready(st).Status).To(Equal(metav1.ConditionFalse))
			g.Expect(ready(st).Reason).To(Equal(convergev1.BuildFailedReason), ready(st).Message)
			g.Expect(ready(st).Message).To(And(ContainSubstring(broken), ContainSubstring("sub/b.yaml")))
			g.Expect(st.Status.LastAttemptedRevision).To(Equal(broken))
			g.Expect(st.Status.LastAppliedRevision).To(Equal(good))
			g.Expect(st.Status.LastHealthyRevision).To(Equal(good))
			g.Expect(st.Status.History[0]).To(And(HaveField("Revision", broken), HaveField("Result", convergev1.SyncFailed)))
		})
		g.Expect(configMapValue(g, s.app, "a")).To(Equal("1"), "the valid file of the broken commit was not applied")
		s.expectEvent(st, corev1.EventTypeWarning, convergev1.BuildFailedReason, "sub/b.yaml")

		invalid := r.commit(map[string]string{
			"deploy/a.yaml":     configMap("a", "3"),
			"deploy/sub/b.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: b}\ndata: {value: [1, 2]}\n",
			"deploy/c.yaml":     configMap("c", "new"),
		})
		s.eventually(st, 60*time.Second, func(g Gomega, st *convergev1.SyncTarget) {
			g.Expect(st.Status.History[0].Revision).To(Equal(invalid))
			g.Expect(st.Status.History[0].Result).NotTo(Equal(convergev1.SyncSucceeded))
			g.Expect(ready(st).Status).To(Equal(metav1.ConditionFalse))
			g.Expect(ready(st).Message).To(And(ContainSubstring(invalid), ContainSubstring("ConfigMap/"+s.app+"/b"),
				ContainSubstring("dry-run failed")))
			g.Expect(st.Status.LastAppliedRevision).To(Equal(good))
			g.Expect(st.Status.LastHealthyRevision).To(Equal(good))
			g.Expect(st.Status.Inventory.Entries).To(ConsistOf(HaveField("ID", s.app+"_a__ConfigMap")))
		})
		g.Expect(configMapValue(g, s.app, "a")).To(Equal("1"), "the valid objects of the invalid commit were not applied")
		gone(g, s.app, "b", &corev1.ConfigMap{})
		gone(g, s.app, "c", &corev1.ConfigMap{})
		s.expectEvent(st, corev1.EventTypeWarning, convergev1.ApplyFailedReason, "ConfigMap/"+s.app+"/b")
	})
}
