package sources

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/converge-gitops/converge/internal/gittest"
	"github.com/converge-gitops/converge/sources/poll"
)

// fakeTargets serves targets from a map of normalized repository URL to targets.
type fakeTargets map[string][]WebhookTarget

func (f fakeTargets) TargetsForRepo(_ context.Context, repo string) ([]WebhookTarget, error) {
	return f[repo], nil
}

// fakeTrigger records triggered keys.
type fakeTrigger struct {
	mu   sync.Mutex
	keys []Key
	err  error
}

func (f *fakeTrigger) Trigger(k Key) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return f.err
	}
	f.keys = append(f.keys, k)
	return nil
}

func (f *fakeTrigger) triggered() []Key {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]Key(nil), f.keys...)
}

func hmacHex(secret, body string) string {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte(body))
	return hex.EncodeToString(m.Sum(nil))
}

const (
	githubPush = `{"ref":"refs/heads/main","after":"0123","repository":{"full_name":"org/app",
		"html_url":"https://github.com/org/app","clone_url":"https://github.com/org/app.git",
		"ssh_url":"git@github.com:org/app.git","git_url":"git://github.com/org/app.git","url":"https://api.github.com/repos/org/app"},
		"commits":[],"pusher":null}`
	gitlabPush = `{"object_kind":"push","ref":"refs/heads/main","project":{"path_with_namespace":"org/app",
		"web_url":"https://github.com/org/app","git_ssh_url":"git@github.com:org/app.git","git_http_url":"https://github.com/org/app.git"},
		"repository":{"url":"git@github.com:org/app.git","homepage":"https://github.com/org/app"}}`
	giteaPush   = `{"ref":"refs/heads/main","repository":{"clone_url":"https://GitHub.com/Org/App.git","ssh_url":"ssh://git@github.com:2222/org/app.git"}}`
	genericPush = `{"repository":{"url":"https://github.com/org/app"}}`
)

func TestWebhook(t *testing.T) {
	t.Parallel()
	const secret, otherSecret = "webhook-secret", "other-secret"
	targets := fakeTargets{
		"github.com/org/app": {
			{Key: "app-main", Secret: []byte(secret), Name: "team-a/app"},
			{Key: "app-other-team", Secret: []byte(otherSecret), Name: "team-b/app"},
			{Key: "app-no-secret", Name: "team-c/app"},
		},
		"github.com/org/unrelated": {{Key: "unrelated", Secret: []byte(secret)}},
	}
	for _, tc := range []struct {
		name    string
		method  string
		body    string
		headers map[string]string
		want    int
		keys    []Key
	}{
		{name: "github", body: githubPush, want: 202, keys: []Key{"app-main"},
			headers: map[string]string{"X-Hub-Signature-256": "sha256=" + hmacHex(secret, githubPush), "X-GitHub-Event": "push"}},
		{name: "github, other team's secret", body: githubPush, want: 202, keys: []Key{"app-other-team"},
			headers: map[string]string{"X-Hub-Signature-256": "sha256=" + hmacHex(otherSecret, githubPush)}},
		{name: "gitlab", body: gitlabPush, want: 202, keys: []Key{"app-main"},
			headers: map[string]string{"X-Gitlab-Token": secret, "X-Gitlab-Event": "Push Hook"}},
		{name: "gitea", body: giteaPush, want: 202, keys: []Key{"app-main"},
			headers: map[string]string{"X-Gitea-Signature": hmacHex(secret, giteaPush)}},
		{name: "forgejo", body: giteaPush, want: 202, keys: []Key{"app-main"},
			headers: map[string]string{"X-Forgejo-Signature": hmacHex(secret, giteaPush)}},
		{name: "generic", body: genericPush, want: 202, keys: []Key{"app-main"},
			headers: map[string]string{"X-Signature": "sha256=" + hmacHex(secret, genericPush)}},
		{name: "bad signature", body: githubPush, want: 401,
			headers: map[string]string{"X-Hub-Signature-256": "sha256=" + hmacHex("guess", githubPush)}},
		{name: "signature of another body", body: githubPush, want: 401,
			headers: map[string]string{"X-Hub-Signature-256": "sha256=" + hmacHex(secret, genericPush)}},
		{name: "wrong gitlab token", body: gitlabPush, want: 401,
			headers: map[string]string{"X-Gitlab-Token": "guess"}},
		{name: "empty secret never validates", body: genericPush, want: 401,
			headers: map[string]string{"X-Signature": "sha256=" + hmacHex("", genericPush)}},
		{name: "missing signature", body: githubPush, want: 401},
		{name: "malformed signature", body: githubPush, want: 401,
			headers: map[string]string{"X-Hub-Signature-256": "sha1=abc"}},
		{name: "unrelated repository", body: `{"repository":{"url":"https://github.com/org/elsewhere"}}`, want: 401,
			headers: map[string]string{"X-Signature": "sha256=" + hmacHex(secret, `{"repository":{"url":"https://github.com/org/elsewhere"}}`)}},
		{name: "malformed json", body: `{"repository":`, want: 400,
			headers: map[string]string{"X-Signature": "sha256=" + hmacHex(secret, `{"repository":`)}},
		{name: "not an object", body: `[1,2]`, want: 400,
			headers: map[string]string{"X-Signature": "sha256=" + hmacHex(secret, `[1,2]`)}},
		{name: "no repository", body: `{"repository":null,"project":[],"x":1}`, want: 400,
			headers: map[string]string{"X-Signature": "sha256=" + hmacHex(secret, `{"repository":null,"project":[],"x":1}`)}},
		{name: "wrong types", body: `{"repository":{"clone_url":42,"links":{"clone":[null,7,{"href":false}]}}}`, want: 400,
			headers: map[string]string{"X-Signature": "sha256=" + hmacHex(secret, `{"repository":{"clone_url":42,"links":{"clone":[null,7,{"href":false}]}}}`)}},
		{name: "oversized", body: `{"repository":"` + strings.Repeat("a", 3<<20) + `"}`, want: 413,
			headers: map[string]string{"X-Signature": "sha256=00"}},
		{name: "get", method: http.MethodGet, want: 405},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			trig := &fakeTrigger{}
			h := NewWebhookHandler(targets, trig, WebhookOptions{})
			method := tc.method
			if method == "" {
				method = http.MethodPost
			}
			req := httptest.NewRequest(method, WebhookPath, strings.NewReader(tc.body))
			for k, v := range tc.headers {
				req.Header.Set(k, v)
			}
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			g.Expect(rec.Code).To(Equal(tc.want), rec.Body.String())
			g.Expect(trig.triggered()).To(Equal(tc.keys))
		})
	}
}

