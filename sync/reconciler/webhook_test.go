package reconciler_test

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
	"github.com/converge-gitops/converge/sources"
	"github.com/converge-gitops/converge/sync/webhook"
)

// TestPushWebhookDeploys: with an hour between polls, a signed push webhook makes the
// new commit deploy within seconds; a webhook signed with another secret does nothing.
func TestPushWebhookDeploys(t *testing.T) {
	t.Parallel()
	requireCluster(t)
	ctx := context.Background()
	f := newFixture(t)
	g := NewWithT(t)
	g.Expect(k8s.Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "hook", Namespace: f.ns},
		Data:       map[string][]byte{"token": []byte("s3cret")},
	})).To(Succeed())
	rev := f.commit(map[string]string{"deploy/a.yaml": configMap("a", "1")})
	st := f.syncTarget("hooked", func(st *convergev1.SyncTarget) {
		st.Spec.Source.Interval = &metav1.Duration{Duration: time.Hour}
		st.Spec.Source.WebhookSecretRef = &convergev1.LocalObjectReference{Name: "hook"}
	})
	eventually(t, st, func(g Gomega, st *convergev1.SyncTarget) {
		g.Expect(st.Status.LastHealthyRevision).To(Equal(rev))
	})

	srv := httptest.NewServer(sources.NewWebhookHandler(hooks, hooks, sources.WebhookOptions{}))
	t.Cleanup(srv.Close)
	push := func(secret string) int {
		body := []byte(fmt.Sprintf(`{"repository": {"url": %q}}`, f.url))
		mac := hmac.New(sha256.New, []byte(secret))
		mac.Write(body)
		req, err := http.NewRequest(http.MethodPost, srv.URL+sources.WebhookPath, bytes.NewReader(body))
		g.Expect(err).NotTo(HaveOccurred())
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-Signature", "sha256="+hex.EncodeToString(mac.Sum(nil)))
		resp, err := http.DefaultClient.Do(req)
		g.Expect(err).NotTo(HaveOccurred())
		_ = resp.Body.Close()
		return resp.StatusCode
	}

	next := f.commit(map[string]string{"deploy/a.yaml": configMap("a", "2")})
	g.Expect(push("wrong")).To(Equal(http.StatusUnauthorized))
	g.Consistently(func(g Gomega) {
		g.Expect(get(g, st).Status.LastFetchedRevision).To(Equal(rev))
	}).WithTimeout(2 * time.Second).Should(Succeed())

	pushed := time.Now()
	g.Expect(push("s3cret")).To(Equal(http.StatusAccepted))
	eventually(t, st, func(g Gomega, st *convergev1.SyncTarget) {
		g.Expect(st.Status.LastHealthyRevision).To(Equal(next))
	})
	t.Logf("push -> healthy through the webhook: %s", time.Since(pushed).Round(time.Millisecond))
	g.Expect(getCM(g, f.app, "a").Data["value"]).To(Equal("2"))
}

// countingClient is a client of the test cluster that reads the API server directly (no
// cache) and counts the requests it sends.
func countingClient(tb testing.TB) (client.Client, *atomic.Int64) {
	tb.Helper()
	n := &atomic.Int64{}
	cfg := rest.CopyConfig(admin)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripperFunc(func(req *http.Request) (*http.Response, error) {
			n.Add(1)
			return rt.RoundTrip(req)
		})
	})
	c, err := client.New(cfg, client.Options{Scheme: k8s.Scheme(), Mapper: k8s.RESTMapper()})
	if err != nil {
		tb.Fatal(err)
	}
	return c, n
}

// splitReader lists from one reader (the manager's cache, which indexes SyncTargets by
// repository) and gets from another (the API server, counted), as the daemon's client does
// with Secrets excluded from its cache.
type splitReader struct {
	client.Reader
	get client.Reader
}

func (s splitReader) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	return s.get.Get(ctx, key, obj, opts...)
}

// countedWebhooks is a webhook receiver whose every API request (Secrets, credentials) is
// counted, as the daemon's: SyncTargets from the manager's cache, Secrets from the API server.
func countedWebhooks(tb testing.TB, clk clock.PassiveClock) (*webhook.Dispatcher, *atomic.Int64) {
	c, n := countingClient(tb)
	return &webhook.Dispatcher{
		Reader:    splitReader{Reader: hooks.Reader, get: c},
		Scheduler: hooks.Scheduler,
		Clock:     clk,
	}, n
}

