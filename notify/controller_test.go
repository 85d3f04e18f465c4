package notify

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
)

const (
	good = "main@sha1:1111111111111111111111111111111111111111"
	bad  = "main@sha1:2222222222222222222222222222222222222222"
	next = "main@sha1:3333333333333333333333333333333333333333"
)

// TestDeliveryAndRestart: results reach the chat once each, in order; a message that
// the chat refuses with 503 is retried with backoff; a controller stopped mid-retry and
// started again (a daemon restart) delivers it, and nothing twice.
func TestDeliveryAndRestart(t *testing.T) {
	e := newEnv(t, Options{})
	g := NewWithT(t)
	c := newChat(t)
	e.secret("chat", map[string]string{"address": c.srv.URL + "/services/T0/B0/s3cret"})
	n := e.notifier("team", convergev1.NotificationProvider{Type: "slack", SecretRef: &convergev1.LocalObjectReference{Name: "chat"}}, nil)
	st := e.syncTarget("web", "https://git.example.com/acme/app.git")

	e.setStatus(st, result(good, convergev1.SyncSucceeded, "applied revision "+good+": 2 created"))
	g.Eventually(c.received).WithTimeout(20 * time.Second).Should(ConsistOf(ContainSubstring("deployed")))
	e.setStatus(st, deploying(bad)) // not reported to a chat by default
	e.setStatus(st, result(bad, convergev1.SyncRolledBack, "health check failed: Deployment web: ProgressDeadlineExceeded; rolled back to "+good))
	g.Eventually(c.received).Should(HaveLen(2))
	g.Expect(c.received()[1]).To(And(ContainSubstring(e.ns+"/web: rolled back"), ContainSubstring("ProgressDeadlineExceeded")))
	g.Eventually(func() int64 { return e.get(n).Status.Delivered }).Should(BeEquivalentTo(2))

	c.answer(http.StatusServiceUnavailable)
	e.setStatus(st, result(next, convergev1.SyncSucceeded, "applied revision "+next+": 1 configured"))
	g.Eventually(c.attempts).Should(Equal(3))
	e.stepWhenWaiting(2 * time.Second)
	g.Eventually(c.attempts).Should(Equal(4), "retried after the backoff")
	g.Eventually(e.clock.HasWaiters).Should(BeTrue())

	e.restart() // mid-delivery: the cursor says the third result is not delivered
	c.answer(http.StatusOK)
	g.Eventually(c.received).WithTimeout(20 * time.Second).Should(HaveLen(3))
	g.Expect(c.received()[2]).To(ContainSubstring(next))
	g.Eventually(func() int64 { return e.get(n).Status.Delivered }).Should(BeEquivalentTo(3))

	e.restart() // and a restart with nothing left sends nothing
	g.Consistently(c.received).WithTimeout(2 * time.Second).Should(HaveLen(3))
	got := e.get(n)
	raw, err := json.Marshal(got.Status)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(e.logs.String()).To(ContainSubstring("retrying a notification"), "the logs are captured")
	for _, where := range []string{string(raw), e.logs.String()} {
		g.Expect(where).NotTo(ContainSubstring("s3cret"), "the webhook address is a credential")
	}
	g.Expect(got.Status.Targets).To(ConsistOf(HaveField("Name", "web")))
	g.Expect(apimeta.IsStatusConditionTrue(got.Status.Conditions, convergev1.ReadyCondition)).To(BeTrue())
}

