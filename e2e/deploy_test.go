package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
)

// stack is a Deployment, a Service and a ConfigMap named after prefix.
func stack(prefix, image, value string) map[string]string {
	return map[string]string{
		"deploy/deployment.yaml": deployment(prefix, 2, image, ""),
		"deploy/service.yaml":    service(prefix),
		"deploy/configmap.yaml":  configMap(prefix+"-settings", value),
	}
}

// expectStack checks that the stack runs image and holds value.
func expectStack(g Gomega, ns, prefix, image, value string) {
	d := &appsv1.Deployment{}
	object(g, ns, prefix, d)
	g.Expect(d.Spec.Template.Spec.Containers[0].Image).To(Equal(image))
	g.Expect(d.Status.UpdatedReplicas).To(Equal(int32(2)))
	g.Expect(d.Status.AvailableReplicas).To(Equal(int32(2)))
	svc := &corev1.Service{}
	object(g, ns, prefix, svc)
	g.Expect(svc.Spec.ClusterIP).NotTo(BeEmpty())
	g.Expect(configMapValue(g, ns, prefix+"-settings")).To(Equal(value))
}

// Scenario 1: a push deploys a Deployment, Service and ConfigMap, announced by a signed
// webhook or found by polling; then one workload of every kind reaches healthy.
func TestPushToDeploy(t *testing.T) {
	run(t, 1, "push to deploy", parallel, func(s *scenario) {
		g := NewWithT(t)
		// Polls once an hour: only the webhook brings a push in time.
		hooked := s.repo("hooked")
		rev1 := hooked.commit(stack("web", "example.com/web:1", "one"))
		web := s.syncTarget("web", hooked, func(st *convergev1.SyncTarget) {
			st.Spec.Source.Interval = &metav1.Duration{Duration: time.Hour}
			st.Spec.Source.WebhookSecretRef = &convergev1.LocalObjectReference{Name: webhookSecret}
		})
		s.eventually(web, 90*time.Second, func(g Gomega, st *convergev1.SyncTarget) {
			healthy(g, st, rev1)
			g.Expect(st.Status.Inventory.Entries).To(HaveLen(3))
			g.Expect(st.Status.History[0].Created).To(Equal(int32(3)))
		})
		expectStack(g, s.app, "web", "example.com/web:1", "one")
		s.expectEvent(web, corev1.EventTypeNormal, convergev1.SucceededReason, rev1)

		// A push: nothing happens until the forge's webhook arrives, and a webhook with a
		// wrong signature is refused.
		rev2 := hooked.commit(stack("web", "example.com/web:2", "two"))
		g.Expect(pushWebhook(g, hooked, "not-the-token")).To(Equal(http.StatusUnauthorized))
		g.Consistently(func(g Gomega) {
			g.Expect(get(g, web).Status.LastFetchedRevision).To(Equal(rev1))
		}).WithTimeout(2 * time.Second).WithPolling(200 * time.Millisecond).Should(Succeed())
		pushed := time.Now()
		g.Expect(pushWebhook(g, hooked, webhookToken)).To(Equal(http.StatusAccepted))
		s.eventually(web, 60*time.Second, func(g Gomega, st *convergev1.SyncTarget) { healthy(g, st, rev2) })
		s.latency("commit→healthy (webhook)", time.Since(pushed))
		expectStack(g, s.app, "web", "example.com/web:2", "two")
		s.expectEvent(web, corev1.EventTypeNormal, convergev1.SucceededReason, rev2)

		// The same push to a repository that is only polled, every 2 s.
		polled := s.repo("polled")
		prev := polled.commit(stack("polled", "example.com/polled:1", "one"))
		poll := s.syncTarget("polled", polled, nil)
		s.waitHealthy(poll, prev, 90*time.Second)
		committed := time.Now()
		next := polled.commit(stack("polled", "example.com/polled:2", "two"))
		s.waitHealthy(poll, next, 60*time.Second)
		s.latency("commit→healthy (poll 2s)", time.Since(committed))
		expectStack(g, s.app, "polled", "example.com/polled:2", "two")
		s.expectEvent(poll, corev1.EventTypeNormal, convergev1.SucceededReason, next)

		// One of each workload kind, through the controller-manager, scheduler and kwok.
		rev3 := hooked.commit(workloads())
		g.Expect(pushWebhook(g, hooked, webhookToken)).To(Equal(http.StatusAccepted))
		s.eventually(web, 120*time.Second, func(g Gomega, st *convergev1.SyncTarget) {
			healthy(g, st, rev3)
			g.Expect(st.Status.Inventory.Entries).To(HaveLen(3 + 8))
		})
		ns := s.app
		rs := &appsv1.ReplicaSet{}
		object(g, ns, "w-rs", rs)
		g.Expect(rs.Status.ReadyReplicas).To(Equal(int32(2)))
		sts := &appsv1.StatefulSet{}
		object(g, ns, "w-sts", sts)
		g.Expect(sts.Status.ReadyReplicas).To(Equal(int32(2)))
		ds := &appsv1.DaemonSet{}
		object(g, ns, "w-ds", ds)
		g.Expect(ds.Status.DesiredNumberScheduled).To(Equal(int32(3)), "one pod per kwok node")
		g.Expect(ds.Status.NumberReady).To(Equal(int32(3)))
		// kstatus counts a started Job as Current; its pods complete on kwok.
		g.Eventually(func(g Gomega) {
			job := &batchv1.Job{}
			object(g, ns, "w-job", job)
			g.Expect(job.Status.Succeeded).To(Equal(int32(2)))
		}).WithTimeout(30 * time.Second).Should(Succeed())
		object(g, ns, "w-cron", &batchv1.CronJob{})
		d := &appsv1.Deployment{}
		object(g, ns, "w-deploy", d)
		g.Expect(d.Status.AvailableReplicas).To(Equal(int32(2)))
		object(g, ns, "w-deploy", &corev1.Service{})
		pods := &corev1.PodList{}
		g.Expect(suite.k8s.List(context.Background(), pods, client.InNamespace(ns))).To(Succeed())
		running := 0
		for _, p := range pods.Items {
			if p.Status.Phase == corev1.PodRunning || p.Status.Phase == corev1.PodSucceeded {
				running++
			}
		}
		// web 2, w-deploy 2, w-rs 2, w-sts 2, w-ds 3, w-job 2 (succeeded)
		g.Expect(running).To(BeNumerically(">=", 13), "pods run on the kwok nodes")
		s.expectEvent(web, corev1.EventTypeNormal, convergev1.SucceededReason, rev3)
	})
}

