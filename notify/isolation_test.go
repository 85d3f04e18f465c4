package notify

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
)

// TestForgeTokenGoesOnlyToTheNotifiersForge: a commit status for a SyncTarget whose source
// URL names another host than the Notifier's forge is not sent: a loopback tripwire named
// by the source URL receives nothing (it used to receive the token in clear text), and the
// error says why. Without provider.address the forge is the public service, over HTTPS.
func TestForgeTokenGoesOnlyToTheNotifiersForge(t *testing.T) {
	tripwire, hits := fakeProvider(t, http.StatusCreated, "")
	hostile := []struct {
		name   string
		p      convergev1.NotificationProvider
		source string
	}{
		{"github, no address, a plain-http source", convergev1.NotificationProvider{Type: "github"}, tripwire.URL + "/x/y.git"},
		{"gitea, no address", convergev1.NotificationProvider{Type: "gitea"}, tripwire.URL + "/x/y.git"},
		{"gitlab, no address", convergev1.NotificationProvider{Type: "gitlab"}, tripwire.URL + "/x/y.git"},
		{"bitbucket, no address", convergev1.NotificationProvider{Type: "bitbucket"}, tripwire.URL + "/x/y.git"},
		{"an address elsewhere", convergev1.NotificationProvider{Type: "gitea", Address: "https://gitea.example.com"}, tripwire.URL + "/x/y.git"},
		{"a github token and a gitlab source", convergev1.NotificationProvider{Type: "github"}, "https://gitlab.com/acme/app.git"},
	}
	for _, tt := range hostile {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			req, err := buildRequest(tt.p, credentials{token: "tok-s3cret", username: "u", password: "p"},
				notification{msg: rolledBackMsg(), text: "x", sourceURL: tt.source})
			if req != nil { // what the daemon would have done with it
				_ = send(context.Background(), http.DefaultClient, req, string(tt.p.Type), time.Now())
			}
			g.Expect(*hits).To(BeEmpty(), "the tripwire received a request")
			g.Expect(err).To(MatchError(ContainSubstring("skipped: the SyncTarget's repository is on")))
		})
	}
	for typ, source := range map[convergev1.ProviderType]string{"github": "git@github.com:acme/app.git",
		"gitlab": "https://gitlab.com/acme/app", "gitea": "https://gitea.com/acme/app", "bitbucket": "https://bitbucket.org/acme/app"} {
		req, err := buildRequest(convergev1.NotificationProvider{Type: typ}, credentials{token: "t"},
			notification{msg: rolledBackMsg(), sourceURL: source})
		NewWithT(t).Expect(err).NotTo(HaveOccurred())
		NewWithT(t).Expect(req.url).To(HavePrefix(publicForges[typ].base+"/"), "the public forge, over HTTPS")
		NewWithT(t).Expect(req.url).To(HavePrefix("https://"))
	}
}

// TestSkippedTargetSaysWhy: the worker does not send a skipped commit status, moves past
// it, does not count it as a failure, and says why on Ready.
func TestSkippedTargetSaysWhy(t *testing.T) {
	g := NewWithT(t)
	tripwire, hits := fakeProvider(t, http.StatusCreated, "")
	n := &convergev1.Notifier{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "commits", Generation: 1},
		Spec: convergev1.NotifierSpec{Provider: convergev1.NotificationProvider{Type: "github",
			SecretRef: &convergev1.LocalObjectReference{Name: "gh"}}}}
	gh := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "gh"}, Data: map[string][]byte{"token": []byte("tok-s3cret")}}
	r, c := unitReconciler(clocktesting.NewFakeClock(t0), Options{}, n, gh)
	w := &worker{r: r, key: client.ObjectKeyFromObject(n)}
	ctx := ctrl.LoggerInto(context.Background(), ctrl.Log)
	w.process(ctx, n, item{target: "web", field: fieldResult, key: "k1", msg: rolledBackMsg(), send: true,
		source: tripwire.URL + "/acme/app.git"})

	g.Expect(*hits).To(BeEmpty())
	got := &convergev1.Notifier{}
	g.Expect(c.Get(ctx, client.ObjectKeyFromObject(n), got)).To(Succeed())
	ready := apimeta.FindStatusCondition(got.Status.Conditions, convergev1.ReadyCondition)
	g.Expect(ready).NotTo(BeNil())
	g.Expect(ready.Status).To(Equal(metav1.ConditionFalse))
	g.Expect(ready.Reason).To(Equal(TargetSkippedReason))
	g.Expect(ready.Message).To(And(HavePrefix("RolledBack of shop/web: skipped"), ContainSubstring(`on "127.0.0.1"`),
		ContainSubstring(`forge ("github.com")`)))
	g.Expect(got.Status.Failed).To(BeZero())
	g.Expect(got.Status.Targets).To(ConsistOf(HaveField("Result", "k1")), "the cursor moved past it")
}