// followers creates n SyncTargets following one repository, each with a webhook token
// Secret ("hook" holds token) and a credentials Secret, the last `missing` of them naming a
// webhook Secret that does not exist. Nothing listens at the repository's URL: their polls
// fail at once, which is all the webhook needs. It returns the repository's URL once the
// manager's cache holds them all.
func followers(tb testing.TB, n, missing int, token string) (ns, url string) {
	tb.Helper()
	ctx := context.Background()
	ns = fmt.Sprintf("hooks-%d", fixtures.Add(1))
	url = "http://127.0.0.1:1/" + ns + "/app.git"
	objs := []client.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "hook", Namespace: ns}, Data: map[string][]byte{"token": []byte(token)}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "creds", Namespace: ns},
			Data: map[string][]byte{sources.SecretUsername: []byte("git"), sources.SecretPassword: []byte("pw")}},
	}
	for i := range n {
		hook := "hook"
		if i >= n-missing {
			hook = "absent"
		}
		objs = append(objs, &convergev1.SyncTarget{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("t%d", i), Namespace: ns},
			Spec: convergev1.SyncTargetSpec{
				Source: convergev1.GitSource{
					URL: url, Ref: convergev1.GitRef{Branch: "main"},
					Interval:         &metav1.Duration{Duration: time.Hour},
					SecretRef:        &convergev1.LocalObjectReference{Name: "creds"},
					WebhookSecretRef: &convergev1.LocalObjectReference{Name: hook},
				},
				Path: "deploy", TargetNamespace: ns,
			},
		})
	}
	for _, o := range objs {
		if err := k8s.Create(ctx, o); err != nil {
			tb.Fatal(err)
		}
	}
	tb.Cleanup(func() {
		for _, o := range objs[3:] {
			_ = k8s.Delete(context.Background(), o)
		}
	})
	repo, err := sources.NormalizeURL(url)
	if err != nil {
		tb.Fatal(err)
	}
	NewWithT(tb).Eventually(func(g Gomega) {
		list := &convergev1.SyncTargetList{}
		g.Expect(hooks.Reader.List(ctx, list, client.InNamespace(ns))).To(Succeed())
		g.Expect(list.Items).To(HaveLen(n))
		targets, err := hooks.TargetsForRepo(ctx, repo)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(targets).To(HaveLen(n - missing))
	}).WithTimeout(30 * time.Second).Should(Succeed())
	return ns, url
}

// signedPush is a push for url, padded to about pad bytes, with its signature by secret.
func signedPush(url string, pad int, secret string) (body []byte, sig string) {
	body = fmt.Appendf(nil, `{"repository": {"url": %q}, "pad": %q}`, url, strings.Repeat("x", pad))
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write(body)
	return body, "sha256=" + hex.EncodeToString(mac.Sum(nil))
}

// answer is what a webhook call got back.
type answer struct {
	Code   int
	Header http.Header
	Body   string
}

func call(h http.Handler, body []byte, sig string) answer {
	req := httptest.NewRequest(http.MethodPost, sources.WebhookPath, bytes.NewReader(body))
	req.Header.Set("X-Hub-Signature-256", sig)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return answer{Code: rec.Code, Header: rec.Header(), Body: rec.Body.String()}
}

// TestWebhookRefusalsCostNoAPIRequests: for a repository 20 SyncTargets follow (two of them
// naming a webhook Secret that does not exist), the first call with a wrong signature reads
// each webhook Secret once, and the calls after it read nothing: no Secret, no credentials.
// The answer is the one a repository nobody follows gets. A signed call reads the
// credentials of its targets, once: a replay of it reads nothing either.
func TestWebhookRefusalsCostNoAPIRequests(t *testing.T) {
	requireCluster(t)
	g := NewWithT(t)
	_, url := followers(t, 20, 2, "s3cret")
	w, requests := countedWebhooks(t, clocktesting.NewFakePassiveClock(time.Now()))
	h := sources.NewWebhookHandler(w, w, sources.WebhookOptions{})

	wrong, wrongSig := signedPush(url, 1024, "guess")
	refused := call(h, wrong, wrongSig)
	g.Expect(refused.Code).To(Equal(http.StatusUnauthorized))
	g.Expect(requests.Load()).To(BeEquivalentTo(2), "warm-up: the webhook Secret and the missing one, read once each")

	requests.Store(0)
	for range 10 {
		g.Expect(call(h, wrong, wrongSig)).To(Equal(refused))
	}
	g.Expect(requests.Load()).To(BeZero(), "API requests for 10 refused calls")

	unknown, unknownSig := signedPush(strings.Replace(url, "/app.git", "/unknown.git", 1), 1024, "guess")
	g.Expect(call(h, unknown, unknownSig)).To(Equal(refused), "an unknown repository is answered alike")
	g.Expect(requests.Load()).To(BeZero())

	signed, sig := signedPush(url, 1024, "s3cret")
	g.Expect(call(h, signed, sig).Code).To(Equal(http.StatusAccepted))
	g.Expect(requests.Load()).To(BeNumerically("<=", 18), "at most the credentials of each signed target")
	requests.Store(0)
	for range 10 {
		g.Expect(call(h, signed, sig).Code).To(Equal(http.StatusAccepted))
		g.Expect(call(h, wrong, wrongSig)).To(Equal(refused))
	}
	g.Expect(requests.Load()).To(BeZero(), "API requests for 10 replays and 10 refusals")
}

