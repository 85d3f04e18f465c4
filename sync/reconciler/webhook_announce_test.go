package reconciler_test

import (
	"context"
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
	"github.com/converge-gitops/converge/sources"
	"github.com/converge-gitops/converge/sync/webhook"
)

// patchingClient is a client of the test cluster that calls onPatch before each PATCH
// request it sends.
func patchingClient(tb testing.TB, onPatch func(*http.Request)) client.Client {
	tb.Helper()
	cfg := rest.CopyConfig(admin)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripperFunc(func(req *http.Request) (*http.Response, error) {
			if req.Method == http.MethodPatch {
				onPatch(req)
			}
			return rt.RoundTrip(req)
		})
	})
	c, err := client.New(cfg, client.Options{Scheme: k8s.Scheme(), Mapper: k8s.RESTMapper()})
	if err != nil {
		tb.Fatal(err)
	}
	return c
}

// patchCountingClient is a client of the test cluster that counts the PATCH requests it sends.
func patchCountingClient(tb testing.TB) (client.Client, *atomic.Int64) {
	n := &atomic.Int64{}
	return patchingClient(tb, func(*http.Request) { n.Add(1) }), n
}

// otherReplica is the webhook receiver of a replica that does not reconcile: its poller is
// not the reconciler's, so only the announcement through the API server can wake it.
func otherReplica(tb testing.TB, every time.Duration) (*webhook.Dispatcher, *atomic.Int64) {
	c, patches := patchCountingClient(tb)
	return &webhook.Dispatcher{
		Reader: hooks.Reader, Writer: c, AnnounceEvery: every,
		Scheduler: sources.NewScheduler(sources.SchedulerOptions{}),
	}, patches
}

// hookedTarget is a SyncTarget polled once an hour, with a webhook token, synced at rev.
func hookedTarget(t *testing.T, f *fixture, rev string) *convergev1.SyncTarget {
	NewWithT(t).Expect(k8s.Create(context.Background(), &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "hook", Namespace: f.ns},
		Data:       map[string][]byte{"token": []byte("s3cret")},
	})).To(Succeed())
	st := f.syncTarget("hooked", func(st *convergev1.SyncTarget) {
		st.Spec.Source.Interval = &metav1.Duration{Duration: time.Hour}
		st.Spec.Source.WebhookSecretRef = &convergev1.LocalObjectReference{Name: "hook"}
	})
	eventually(t, st, func(g Gomega, st *convergev1.SyncTarget) {
		g.Expect(st.Status.LastHealthyRevision).To(Equal(rev))
	})
	return st
}

// TestPushThroughAnotherReplicaDeploys: a push accepted by the webhook receiver of a replica
// that does not reconcile (not the leader, or another shard) deploys the new commit within
// seconds although the SyncTarget polls once an hour: the receiver announces it through the
// converge.dev/pushedAt annotation. A webhook with a wrong signature patches nothing.
func TestPushThroughAnotherReplicaDeploys(t *testing.T) {
	requireCluster(t)
	g := NewWithT(t)
	f := newFixture(t)
	rev := f.commit(map[string]string{"deploy/a.yaml": configMap("a", "1")})
	st := hookedTarget(t, f, rev)
	w, patches := otherReplica(t, time.Second)
	h := sources.NewWebhookHandler(w, w, sources.WebhookOptions{})

	next := f.commit(map[string]string{"deploy/a.yaml": configMap("a", "2")})
	wrong, wrongSig := signedPush(f.url, 0, "guess")
	g.Expect(call(h, wrong, wrongSig).Code).To(Equal(http.StatusUnauthorized))
	g.Expect(patches.Load()).To(BeZero(), "a refused webhook patches nothing")
	g.Expect(get(g, st).Annotations).NotTo(HaveKey(convergev1.PushedAtAnnotation))

	pushed := time.Now()
	body, sig := signedPush(f.url, 0, "s3cret")
	g.Expect(call(h, body, sig)).To(Equal(answer{Code: http.StatusAccepted, Header: http.Header{}, Body: "triggered 1\n"}))
	eventually(t, st, func(g Gomega, st *convergev1.SyncTarget) {
		g.Expect(st.Status.LastHealthyRevision).To(Equal(next))
	})
	t.Logf("push -> healthy through another replica: %s", time.Since(pushed).Round(time.Millisecond))
	g.Expect(getCM(g, f.app, "a").Data["value"]).To(Equal("2"))
	g.Expect(patches.Load()).To(BeEquivalentTo(1), "one patch for the one target signed")
	g.Expect(get(g, st).Annotations).To(HaveKey(convergev1.PushedAtAnnotation))
}

