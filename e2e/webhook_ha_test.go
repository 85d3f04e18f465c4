package e2e

import (
	"net/http"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
)

// hookedTarget creates a SyncTarget of shard, polled every 5 minutes (only a webhook brings
// a push in time), with the webhook token, and waits for rev to be healthy.
func (s *scenario) hookedTarget(r *repo, shard, rev string) *convergev1.SyncTarget {
	st := s.syncTarget("app", r, func(st *convergev1.SyncTarget) {
		st.Labels = map[string]string{shardLabel: shard}
		st.Spec.Source.Interval = &metav1.Duration{Duration: 5 * time.Minute}
		st.Spec.Source.WebhookSecretRef = &convergev1.LocalObjectReference{Name: webhookSecret}
	})
	s.waitHealthy(st, rev, 90*time.Second)
	return st
}

// pushUntilAccepted sends the push to the receiver at base until it is accepted (a
// receiver whose cache does not hold the SyncTarget yet refuses it, which changes nothing)
// and returns when the accepted one was sent.
func (s *scenario) pushUntilAccepted(base string, r *repo) time.Time {
	var pushed time.Time
	NewWithT(s.t).Eventually(func(g Gomega) {
		pushed = time.Now()
		g.Expect(pushWebhookTo(g, base, r, webhookToken)).To(Equal(http.StatusAccepted))
	}).WithTimeout(30 * time.Second).WithPolling(100 * time.Millisecond).Should(Succeed())
	return pushed
}

// Scenario 17: two replicas with leader election; a push webhook sent to the replica that
// is not the leader deploys the commit within seconds, though the source is polled every 5
// minutes: the follower announces the push through the SyncTarget, and the leader polls.
func TestWebhookThroughNonLeader(t *testing.T) {
	run(t, 17, "webhook through a non-leader", parallel, func(s *scenario) {
		g := NewWithT(t)
		const shard, acquired = "hook-leader", "Successfully acquired lease"
		args := []string{"--watch-label-selector", shardLabel + "=" + shard,
			"--leader-elect", "--leader-election-namespace", s.ns, "--leader-election-id", "e2e-hook-leader",
			"--leader-election-retry-period", "500ms"}
		leader := startDaemon(t, "hook-leader-1", append(args, "--webhook-bind-address", freeAddr(t))...)
		s.explainWith(leader)
		g.Eventually(func() bool { return leader.logged(acquired) }).WithTimeout(60 * time.Second).Should(BeTrue())
		followerHook := freeAddr(t)
		follower := startDaemon(t, "hook-leader-2", append(args, "--webhook-bind-address", followerHook)...)
		s.explainWith(follower)
		g.Expect(follower.waitReady(60 * time.Second)).To(Succeed())

		r := s.repo("app")
		st := s.hookedTarget(r, shard, r.commit(map[string]string{"deploy/cm.yaml": configMap("settings", "1")}))
		rev2 := r.commit(map[string]string{"deploy/cm.yaml": configMap("settings", "2")})
		pushed := s.pushUntilAccepted("http://"+followerHook, r)
		s.waitHealthy(st, rev2, 60*time.Second)
		s.latency("push→healthy through a non-leader", time.Since(pushed))
		g.Expect(configMapValue(g, s.app, "settings")).To(Equal("2"))
		g.Expect(follower.logged(acquired)).To(BeFalse(), "the follower never led")
		g.Expect(get(g, st).Annotations).To(HaveKey(convergev1.PushedAtAnnotation))
	})
}

// Scenario 18: two shards behind one webhook endpoint; a push sent to the shared daemon's
// receiver for a SyncTarget of another shard (its label selector excludes it) is synced
// by that shard within seconds, though the source is polled every 5 minutes.
func TestWebhookToAnotherShard(t *testing.T) {
	run(t, 18, "webhook to another shard", parallel, func(s *scenario) {
		g := NewWithT(t)
		const shard = "hook-shard-b"
		b := startDaemon(t, shard, "--watch-label-selector", shardLabel+"="+shard)
		s.explainWith(b)
		s.explainWith(suite.daemon)
		g.Expect(b.waitReady(60 * time.Second)).To(Succeed())

		r := s.repo("app")
		st := s.hookedTarget(r, shard, r.commit(map[string]string{"deploy/cm.yaml": configMap("settings", "1")}))
		rev2 := r.commit(map[string]string{"deploy/cm.yaml": configMap("settings", "2")})
		pushed := s.pushUntilAccepted(suite.webhookURL, r)
		s.waitHealthy(st, rev2, 60*time.Second)
		s.latency("push→healthy through another shard", time.Since(pushed))
		g.Expect(configMapValue(g, s.app, "settings")).To(Equal("2"))
	})
}