func TestWebhookQueueFull(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	targets := fakeTargets{"github.com/org/app": {{Key: "k", Secret: []byte("s")}}}
	h := NewWebhookHandler(targets, &fakeTrigger{err: ErrQueueFull}, WebhookOptions{})
	req := httptest.NewRequest(http.MethodPost, WebhookPath, strings.NewReader(genericPush))
	req.Header.Set("X-Signature", "sha256="+hmacHex("s", genericPush))
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	g.Expect(rec.Code).To(Equal(http.StatusServiceUnavailable))
	g.Expect(rec.Header().Get("Retry-After")).NotTo(BeEmpty())
}

func TestWebhookServer(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	srv := NewWebhookServer("127.0.0.1:0", NewWebhookHandler(fakeTargets{}, &fakeTrigger{}, WebhookOptions{}))
	g.Expect(srv.ReadHeaderTimeout).To(BeNumerically(">", 0))
	g.Expect(srv.ReadTimeout).To(BeNumerically(">", 0))
	g.Expect(srv.WriteTimeout).To(BeNumerically(">", 0))
	g.Expect(srv.MaxHeaderBytes).To(BeNumerically(">", 0))
	rec := httptest.NewRecorder()
	srv.Handler.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/elsewhere", nil))
	g.Expect(rec.Code).To(Equal(http.StatusNotFound))
}

// schedulerTargets maps every source subscribed through it to its normalized URL, as the
// reconciler's index does.
type schedulerTargets struct {
	mu      sync.Mutex
	targets map[string][]WebhookTarget
}

func (s *schedulerTargets) add(src Source, secret string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n, err := NormalizeURL(src.URL)
	if err != nil {
		panic(err)
	}
	if s.targets == nil {
		s.targets = map[string][]WebhookTarget{}
	}
	s.targets[n] = append(s.targets[n], WebhookTarget{Key: src.Key(), Secret: []byte(secret)})
}

func (s *schedulerTargets) TargetsForRepo(_ context.Context, repo string) ([]WebhookTarget, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.targets[repo], nil
}