// TestWebhookTokenRotation: a token read is used for the TTL, with no further read; once it
// has passed, the token of the updated Secret is read again, once: the new token is accepted
// and the old one refused.
func TestWebhookTokenRotation(t *testing.T) {
	requireCluster(t)
	ctx := context.Background()
	g := NewWithT(t)
	ns, url := followers(t, 2, 0, "old-token")
	start := time.Now()
	clk := clocktesting.NewFakePassiveClock(start)
	w, requests := countedWebhooks(t, clk)
	w.TokenTTL = time.Minute
	h := sources.NewWebhookHandler(w, w, sources.WebhookOptions{})
	oldBody, oldSig := signedPush(url, 0, "old-token")
	newBody, newSig := signedPush(url, 0, "new-token")

	g.Expect(call(h, oldBody, oldSig).Code).To(Equal(http.StatusAccepted))
	secret := &corev1.Secret{}
	g.Expect(k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "hook"}, secret)).To(Succeed())
	secret.Data["token"] = []byte("new-token")
	g.Expect(k8s.Update(ctx, secret)).To(Succeed())

	requests.Store(0)
	clk.SetTime(start.Add(59 * time.Second))
	g.Expect(call(h, newBody, newSig).Code).To(Equal(http.StatusUnauthorized), "within the TTL, the token read stands")
	g.Expect(call(h, oldBody, oldSig).Code).To(Equal(http.StatusAccepted))
	g.Expect(requests.Load()).To(BeZero(), "no read within the TTL")

	clk.SetTime(start.Add(time.Minute))
	g.Expect(call(h, newBody, newSig).Code).To(Equal(http.StatusAccepted), "the rotated token, once the TTL has passed")
	g.Expect(call(h, oldBody, oldSig).Code).To(Equal(http.StatusUnauthorized))
	g.Expect(requests.Load()).To(BeNumerically(">=", 1))
	g.Expect(requests.Load()).To(BeNumerically("<=", 3), "the token read once, and the credentials of the two targets")
}

// BenchmarkWebhookRefusal compares the cost of a call with a wrong signature for a repository
// 20 SyncTargets follow with the same call for a repository nobody follows, with bodies of
// 3 MiB (the cap) and 1 KiB, with the daemon's readers (SyncTargets from the cache, Secrets
// from the API server). The ratio is reported, not asserted: it is the timing oracle an
// attacker would read.
func BenchmarkWebhookRefusal(b *testing.B) {
	_, url := followers(b, 20, 0, "s3cret")
	c, _ := countingClient(b)
	w := &webhook.Dispatcher{Reader: splitReader{Reader: hooks.Reader, get: c},
		Scheduler: hooks.Scheduler}
	h := sources.NewWebhookHandler(w, w, sources.WebhookOptions{})
	for _, size := range []struct {
		name string
		pad  int
	}{{"3MiB", int(sources.DefaultMaxWebhookBytes) - 1024}, {"1KiB", 1024}} {
		b.Run(size.name, func(b *testing.B) {
			known, knownSig := signedPush(url, size.pad, "guess")
			unknown, unknownSig := signedPush(strings.Replace(url, "/app.git", "/unknown.git", 1), size.pad, "guess")
			var knownTime, unknownTime time.Duration
			for b.Loop() {
				t := time.Now()
				if a := call(h, known, knownSig); a.Code != http.StatusUnauthorized {
					b.Fatal(a)
				}
				knownTime += time.Since(t)
				t = time.Now()
				if a := call(h, unknown, unknownSig); a.Code != http.StatusUnauthorized {
					b.Fatal(a)
				}
				unknownTime += time.Since(t)
			}
			n := float64(b.N)
			b.ReportMetric(float64(knownTime.Microseconds())/1000/n, "known-ms/op")
			b.ReportMetric(float64(unknownTime.Microseconds())/1000/n, "unknown-ms/op")
			b.ReportMetric(float64(knownTime)/float64(unknownTime), "known/unknown")
		})
	}
}
