package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
)

// slowDeployment is a Deployment replaced whole on every change (Recreate) whose pods
// count as available only minReady seconds after they are ready: its rollout takes at
// least that long, however fast kwok runs the pods.
func slowDeployment(name, image, nodeSelector string, minReady, deadline int) string {
	return progressDeadline(deployment(name, 1, image, nodeSelector),
		fmt.Sprintf("  minReadySeconds: %d\n  progressDeadlineSeconds: %d\n  strategy: {type: Recreate}", minReady, deadline))
}

// TestSlowRollbackThenDriftIsHeld: a rollback whose own rollout takes longer than the poll interval (2 s)
// ends RolledBack — the source still pointing at the failed revision does not cut the
// rollback's health wait short — and while the target sits on the rolled-back revision,
// an object edited by hand is restored as in steady state.
func TestSlowRollbackThenDriftIsHeld(t *testing.T) {
	run(t, 15, "slow rollback, drift held after it", parallel, func(s *scenario) {
		g := NewWithT(t)
		ctx := context.Background()
		r := s.repo("app")
		good := r.commit(map[string]string{
			"deploy/web.yaml": slowDeployment("web", "example.com/web:1", "", 8, 60),
			"deploy/cm.yaml":  configMap("settings", "good"),
		})
		st := s.syncTarget("web", r, func(st *convergev1.SyncTarget) {
			st.Spec.Timeout = &metav1.Duration{Duration: 40 * time.Second}
		})
		s.waitHealthy(st, good, 90*time.Second)

		bad := r.commit(map[string]string{
			"deploy/web.yaml": slowDeployment("web", "example.com/web:2", "no-such-node: anywhere", 0, 5),
		})
		s.eventually(st, 2*time.Minute, func(g Gomega, st *convergev1.SyncTarget) {
			g.Expect(st.Status.History).NotTo(BeEmpty())
			g.Expect(st.Status.History[0].Revision).To(Equal(bad), ready(st).Message)
			g.Expect(ready(st).Reason).To(Equal(convergev1.RolledBackReason), ready(st).Message)
			g.Expect(st.Status.History[0].Result).To(Equal(convergev1.SyncRolledBack))
			g.Expect(st.Status.LastAppliedRevision).To(Equal(good))
		})
		final := get(g, st)
		g.Expect(ready(final).Message).NotTo(ContainSubstring("superseded"))
		took := final.Status.History[0].Duration
		g.Expect(took).NotTo(BeNil())
		t.Logf("the failed revision and the rollback took %s: %s", took.Duration, final.Status.History[0].Message)
		// The failure names what was not ready: the Deployment, Failed once the
		// controller-manager has marked its progress deadline exceeded, InProgress when a
		// loaded controller-manager has not done so before the health timeout.
		g.Expect(final.Status.History[0].Message).To(MatchRegexp(`apps/v1 Deployment %s/web \((Failed|InProgress)\)`, s.app))
		// Not a speed check: minReadySeconds makes the rollback's rollout last at least 8 s,
		// and the scenario is about a rollout that outlasts the 2 s poll interval.
		g.Expect(took.Duration).To(BeNumerically(">", 8*time.Second), "the rollback's own rollout outlasted the poll interval")
		s.expectEvent(st, corev1.EventTypeWarning, convergev1.HealthCheckFailedReason, bad, "rolling back to "+good)

		// Sitting on the rolled-back revision, with the failed one refused: a hand edit of
		// an object is put back.
		cm := &corev1.ConfigMap{}
		object(g, s.app, "settings", cm)
		cm.Data["value"] = "edited by hand"
		g.Expect(suite.k8s.Update(ctx, cm)).To(Succeed())
		edited := time.Now()
		g.Eventually(func(g Gomega) {
			g.Expect(configMapValue(g, s.app, "settings")).To(Equal("good"))
		}).WithTimeout(30 * time.Second).WithPolling(50 * time.Millisecond).Should(Succeed())
		s.latency("drift on the rolled-back revision→restored", time.Since(edited))
		s.expectEvent(st, corev1.EventTypeNormal, "DriftCorrected", good)
		g.Expect(suite.k8s.Delete(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "settings", Namespace: s.app}})).To(Succeed())
		g.Eventually(func(g Gomega) {
			g.Expect(configMapValue(g, s.app, "settings")).To(Equal("good"))
		}).WithTimeout(30 * time.Second).WithPolling(50 * time.Millisecond).Should(Succeed())
		after := get(g, st)
		g.Expect(after.Status.History[0].Revision).To(Equal(bad), "restoring drift records no new attempt")
		g.Expect(after.Status.LastAttemptedRevision).To(Equal(bad), "the failed revision is not tried again")
	})
}

// TestCrashBeforeStatusWrite: the daemon is killed (SIGKILL) after it created the objects of a revision
// and before it recorded the sync; the next commit drops those objects and a restarted
// daemon prunes them: nothing is orphaned.
func TestCrashBeforeStatusWrite(t *testing.T) {
	run(t, 16, "crash between create and status write", parallel, func(s *scenario) {
		g := NewWithT(t)
		r := s.repo("app")
		first := r.commit(map[string]string{"deploy/a.yaml": configMap("a", "1")})
		st := s.syncTarget("crash", r, func(st *convergev1.SyncTarget) {
			st.Labels = map[string]string{shardLabel: "crash-status"}
			st.Spec.Timeout = &metav1.Duration{Duration: 5 * time.Minute}
		})
		d := startDaemon(t, "crash-status", "--watch-label-selector", shardLabel+"=crash-status")
		s.explainWith(d)
		s.waitHealthy(st, first, 90*time.Second)

		// The next revision creates two objects, then waits for a Deployment that never
		// becomes ready: the daemon is killed during that wait, with its sync unrecorded.
		stuck := r.commit(map[string]string{
			"deploy/extra.yaml": configMap("extra", "created, then orphaned?"),
			"deploy/web.yaml":   slowDeployment("stuck", "example.com/web:1", "no-such-node: anywhere", 0, 600),
		})
		g.Eventually(func(g Gomega) {
			object(g, s.app, "extra", &corev1.ConfigMap{})
			g.Expect(condition(get(g, st), convergev1.ReconcilingCondition).Message).To(ContainSubstring("waiting for"))
		}).WithTimeout(90 * time.Second).WithPolling(100 * time.Millisecond).Should(Succeed())
		d.kill()
		g.Expect(get(g, st).Status.History[0].Revision).To(Equal(first), "the sync of the killed revision is not recorded")

		next := r.remove("deploy/extra.yaml", "deploy/web.yaml")
		g.Expect(d.start()).To(Succeed())
		s.eventually(st, 2*time.Minute, func(g Gomega, st *convergev1.SyncTarget) {
			healthy(g, st, next)
			g.Expect(inventoryIDs(st)).To(Equal([]string{s.app + "_a__ConfigMap"}))
		})
		g.Eventually(func(g Gomega) {
			gone(g, s.app, "extra", &corev1.ConfigMap{})
			gone(g, s.app, "stuck", &appsv1.Deployment{})
		}).WithTimeout(30 * time.Second).Should(Succeed())
		s.t.Logf("revision %s was interrupted; %s pruned what it had created", stuck, next)
	})
}