// TestPushAnnouncementsCoalesce: signed pushes patch a SyncTarget at most once per
// AnnounceEvery, and the pushes that arrived within it are announced when it ends: a commit
// pushed right after an announcement still deploys, from the one trailing patch.
func TestPushAnnouncementsCoalesce(t *testing.T) {
	// Not beside other tests: the five pushes must land within the 8 s window the first
	// announcement opened, after the first revision's sync, which a loaded machine slows.
	requireCluster(t)
	g := NewWithT(t)
	f := newFixture(t)
	rev := f.commit(map[string]string{"deploy/a.yaml": configMap("a", "1")})
	st := hookedTarget(t, f, rev)
	w, patches := otherReplica(t, 8*time.Second)
	h := sources.NewWebhookHandler(w, w, sources.WebhookOptions{})
	body, sig := signedPush(f.url, 0, "s3cret")

	first := f.commit(map[string]string{"deploy/a.yaml": configMap("a", "2")})
	g.Expect(call(h, body, sig).Code).To(Equal(http.StatusAccepted))
	eventually(t, st, func(g Gomega, st *convergev1.SyncTarget) {
		g.Expect(st.Status.LastHealthyRevision).To(Equal(first))
	})
	var last string
	for i := range 5 {
		last = f.commit(map[string]string{"deploy/a.yaml": configMap("a", fmt.Sprint(3+i))})
		g.Expect(call(h, body, sig).Code).To(Equal(http.StatusAccepted))
	}
	g.Expect(patches.Load()).To(BeEquivalentTo(1), "the pushes within the window wait for its end")
	eventually(t, st, func(g Gomega, st *convergev1.SyncTarget) {
		g.Expect(st.Status.LastHealthyRevision).To(Equal(last))
	})
	g.Expect(patches.Load()).To(BeEquivalentTo(2), "6 pushes, two announcements")
	g.Expect(getCM(g, f.app, "a").Data["value"]).To(Equal("7"))
}

// TestPushedAtDoesNotRetryARefusedRevision: an announced push only polls the source; unlike
// a user's request it does not try again a revision that was rolled back.
func TestPushedAtDoesNotRetryARefusedRevision(t *testing.T) {
	t.Parallel()
	requireCluster(t)
	g := NewWithT(t)
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
	attempts := func(g Gomega) int {
		n := 0
		for _, e := range get(g, st).Status.History {
			if e.Revision == bad {
				n++
			}
		}
		return n
	}
	g.Expect(attempts(g)).To(Equal(1))

	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, convergev1.PushedAtAnnotation, time.Now().UTC().Format(time.RFC3339Nano))
	g.Expect(k8s.Patch(context.Background(), get(g, st), client.RawPatch(types.MergePatchType, []byte(patch)))).To(Succeed())
	g.Consistently(func(g Gomega) {
		g.Expect(attempts(g)).To(Equal(1), "a push announced is no request to try again")
		web := &appsv1.Deployment{}
		g.Expect(k8s.Get(context.Background(), client.ObjectKey{Namespace: f.app, Name: "web"}, web)).To(Succeed())
		g.Expect(web.Spec.Template.Spec.NodeSelector).To(BeEmpty(), "the refused revision is not applied again")
	}).WithTimeout(3 * time.Second).WithPolling(200 * time.Millisecond).Should(Succeed())
}

// TestAnnouncingDoesNotHoldThePush: the receiver answers a push, and polls, without waiting
// for the API server to take the announcement.
func TestAnnouncingDoesNotHoldThePush(t *testing.T) {
	requireCluster(t)
	g := NewWithT(t)
	f := newFixture(t)
	rev := f.commit(map[string]string{"deploy/a.yaml": configMap("a", "1")})
	st := hookedTarget(t, f, rev)
	release := make(chan struct{})
	slow := patchingClient(t, func(req *http.Request) {
		select {
		case <-release:
		case <-req.Context().Done():
		}
	})
	w := &webhook.Dispatcher{Reader: hooks.Reader, Writer: slow, Scheduler: hooks.Scheduler}
	h := sources.NewWebhookHandler(w, w, sources.WebhookOptions{})
	body, sig := signedPush(f.url, 0, "s3cret")

	next := f.commit(map[string]string{"deploy/a.yaml": configMap("a", "2")})
	answered := make(chan answer, 1)
	go func() { answered <- call(h, body, sig) }()
	g.Eventually(answered).WithTimeout(10*time.Second).Should(Receive(HaveField("Code", http.StatusAccepted)),
		"answered while the announcement waits")
	eventually(t, st, func(g Gomega, st *convergev1.SyncTarget) {
		g.Expect(st.Status.LastHealthyRevision).To(Equal(next), "this replica polled at once")
	})
	close(release)
	eventually(t, st, func(g Gomega, st *convergev1.SyncTarget) {
		g.Expect(st.Annotations).To(HaveKey(convergev1.PushedAtAnnotation), "announced all the same")
	})
}