// TestWebhookBurst: 100 signed pushes for one repository, against the real scheduler and git
// server, cost at most two polls and one fetch; the push naming the ssh URL triggers the source
// configured with the http one.
func TestWebhookBurst(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	f := newFixture(t)
	f.repo.Commit(t, "main", map[string]string{"v": "1"})
	clk := clocktesting.NewFakeClock(t0)
	s, polls := startScheduler(t, SchedulerOptions{Cache: f.cache, Options: poll.Options{Clock: clk, Jitter: noJitter}})
	rec := newRecorder()
	g.Expect(s.Subscribe(Subscription{ID: "a", Source: f.src, Interval: time.Hour, Notify: rec.notify})).To(Succeed())
	rec.next(g)
	idleAt(g, s, f.src.Key(), t0.Add(time.Hour))

	targets := &schedulerTargets{}
	targets.add(f.src, "hook-secret")
	hooks := httptest.NewServer(NewWebhookHandler(targets, s, WebhookOptions{}))
	t.Cleanup(hooks.Close)
	host := strings.TrimPrefix(f.srv.URL, "http://")
	body := `{"repository":{"ssh_url":"git@` + strings.Split(host, ":")[0] + `:org/app.git"}}`
	sig := "sha256=" + hmacHex("hook-secret", body)
	post := func() (int, error) {
		req, _ := http.NewRequest(http.MethodPost, hooks.URL+WebhookPath, bytes.NewBufferString(body))
		req.Header.Set("X-Hub-Signature-256", sig)
		resp, err := hooks.Client().Do(req)
		if err != nil {
			return 0, err
		}
		defer func() { _ = resp.Body.Close() }()
		return resp.StatusCode, nil
	}

	c2 := f.repo.Commit(t, "main", map[string]string{"v": "2"})
	f.srv.ResetStats()
	polls.Store(0)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var errs []error
	for range 100 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			code, err := post()
			if err == nil && code != http.StatusAccepted {
				err = errors.New(http.StatusText(code))
			}
			mu.Lock()
			errs = append(errs, err)
			mu.Unlock()
		}()
	}
	wg.Wait()
	g.Expect(errors.Join(errs...)).NotTo(HaveOccurred())
	ev := rec.next(g)
	g.Expect(ev.Revision.Commit).To(Equal(c2))
	idleAt(g, s, f.src.Key(), t0.Add(time.Hour))
	g.Expect(f.srv.Stats().UploadPack).To(BeNumerically("<=", 2), "fetches")
	g.Expect(f.srv.Stats().UploadPack).To(BeEquivalentTo(1))
	t.Logf("100 webhook calls: %d polls, %d ref listings, %d fetches", polls.Load(), f.srv.Stats().InfoRefs, f.srv.Stats().UploadPack)
}

// TestWebhookBurstWhilePolling: with a poll held at the server, 100 webhook calls add exactly
// one more poll.
func TestWebhookBurstWhilePolling(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	f := newFixture(t)
	f.repo.Commit(t, "main", map[string]string{"v": "1"})
	clk := clocktesting.NewFakeClock(t0)
	s, polls := startScheduler(t, SchedulerOptions{Cache: f.cache, Options: poll.Options{Clock: clk, Jitter: noJitter}})
	rec := newRecorder()
	g.Expect(s.Subscribe(Subscription{ID: "a", Source: f.src, Interval: time.Hour, Notify: rec.notify})).To(Succeed())
	rec.next(g)
	idleAt(g, s, f.src.Key(), t0.Add(time.Hour))
	targets := &schedulerTargets{}
	targets.add(f.src, "hook-secret")
	h := NewWebhookHandler(targets, s, WebhookOptions{})
	body := `{"repository":{"clone_url":"` + f.src.URL + `"}}`
	call := func() int {
		req := httptest.NewRequest(http.MethodPost, WebhookPath, strings.NewReader(body))
		req.Header.Set("X-Hub-Signature-256", "sha256="+hmacHex("hook-secret", body))
		rr := httptest.NewRecorder()
		h.ServeHTTP(rr, req)
		return rr.Code
	}

	c2 := f.repo.Commit(t, "main", map[string]string{"v": "2"})
	polls.Store(0)
	f.srv.ResetStats()
	release := f.srv.Hold(gittest.InfoRefs)
	g.Expect(call()).To(Equal(http.StatusAccepted))
	g.Eventually(f.srv.InFlight).Should(BeEquivalentTo(1))
	for range 99 {
		g.Expect(call()).To(Equal(http.StatusAccepted))
	}
	release()
	g.Expect(rec.next(g).Revision.Commit).To(Equal(c2))
	idleAt(g, s, f.src.Key(), t0.Add(time.Hour))
	g.Expect(polls.Load()).To(BeEquivalentTo(2))
	g.Expect(f.srv.Stats().UploadPack).To(BeEquivalentTo(1))
}