// Scenario 2: replicas and image change roll out; a deleted file's objects are pruned,
// except one handed to another SyncTarget and one marked prune: disabled.
func TestUpdateAndPrune(t *testing.T) {
	run(t, 2, "update and prune", parallel, func(s *scenario) {
		g := NewWithT(t)
		ctx := context.Background()
		r := s.repo("app")
		rev1 := r.commit(map[string]string{
			"deploy/web.yaml":    deployment("web", 1, "example.com/web:1", ""),
			"deploy/extra.yaml":  configMap("extra", "x") + "---\n" + service("extra"),
			"deploy/keep.yaml":   "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: keep\n  annotations: {converge.dev/prune: disabled}\ndata: {value: x}\n",
			"deploy/handed.yaml": configMap("handed", "x"),
		})
		st := s.syncTarget("app", r, nil)
		s.eventually(st, 90*time.Second, func(g Gomega, st *convergev1.SyncTarget) {
			healthy(g, st, rev1)
			g.Expect(st.Status.Inventory.Entries).To(HaveLen(5))
		})

		rev2 := r.commit(map[string]string{"deploy/web.yaml": deployment("web", 3, "example.com/web:2", "")})
		s.eventually(st, 60*time.Second, func(g Gomega, st *convergev1.SyncTarget) {
			healthy(g, st, rev2)
			g.Expect(st.Status.History[0].Configured).To(Equal(int32(1)))
		})
		d := &appsv1.Deployment{}
		object(g, s.app, "web", d)
		g.Expect(d.Spec.Template.Spec.Containers[0].Image).To(Equal("example.com/web:2"))
		g.Expect(*d.Spec.Replicas).To(Equal(int32(3)))
		g.Expect(d.Status.UpdatedReplicas).To(Equal(int32(3)), "health waited for the rollout")
		g.Expect(d.Status.AvailableReplicas).To(Equal(int32(3)))
		s.expectEvent(st, corev1.EventTypeNormal, convergev1.SucceededReason, rev2, "1 configured")

		// Someone hands "handed" over to another SyncTarget, then the files go.
		handed := &corev1.ConfigMap{}
		object(g, s.app, "handed", handed)
		handed.Labels[convergev1.NameLabel] = "someone-else"
		g.Expect(suite.k8s.Update(ctx, handed, client.FieldOwner("e2e-handover"))).To(Succeed())
		rev3 := r.remove("deploy/extra.yaml", "deploy/keep.yaml", "deploy/handed.yaml")
		s.eventually(st, 60*time.Second, func(g Gomega, st *convergev1.SyncTarget) {
			healthy(g, st, rev3)
			g.Expect(st.Status.Inventory.Entries).To(ConsistOf(HaveField("ID", s.app+"_web_apps_Deployment")))
			g.Expect(st.Status.History[0].Deleted).To(Equal(int32(2)), "the extra ConfigMap and Service")
		})
		gone(g, s.app, "extra", &corev1.ConfigMap{})
		gone(g, s.app, "extra", &corev1.Service{})
		g.Expect(configMapValue(g, s.app, "keep")).To(Equal("x"), "prune: disabled survives")
		object(g, s.app, "handed", handed)
		g.Expect(handed.Labels).To(HaveKeyWithValue(convergev1.NameLabel, "someone-else"), "another SyncTarget's object survives")
		object(g, s.app, "web", d)
		s.expectEvent(st, corev1.EventTypeNormal, convergev1.SucceededReason, rev3, "2 pruned")
	})
}