// TestGiveUpIsRecorded: a 401 is not retried; a 429 is retried after its Retry-After,
// until the tries run out; both show on Ready and in the metric, and the token and the
// webhook address appear nowhere in the status or events.
func TestGiveUpIsRecorded(t *testing.T) {
	e := newEnv(t, Options{MaxTries: 3})
	g := NewWithT(t)
	c := newChat(t)
	c.answer(http.StatusUnauthorized)
	e.secret("hook", map[string]string{"token": "tok-s3cret-value", "hmacKey": "k3y-s3cret"})
	n := e.notifier("hook", convergev1.NotificationProvider{Type: "webhook", Address: c.srv.URL + "/hook",
		SecretRef: &convergev1.LocalObjectReference{Name: "hook"}}, nil)
	st := e.syncTarget("web", "https://git.example.com/acme/app.git")
	before := counterValue(notificationFailures.WithLabelValues("webhook"))

	e.setStatus(st, result(bad, convergev1.SyncFailed, "apply failed"))
	g.Eventually(func(g Gomega) {
		got := e.get(n)
		g.Expect(got.Status.Failed).To(BeEquivalentTo(1))
		ready := apimeta.FindStatusCondition(got.Status.Conditions, convergev1.ReadyCondition)
		g.Expect(ready).NotTo(BeNil())
		g.Expect(ready.Status).To(Equal(metav1.ConditionFalse))
		g.Expect(ready.Reason).To(Equal(convergev1.DeliveryFailedReason))
		g.Expect(ready.Message).To(ContainSubstring("401"))
	}).WithTimeout(20 * time.Second).Should(Succeed())
	g.Expect(c.attempts()).To(Equal(1), "a 401 is not retried")
	g.Expect(c.hdr.Get("Authorization")).To(Equal("Bearer tok-s3cret-value"))
	g.Expect(counterValue(notificationFailures.WithLabelValues("webhook"))).To(Equal(before + 1))

	c.answer(http.StatusTooManyRequests) // Retry-After: 30
	e.setStatus(st, result(next, convergev1.SyncSucceeded, "applied"))
	g.Eventually(c.attempts).WithTimeout(20 * time.Second).Should(Equal(2))
	e.stepWhenWaiting(29 * time.Second)
	g.Consistently(c.attempts).WithTimeout(time.Second).Should(Equal(2), "Retry-After is honoured")
	e.clock.Step(2 * time.Second)
	g.Eventually(c.attempts).Should(Equal(3))
	e.stepWhenWaiting(31 * time.Second)
	g.Eventually(c.attempts).Should(Equal(4))
	g.Eventually(func() int64 { return e.get(n).Status.Failed }).Should(BeEquivalentTo(2), "given up after 3 tries")
	g.Expect(counterValue(notificationFailures.WithLabelValues("webhook"))).To(Equal(before + 2))

	raw, err := json.Marshal(e.get(n).Status)
	g.Expect(err).NotTo(HaveOccurred())
	var evs corev1.EventList
	g.Expect(k8s.List(context.Background(), &evs, client.InNamespace(e.ns))).To(Succeed())
	evRaw, _ := json.Marshal(evs)
	g.Expect(e.logs.String()).To(ContainSubstring("gave up on a notification"), "the logs are captured")
	for _, secret := range []string{"tok-s3cret-value", "k3y-s3cret"} {
		g.Expect(string(raw)).NotTo(ContainSubstring(secret))
		g.Expect(string(evRaw)).NotTo(ContainSubstring(secret))
		g.Expect(e.logs.String()).NotTo(ContainSubstring(secret))
	}
}

// TestCommitStatuses: a deploy sets "pending" on its commit, its rollback "failure" with
// why; the context names the SyncTarget; an identical status next is not sent again.
func TestCommitStatuses(t *testing.T) {
	e := newEnv(t, Options{})
	g := NewWithT(t)
	srv, got := fakeProvider(t, http.StatusCreated, "")
	e.secret("gh", map[string]string{"token": "ghp-s3cret"})
	e.notifier("github", convergev1.NotificationProvider{Type: "github", Address: srv.URL,
		SecretRef: &convergev1.LocalObjectReference{Name: "gh"}}, nil)
	st := e.syncTarget("web", "git@127.0.0.1:acme/app.git") // on the forge's host (the port aside)

	e.setStatus(st, deploying(bad))
	g.Eventually(func() int { return len(*got) }).WithTimeout(20 * time.Second).Should(Equal(1))
	e.setStatus(st, result(bad, convergev1.SyncRolledBack, "health check failed; rolled back to "+good))
	g.Eventually(func() int { return len(*got) }).Should(Equal(2))
	for i, state := range []string{"pending", "failure"} {
		s := (*got)[i]
		g.Expect(s.path).To(Equal("/repos/acme/app/statuses/" + strings.TrimPrefix(bad, "main@sha1:")))
		g.Expect(s.body).To(And(HaveKeyWithValue("state", state), HaveKeyWithValue("context", "converge/"+e.ns+"/web")))
		g.Expect(s.header.Get("Authorization")).To(Equal("Bearer ghp-s3cret"))
	}
	g.Expect((*got)[1].body["description"]).To(HavePrefix("rolled back: health check failed"))

	// The same failure again (a retry a user asked for): the same status is not sent twice.
	e.setStatus(st, result(bad, convergev1.SyncRolledBack, "health check failed; rolled back to "+good))
	g.Consistently(func() int { return len(*got) }).WithTimeout(2 * time.Second).Should(Equal(2))
}

