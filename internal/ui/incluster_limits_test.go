package ui

import (
	"context"
	"crypto/sha256"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	gosync "sync"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
)

// recordingAPI answers the TokenReviews and SubjectAccessReviews of in-cluster mode and
// counts them: a token "good-NAME" is user NAME, any other is refused; every user may
// do anything in namespace "mine", nothing elsewhere.
type recordingAPI struct {
	reviews, sars atomic.Int64
}

func (a *recordingAPI) create(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
	switch o := obj.(type) {
	case *authenticationv1.TokenReview:
		a.reviews.Add(1)
		if name, ok := strings.CutPrefix(o.Spec.Token, "good-"); ok {
			o.Status = authenticationv1.TokenReviewStatus{Authenticated: true, User: authenticationv1.UserInfo{Username: name}}
		}
		return nil
	case *authorizationv1.SubjectAccessReview:
		a.sars.Add(1)
		o.Status.Allowed = o.Spec.ResourceAttributes.Namespace == "mine"
		return nil
	}
	return c.Create(ctx, obj, opts...)
}

// fakeClock is a clock the test moves.
type fakeClock struct {
	mu gosync.Mutex
	t  time.Time
}

func (c *fakeClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// inClusterServer serves targets in in-cluster mode over ic, its reviews answered by api;
// its client holds the same targets.
func inClusterServer(api *recordingAPI, ic *InCluster, targets ...convergev1.SyncTarget) (*Server, client.Client) {
	b := fake.NewClientBuilder().WithScheme(scheme()).WithInterceptorFuncs(interceptor.Funcs{Create: api.create})
	for i := range targets {
		b = b.WithObjects(targets[i].DeepCopy())
	}
	c := b.Build()
	ic.Client = c
	return NewWithStore(Options{InCluster: ic, Now: func() time.Time { return fixedNow }}, NewMemoryStore(targets, nil), c), c
}

// from sends a request with a bearer token (none when empty) from the client address
// addr, with the headers of the page's own script.
func from(s http.Handler, addr, token, method, path string, form url.Values) *httptest.ResponseRecorder {
	req := httptest.NewRequest(method, "http://ui.example"+path, strings.NewReader(form.Encode()))
	req.RemoteAddr = addr
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for k, v := range fromPage {
		req.Header.Set(k, v)
	}
	req.Header.Set("Origin", "http://ui.example")
	rec := httptest.NewRecorder()
	s.ServeHTTP(rec, req)
	return rec
}

// TestInClusterRoutesAnswerAlikeWhetherTheTargetExists asks every route that names a
// SyncTarget about one that exists and one that does not, in a namespace the user may
// not read: the answers are the same, byte for byte, and nothing is done. In the user's
// own namespace the same two requests are told apart, so the test can see a difference.
func TestInClusterRoutesAnswerAlikeWhetherTheTargetExists(t *testing.T) {
	api := &recordingAPI{}
	s, c := inClusterServer(api, &InCluster{}, fakeTarget("theirs", "web", true), fakeTarget("mine", "web", true))
	rollback := url.Values{"to": {"main@sha1:" + sha(1)}}
	for _, tc := range []struct {
		method, path string
		form         url.Values
	}{
		{method: "GET", path: "/targets/%s"},
		{method: "GET", path: "/targets/%s/live"},
		{method: "GET", path: "/targets/%s/diff"},
		{method: "GET", path: "/targets/%s/compare?from=main@sha1:" + sha(1) + "&to=main@sha1:" + sha(2)},
		{method: "GET", path: "/targets/%s/versions"},
		{method: "GET", path: "/targets/%s/values"},
		{method: "GET", path: "/targets/%s/graph"},
		{method: "GET", path: "/targets/%s/graph?fragment=1"},
		{method: "GET", path: "/targets/%s/objects/mine_cfg__ConfigMap/logs?pod=p&container=c"},
		{method: "GET", path: "/targets/%s/objects/mine_cfg__ConfigMap/owned"},
		{method: "GET", path: "/targets/%s/objects/mine_cfg__ConfigMap/diff"},
		{method: "GET", path: "/fragments/row/%s"},
		{method: "POST", path: "/targets/%s/reconcile"},
		{method: "POST", path: "/targets/%s/suspend"},
		{method: "POST", path: "/targets/%s/resume"},
		{method: "POST", path: "/targets/%s/rollback", form: rollback},
		{method: "POST", path: "/targets/%s/no-such-action"},
	} {
		t.Run(tc.method+" "+strings.ReplaceAll(tc.path, "%s", "NS/NAME"), func(t *testing.T) {
			g := NewWithT(t)
			ask := func(key string) *httptest.ResponseRecorder {
				return from(s, "192.0.2.1:1234", "good-alice", tc.method, fmt.Sprintf(tc.path, key), tc.form)
			}
			exists, missing := ask("theirs/web"), ask("theirs/gone")
			g.Expect(exists.Code).To(Equal(missing.Code))
			g.Expect(exists.Body.String()).To(Equal(missing.Body.String()))
			g.Expect(exists.Code).To(BeElementOf(http.StatusForbidden, http.StatusNoContent))
			st := &convergev1.SyncTarget{}
			g.Expect(c.Get(context.Background(), client.ObjectKey{Namespace: "theirs", Name: "web"}, st)).To(Succeed())
			g.Expect(st.Spec.Suspend).To(BeFalse(), "nothing done")
			g.Expect(st.Annotations).To(BeEmpty(), "nothing done")

			mine, gone := ask("mine/web"), ask("mine/gone")
			g.Expect([]any{mine.Code, mine.Body.String()}).NotTo(Equal([]any{gone.Code, gone.Body.String()}),
				"where the user may read, the two are told apart")
		})
	}
}

// TestInClusterBadTokensCostBoundedReviews sends 1000 requests with one bad token, then
// 1000 with as many different bad tokens, from one address: the first cost one
// TokenReview (the refusal is cached, by the token's hash), the others no more than the
// address's burst, the rest answered 429 with Retry-After until its bucket refills.
// Another address is not held back, and an accepted token is reviewed once.
func TestInClusterBadTokensCostBoundedReviews(t *testing.T) {
	g := NewWithT(t)
	clock := &fakeClock{t: fixedNow}
	api := &recordingAPI{}
	ic := &InCluster{Now: clock.now}
	s, _ := inClusterServer(api, ic, fakeTarget("mine", "web", true))
	const attacker = "192.0.2.66:4000"

	for range 1000 {
		g.Expect(from(s, attacker, "stolen", "GET", "/", nil).Code).To(Equal(http.StatusUnauthorized))
	}
	g.Expect(api.reviews.Load()).To(BeEquivalentTo(1), "one review for one bad token")
	_, refused := ic.refused.get(sha256.Sum256([]byte("stolen")), clock.now())
	g.Expect(refused).To(BeTrue(), "the refusal is kept under the token's hash")

	codes := map[int]int{}
	var limited *httptest.ResponseRecorder
	for i := range 1000 {
		rec := from(s, attacker, fmt.Sprintf("guess-%d", i), "GET", "/", nil)
		codes[rec.Code]++
		if rec.Code == http.StatusTooManyRequests {
			limited = rec
		}
	}
	g.Expect(api.reviews.Load()).To(BeEquivalentTo(defaultAuthBurst), "the burst of one address (the first review was one of it), then no more")
	g.Expect(codes).To(Equal(map[int]int{http.StatusUnauthorized: defaultAuthBurst - 1, http.StatusTooManyRequests: 1000 - defaultAuthBurst + 1}))
	g.Expect(limited.Header().Get("Retry-After")).To(Equal("1"))
	g.Expect(limited.Body.String()).To(ContainSubstring("too many sign-in attempts from your address: try again in 1 s"))
	g.Expect(from(s, attacker, "", "POST", "/login", url.Values{"token": {"guess-x"}}).Code).To(Equal(http.StatusTooManyRequests),
		"the sign-in form is limited alike")

	clock.advance(time.Second)
	for i := range 100 {
		from(s, attacker, fmt.Sprintf("later-%d", i), "GET", "/", nil)
	}
	g.Expect(api.reviews.Load()).To(BeEquivalentTo(defaultAuthBurst+defaultAuthRate), "a second refills AuthRate tokens")

	before := api.reviews.Load()
	for range 1000 {
		g.Expect(from(s, "198.51.100.7:5000", "good-alice", "GET", "/", nil).Code).To(Equal(http.StatusOK), "another address")
	}
	g.Expect(api.reviews.Load()).To(Equal(before+1), "an accepted token is reviewed once per CacheTTL")

	clock.advance(defaultFailureTTL)
	from(s, "203.0.113.9:1", "stolen", "GET", "/", nil)
	g.Expect(api.reviews.Load()).To(Equal(before+2), "a refusal is kept for FailureTTL only")
}

// TestInClusterConcurrentBadTokenSharesReviews sends 1000 requests with one bad token at
// once: they share reviews, and never cost more than the address's burst.
func TestInClusterConcurrentBadTokenSharesReviews(t *testing.T) {
	g := NewWithT(t)
	api := &recordingAPI{}
	s, _ := inClusterServer(api, &InCluster{AuthRate: 1e-9})
	var wg gosync.WaitGroup
	for range 1000 {
		wg.Go(func() { from(s, "192.0.2.66:4000", "stolen", "GET", "/", nil) })
	}
	wg.Wait()
	g.Expect(api.reviews.Load()).To(BeNumerically("<=", defaultAuthBurst))
}

// TestInClusterCachesAreBounded has one user ask about 20 000 different SyncTargets, and
// 20 000 tokens and addresses come by: every cache stays within its bound.
func TestInClusterCachesAreBounded(t *testing.T) {
	g := NewWithT(t)
	api := &recordingAPI{}
	ic := &InCluster{}
	s, _ := inClusterServer(api, ic)
	for i := range 20000 {
		g.Expect(from(s, "192.0.2.1:1", "good-alice", "GET", fmt.Sprintf("/targets/other/t-%d", i), nil).Code).To(Equal(http.StatusForbidden))
	}
	g.Expect(api.sars.Load()).To(BeEquivalentTo(20000))
	g.Expect(ic.sars.len()).To(Equal(defaultCacheSize))

	ctx := context.Background()
	for i := range 20000 {
		addr := fmt.Sprintf("10.%d.%d.%d", i>>16, (i>>8)&255, i&255)
		_, err := ic.authenticate(ctx, fmt.Sprintf("good-user-%d", i), addr)
		g.Expect(err).NotTo(HaveOccurred())
		_, err = ic.authenticate(ctx, fmt.Sprintf("bad-%d", i), addr)
		g.Expect(err).To(MatchError(errUnauthenticated))
	}
	g.Expect(ic.users.len()).To(Equal(defaultCacheSize))
	g.Expect(ic.refused.len()).To(Equal(defaultCacheSize))
	g.Expect(ic.attempts.len()).To(Equal(addressTableSize))
}

// TestInClusterStreamsAreCapped opens /events streams until the caps: the user's next one
// is refused with 429 and says why, another user's is not, and a closed stream frees its
// place; past the cap of all streams, everyone is refused.
func TestInClusterStreamsAreCapped(t *testing.T) {
	g := NewWithT(t)
	api := &recordingAPI{}
	s, _ := inClusterServer(api, &InCluster{MaxStreamsPerUser: 3, MaxStreams: 5})
	srv := httptest.NewServer(s)
	defer srv.Close()
	open := func(user string) (*http.Response, context.CancelFunc) {
		ctx, cancel := context.WithCancel(context.Background())
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/events", nil)
		req.Header.Set("Authorization", "Bearer good-"+user)
		resp, err := http.DefaultClient.Do(req)
		g.Expect(err).NotTo(HaveOccurred())
		return resp, func() { cancel(); _ = resp.Body.Close() }
	}
	var alice []context.CancelFunc
	for range 3 {
		resp, stop := open("alice")
		g.Expect(resp.StatusCode).To(Equal(http.StatusOK))
		alice = append(alice, stop)
	}
	refused, stop := open("alice")
	body := make([]byte, 200)
	n, _ := refused.Body.Read(body)
	stop()
	g.Expect(refused.StatusCode).To(Equal(http.StatusTooManyRequests))
	g.Expect(refused.Header.Get("Retry-After")).To(Equal("30"))
	g.Expect(string(body[:n])).To(Equal("too many live update streams: user alice has 3 open, the most allowed; close some of the UI's tabs\n"))

	bob, stopBob := open("bob")
	g.Expect(bob.StatusCode).To(Equal(http.StatusOK), "another user is not held back")
	defer stopBob()
	alice[0]()
	g.Eventually(func() int {
		resp, stop := open("alice")
		if resp.StatusCode == http.StatusOK {
			alice[0] = stop
		} else {
			stop()
		}
		return resp.StatusCode
	}).Should(Equal(http.StatusOK), "a closed stream frees its place")
	carol, stopCarol := open("carol")
	g.Expect(carol.StatusCode).To(Equal(http.StatusOK))
	defer stopCarol()
	dave, stopDave := open("dave")
	stopDave()
	g.Expect(dave.StatusCode).To(Equal(http.StatusTooManyRequests), "five streams in all")
	for _, stop := range alice {
		stop()
	}
}

// TestInClusterRefusesWhatNeedsTheDaemonsCredentials: in the cluster, a user who may read a
// SyncTarget is told, not shown, the comparison of two revisions, an object's diff against
// Git, a chart's versions and its values: they would read source or repository credentials with the
// daemon's rights.
func TestInClusterRefusesWhatNeedsTheDaemonsCredentials(t *testing.T) {
	g := NewWithT(t)
	st := fakeChartTarget("mine", "web")
	st.Status.Inventory = &convergev1.ResourceInventory{Entries: []convergev1.InventoryEntry{{ID: "mine_cfg__ConfigMap", Version: "v1"}}}
	s, _ := inClusterServer(&recordingAPI{}, &InCluster{}, st)
	ask := func(path string) string {
		rec := from(s, "192.0.2.1:1234", "good-alice", "GET", path, nil)
		g.Expect(rec.Code).To(Equal(http.StatusOK), path)
		return rec.Body.String()
	}
	g.Expect(ask("/targets/mine/web/compare?from=" + url.QueryEscape(st.Status.History[0].Revision) + "&to=" +
		url.QueryEscape(st.Status.History[1].Revision))).To(ContainSubstring("revisions are not compared here"))
	g.Expect(ask("/targets/mine/web/objects/mine_cfg__ConfigMap/diff")).To(ContainSubstring("the diff against Git is not shown here"))
	g.Expect(ask("/targets/mine/web/versions")).To(ContainSubstring("the repository is not read here"))
	g.Expect(ask("/targets/mine/web/values")).To(ContainSubstring("the values are not read here"))
}