// Scenario 3: a managed Deployment scaled by hand and a managed ConfigMap deleted are
// both restored within 10 s, with no new commit and no poll to help.
func TestSelfHeal(t *testing.T) {
	run(t, 3, "self-heal", parallel, func(s *scenario) {
		g := NewWithT(t)
		ctx := context.Background()
		r := s.repo("app")
		rev := r.commit(map[string]string{
			"deploy/web.yaml": deployment("web", 2, "example.com/web:1", ""),
			"deploy/cm.yaml":  configMap("settings", "from git"),
		})
		st := s.syncTarget("app", r, func(st *convergev1.SyncTarget) {
			st.Spec.Source.Interval = &metav1.Duration{Duration: time.Hour}
		})
		s.waitHealthy(st, rev, 90*time.Second)
		before := get(g, st)

		// kubectl scale deployment/web --replicas=5; kubectl delete configmap/settings
		d := &appsv1.Deployment{}
		object(g, s.app, "web", d)
		scale := &autoscalingv1.Scale{Spec: autoscalingv1.ScaleSpec{Replicas: 5}}
		g.Expect(suite.k8s.SubResource("scale").Update(ctx, d, client.WithSubResourceBody(scale),
			client.FieldOwner("kubectl-scale"))).To(Succeed())
		g.Expect(suite.k8s.Delete(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: s.app, Name: "settings"}})).To(Succeed())
		drifted := time.Now()

		var scaledBack, recreated time.Duration
		g.Eventually(func(g Gomega) {
			d := &appsv1.Deployment{}
			object(g, s.app, "web", d)
			if scaledBack == 0 && *d.Spec.Replicas == 2 {
				scaledBack = time.Since(drifted)
			}
			cm := &corev1.ConfigMap{}
			if recreated == 0 && suite.k8s.Get(ctx, client.ObjectKey{Namespace: s.app, Name: "settings"}, cm) == nil {
				recreated = time.Since(drifted)
				g.Expect(cm.Data["value"]).To(Equal("from git"))
			}
			g.Expect(scaledBack).NotTo(BeZero(), "the Deployment is scaled back to 2")
			g.Expect(recreated).NotTo(BeZero(), "the ConfigMap is back")
		}).WithTimeout(10*time.Second).WithPolling(50*time.Millisecond).Should(Succeed(), func() string {
			d := &appsv1.Deployment{}
			_ = suite.k8s.Get(ctx, client.ObjectKey{Namespace: s.app, Name: "web"}, d)
			b, _ := json.MarshalIndent(d.ManagedFields, "", " ")
			return fmt.Sprintf("scaled back after %s, recreated after %s; the Deployment's managed fields: %s", scaledBack, recreated, b)
		})
		s.latency("drift→restored (scale)", scaledBack)
		s.latency("drift→restored (delete)", recreated)

		s.expectEvent(st, corev1.EventTypeNormal, "DriftCorrected", rev)
		after := get(g, st)
		healthy(g, after, rev)
		g.Expect(after.Status.History).To(HaveLen(len(before.Status.History)), "restored without a new sync")
		g.Expect(after.Status.LastFetchedRevision).To(Equal(rev))
		g.Eventually(func(g Gomega) {
			d := &appsv1.Deployment{}
			object(g, s.app, "web", d)
			g.Expect(d.Status.Replicas).To(Equal(int32(2)), "the extra pods go away")
		}).WithTimeout(30 * time.Second).Should(Succeed())
	})
}