// TestTenantsDoNotShareARateLimit: Notifiers of two namespaces post to the same host with
// their addresses in Secrets (so their specs are alike); tenant A's 30 notifications use
// up A's burst and wait, and tenant B's is sent at once, the fake clock standing still.
func TestTenantsDoNotShareARateLimit(t *testing.T) {
	g := NewWithT(t)
	c := newChat(t)
	var objs []client.Object
	tenant := func(ns string) (*convergev1.Notifier, *worker) {
		n := &convergev1.Notifier{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "team"},
			Spec: convergev1.NotifierSpec{Provider: convergev1.NotificationProvider{Type: "slack",
				SecretRef: &convergev1.LocalObjectReference{Name: "chat"}}}}
		objs = append(objs, n, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "chat"},
			Data: map[string][]byte{"address": []byte(c.srv.URL + "/services/" + ns)}})
		return n, &worker{key: client.ObjectKeyFromObject(n)}
	}
	na, wa := tenant("tenant-a")
	nb, wb := tenant("tenant-b")
	clk := clocktesting.NewFakeClock(t0)
	r, _ := unitReconciler(clk, Options{RateLimit: 2, RateBurst: 10, MaxTries: 1}, objs...)
	wa.r, wb.r = r, r
	say := func(ns string, i int) item {
		return item{target: "web", send: true, msg: Message{Event: "Failed", Namespace: ns, Target: "web", Message: fmt.Sprint("failure ", i)}}
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		for i := range 30 {
			_, _, _ = wa.deliver(ctx, na, say("tenant-a", i), "")
		}
	}()
	g.Eventually(c.received).Should(HaveLen(10), "tenant A's burst")
	g.Eventually(clk.HasWaiters).Should(BeTrue(), "tenant A waits for its rate limit")

	delivered := make(chan string, 1)
	go func() {
		result, _, _ := wb.deliver(ctx, nb, say("tenant-b", 0), "")
		delivered <- result
	}()
	g.Eventually(delivered).Should(Receive(Equal("delivered")), "tenant B waited for tenant A")
	g.Expect(c.received()).To(HaveLen(11))
	g.Expect(c.received()[10]).To(ContainSubstring("tenant-b/web"))
}

// TestIdleRateLimitsAreForgotten: a Notifier's bucket is forgotten once it is full again
// (idle for burst/rate on the fake clock), and one still refilling is kept.
func TestIdleRateLimitsAreForgotten(t *testing.T) {
	g := NewWithT(t)
	clk := clocktesting.NewFakeClock(t0)
	r, _ := unitReconciler(clk, Options{RateLimit: 2, RateBurst: 10})
	a, b := types.NamespacedName{Namespace: "a", Name: "n"}, types.NamespacedName{Namespace: "b", Name: "n"}
	for range 10 {
		g.Expect(r.limits.delay(a, "https://hooks.example.com/a", clk.Now())).To(BeZero())
	}
	clk.Step(time.Second)
	g.Expect(r.limits.delay(b, "https://hooks.example.com/b", clk.Now())).To(BeZero())
	g.Expect(r.limits.buckets).To(HaveLen(2), "a is refilling: 2 of 10")
	clk.Step(4 * time.Second)
	g.Expect(r.limits.delay(b, "https://hooks.example.com/b", clk.Now())).To(BeZero())
	g.Expect(r.limits.buckets).To(HaveLen(1), "a is full again, and forgotten")
	g.Expect(r.limits.buckets).To(HaveKey(limiterKey{notifier: b, host: "hooks.example.com"}))
	for range 10 {
		g.Expect(r.limits.delay(a, "https://hooks.example.com/a", clk.Now())).To(BeZero(), "a's burst, as if never forgotten")
	}
}