// TestSelectorAndSuspend: only the selected SyncTargets are reported; what happens while a
// Notifier is suspended is not reported later.
func TestSelectorAndSuspend(t *testing.T) {
	e := newEnv(t, Options{})
	g := NewWithT(t)
	c := newChat(t)
	n := e.notifier("prod", convergev1.NotificationProvider{Type: "discord", Address: c.srv.URL}, func(n *convergev1.Notifier) {
		n.Spec.TargetSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"env": "prod"}}
	})
	prod := e.syncTarget("prod", "https://git.example.com/acme/app.git")
	prod.Labels = map[string]string{"env": "prod"}
	g.Expect(k8s.Update(context.Background(), prod)).To(Succeed())
	dev := e.syncTarget("dev", "https://git.example.com/acme/app.git")
	e.setStatus(dev, result(good, convergev1.SyncSucceeded, "dev deployed"))
	e.setStatus(prod, result(good, convergev1.SyncSucceeded, "prod deployed"))
	g.Eventually(c.attempts).WithTimeout(20 * time.Second).Should(Equal(1))
	g.Consistently(c.attempts).WithTimeout(time.Second).Should(Equal(1), "dev is not selected")

	g.Eventually(func(g Gomega) {
		cur := e.get(n)
		cur.Spec.Suspend = true
		g.Expect(k8s.Update(context.Background(), cur)).To(Succeed())
	}).Should(Succeed())
	g.Eventually(func() int64 { return e.get(n).Status.ObservedGeneration }).Should(BeEquivalentTo(2))
	e.setStatus(prod, result(bad, convergev1.SyncFailed, "prod failed while suspended"))
	g.Eventually(func() string { return e.get(n).Status.Targets[0].Result }).Should(ContainSubstring(bad))
	g.Eventually(func(g Gomega) {
		cur := e.get(n)
		cur.Spec.Suspend = false
		g.Expect(k8s.Update(context.Background(), cur)).To(Succeed())
	}).Should(Succeed())
	g.Consistently(c.attempts).WithTimeout(2 * time.Second).Should(Equal(1))
}

// counterValue reads a counter of the real registry's collectors.
func counterValue(c prometheus.Counter) float64 {
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		return -1
	}
	return m.GetCounter().GetValue()
}

// TestDriftCorrections: the sync reconciler's DriftCorrected Event (as its recorder writes
// it, events.k8s.io/v1) reaches the chat; a series that grew is reported again.
func TestDriftCorrections(t *testing.T) {
	e := newEnv(t, Options{})
	g := NewWithT(t)
	ctx := context.Background()
	c := newChat(t)
	e.notifier("team", convergev1.NotificationProvider{Type: "slack", Address: c.srv.URL}, nil)
	st := e.syncTarget("web", "https://git.example.com/acme/app.git")
	e.setStatus(st, func(s *convergev1.SyncTargetStatus) { s.LastAppliedRevision = good })
	ev := &eventsv1.Event{
		ObjectMeta: metav1.ObjectMeta{Namespace: e.ns, Name: "web.drift"},
		EventTime:  metav1.NowMicro(), ReportingController: "converge", ReportingInstance: "converge-1",
		Action: "Sync", Reason: DriftCorrectedReason, Type: corev1.EventTypeNormal,
		Regarding: corev1.ObjectReference{APIVersion: convergev1.GroupVersion.String(), Kind: convergev1.SyncTargetKind,
			Namespace: e.ns, Name: "web", UID: st.UID},
		Note: "restored 1 objects changed or deleted outside Git (revision " + good + ")",
	}
	g.Expect(k8s.Create(ctx, ev)).To(Succeed())
	g.Eventually(c.received).WithTimeout(20 * time.Second).Should(ConsistOf(
		And(ContainSubstring(e.ns+"/web: drift corrected"), ContainSubstring("restored 1 objects"))))

	ev.Series = &eventsv1.EventSeries{Count: 2, LastObservedTime: metav1.NowMicro()}
	g.Expect(k8s.Update(ctx, ev)).To(Succeed())
	g.Eventually(c.received).Should(HaveLen(2))
	g.Expect(c.received()[1]).To(ContainSubstring("2 times since"))
	g.Consistently(c.received).WithTimeout(2 * time.Second).Should(HaveLen(2))
}

// TestBoundedQueueAndRateLimit: more results than the queue holds are all delivered, in
// order, the rest derived again as the queue drains; the provider's rate limit (1/s,
// burst 1, on the fake clock) spaces the requests.
func TestBoundedQueueAndRateLimit(t *testing.T) {
	e := newEnv(t, Options{QueueSize: 2, RateLimit: 1, RateBurst: 1})
	g := NewWithT(t)
	c := newChat(t)
	e.notifier("team", convergev1.NotificationProvider{Type: "slack", Address: c.srv.URL}, nil)
	st := e.syncTarget("web", "https://git.example.com/acme/app.git")
	revs := []string{good, bad, next, "main@sha1:4444444444444444444444444444444444444444"}
	e.setStatus(st, func(s *convergev1.SyncTargetStatus) {
		for _, rev := range revs {
			result(rev, convergev1.SyncFailed, "failed "+rev)(s)
		}
	})
	g.Eventually(c.received).WithTimeout(20 * time.Second).Should(HaveLen(1))
	for i := 2; i <= len(revs); i++ {
		g.Consistently(c.received).WithTimeout(300*time.Millisecond).Should(HaveLen(i-1), "held by the rate limit")
		g.Expect(queueDepthValue()).To(BeNumerically("<=", 2))
		e.stepWhenWaiting(time.Second)
		g.Eventually(c.received).Should(HaveLen(i))
	}
	for i, rev := range revs {
		g.Expect(c.received()[i]).To(ContainSubstring("failed " + rev))
	}
}

func queueDepthValue() float64 {
	var m dto.Metric
	if err := queueDepth.Write(&m); err != nil {
		return -1
	}
	return m.GetGauge().GetValue()
}

// TestInvalidSummary: a template that does not parse stalls the Notifier (Ready False,
// InvalidSpec) without sending; once fixed, what happened meanwhile is delivered.
func TestInvalidSummary(t *testing.T) {
	e := newEnv(t, Options{})
	g := NewWithT(t)
	c := newChat(t)
	n := e.notifier("team", convergev1.NotificationProvider{Type: "teams", Address: c.srv.URL}, func(n *convergev1.Notifier) {
		n.Spec.Summary = "{{.Event"
	})
	st := e.syncTarget("web", "https://git.example.com/acme/app.git")
	e.setStatus(st, result(bad, convergev1.SyncFailed, "apply failed"))
	g.Eventually(func(g Gomega) {
		ready := apimeta.FindStatusCondition(e.get(n).Status.Conditions, convergev1.ReadyCondition)
		g.Expect(ready).NotTo(BeNil())
		g.Expect(ready.Reason).To(Equal(convergev1.InvalidSpecReason))
		g.Expect(ready.Message).To(ContainSubstring("spec.summary"))
	}).WithTimeout(20 * time.Second).Should(Succeed())
	g.Consistently(c.attempts).WithTimeout(time.Second).Should(BeZero())

	g.Eventually(func(g Gomega) {
		cur := e.get(n)
		cur.Spec.Summary = "{{.Event}} of {{.Target}}"
		g.Expect(k8s.Update(context.Background(), cur)).To(Succeed())
	}).Should(Succeed())
	g.Eventually(c.attempts).WithTimeout(20 * time.Second).Should(Equal(1))
	g.Eventually(func() string {
		return apimeta.FindStatusCondition(e.get(n).Status.Conditions, convergev1.ReadyCondition).Reason
	}).Should(Equal(convergev1.DeliveredReason))
}

// TestReadyMetric: converge_synctarget_ready says, per SyncTarget, whether it is Ready and
// why not, from the registry the daemon serves.
func TestReadyMetric(t *testing.T) {
	e := newEnv(t, Options{})
	g := NewWithT(t)
	ok := e.syncTarget("ok", "https://git.example.com/acme/app.git")
	broken := e.syncTarget("broken", "https://git.example.com/acme/app.git")
	setReady := func(status metav1.ConditionStatus, reason string) func(*convergev1.SyncTargetStatus) {
		return func(s *convergev1.SyncTargetStatus) {
			s.Conditions = []metav1.Condition{{Type: "Ready", Status: status, Reason: reason, Message: "m", LastTransitionTime: metav1.Now()}}
		}
	}
	e.setStatus(ok, setReady(metav1.ConditionTrue, "Succeeded"))
	e.setStatus(broken, setReady(metav1.ConditionFalse, "FetchFailed"))
	g.Eventually(func(g Gomega) {
		families, err := metrics.Registry.Gather()
		g.Expect(err).NotTo(HaveOccurred())
		got := map[string]float64{}
		for _, f := range families {
			if f.GetName() != "converge_synctarget_ready" {
				continue
			}
			for _, m := range f.GetMetric() {
				l := map[string]string{}
				for _, p := range m.GetLabel() {
					l[p.GetName()] = p.GetValue()
				}
				if l["namespace"] == e.ns {
					got[l["name"]+"/"+l["reason"]] = m.GetGauge().GetValue()
				}
			}
		}
		g.Expect(got).To(Equal(map[string]float64{"ok/Succeeded": 1, "broken/FetchFailed": 0}))
	}).WithTimeout(20 * time.Second).Should(Succeed())
}
