package notify

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
)

// seen is one request a fake provider received.
type seen struct {
	method, path, rawPath string
	header                http.Header
	body                  map[string]any
	raw                   []byte
}

// fakeProvider answers every request with code (and Retry-After when set).
func fakeProvider(t *testing.T, code int, retryAfterHeader string) (*httptest.Server, *[]seen) {
	var got []seen
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		raw, _ := io.ReadAll(r.Body)
		s := seen{method: r.Method, path: r.URL.Path, rawPath: r.URL.EscapedPath(), header: r.Header.Clone(), raw: raw}
		_ = json.Unmarshal(raw, &s.body)
		got = append(got, s)
		if retryAfterHeader != "" {
			w.Header().Set("Retry-After", retryAfterHeader)
		}
		w.WriteHeader(code)
	}))
	t.Cleanup(srv.Close)
	return srv, &got
}

const sha = "0123456789abcdef0123456789abcdef01234567"

func rolledBackMsg() Message {
	return Message{Event: convergev1.EventRolledBack, Namespace: "shop", Target: "web", Revision: "main@sha1:" + sha,
		Commit: sha, Message: "health check failed: Deployment shop/web: ProgressDeadlineExceeded: ReplicaSet \"web-5d4f\" has timed out progressing <!channel>; rolled back to main@sha1:fff"}
}

// TestProviderRequests: each provider's request has the documented method, path, headers,
// authentication and JSON fields.
func TestProviderRequests(t *testing.T) {
	creds := credentials{token: "tok-s3cret", username: "bot", password: "app-pass", hmacKey: "hmac-k3y"}
	tests := []struct {
		name  string
		typ   convergev1.ProviderType
		check func(g Gomega, s seen)
	}{
		{"github", convergev1.GitHubProvider, func(g Gomega, s seen) {
			g.Expect(s.path).To(Equal("/repos/acme/app/statuses/" + sha))
			g.Expect(s.header.Get("Authorization")).To(Equal("Bearer tok-s3cret"))
			g.Expect(s.header.Get("Accept")).To(Equal("application/vnd.github+json"))
			g.Expect(s.body).To(And(HaveKeyWithValue("state", "failure"), HaveKeyWithValue("context", "converge/shop/web")))
			g.Expect(s.body["description"]).To(HavePrefix("rolled back: health check failed"))
			g.Expect([]rune(s.body["description"].(string))).To(HaveLen(140), "cut to GitHub's limit")
			g.Expect(s.body["description"]).To(HaveSuffix("…"))
		}},
		{"gitea", convergev1.GiteaProvider, func(g Gomega, s seen) {
			g.Expect(s.path).To(Equal("/api/v1/repos/acme/app/statuses/" + sha))
			g.Expect(s.header.Get("Authorization")).To(Equal("token tok-s3cret"))
			g.Expect(s.body).To(And(HaveKeyWithValue("state", "failure"), HaveKeyWithValue("context", "converge/shop/web")))
		}},
		{"gitlab", convergev1.GitLabProvider, func(g Gomega, s seen) {
			g.Expect(s.rawPath).To(Equal("/api/v4/projects/acme%2Fapp/statuses/" + sha))
			g.Expect(s.header.Get("PRIVATE-TOKEN")).To(Equal("tok-s3cret"))
			g.Expect(s.header.Get("Authorization")).To(BeEmpty())
			g.Expect(s.body).To(And(HaveKeyWithValue("state", "failed"), HaveKeyWithValue("name", "converge/shop/web")))
		}},
		{"bitbucket", convergev1.BitbucketProvider, func(g Gomega, s seen) {
			g.Expect(s.path).To(Equal("/2.0/repositories/acme/app/commit/" + sha + "/statuses/build"))
			g.Expect(s.header.Get("Authorization")).To(Equal("Basic " + base64.StdEncoding.EncodeToString([]byte("bot:app-pass"))))
			g.Expect(s.body).To(And(HaveKeyWithValue("state", "FAILED"), HaveKeyWithValue("key", "converge/shop/web"),
				HaveKey("url")))
		}},
		{"slack", convergev1.SlackProvider, func(g Gomega, s seen) {
			g.Expect(s.path).To(Equal("/services/T000/B000/XXXX"))
			g.Expect(s.body["text"]).To(ContainSubstring("shop/web: rolled back"))
			g.Expect(s.body["text"]).To(ContainSubstring("&lt;!channel&gt;"), "no mention from a message")
			g.Expect(s.body).To(HaveKey("attachments"))
		}},
		{"discord", convergev1.DiscordProvider, func(g Gomega, s seen) {
			g.Expect(s.body["content"]).To(ContainSubstring("ProgressDeadlineExceeded"))
			g.Expect(s.body).To(HaveKeyWithValue("allowed_mentions", map[string]any{"parse": []any{}}), "no @everyone")
		}},
		{"teams", convergev1.TeamsProvider, func(g Gomega, s seen) {
			g.Expect(s.body).To(HaveKeyWithValue("type", "message"))
			att := s.body["attachments"].([]any)[0].(map[string]any)
			g.Expect(att).To(HaveKeyWithValue("contentType", "application/vnd.microsoft.card.adaptive"))
			g.Expect(att["content"]).To(HaveKeyWithValue("type", "AdaptiveCard"))
			g.Expect(string(s.raw)).To(ContainSubstring("ProgressDeadlineExceeded"))
		}},
		{"webhook", convergev1.WebhookProvider, func(g Gomega, s seen) {
			mac := hmac.New(sha256.New, []byte("hmac-k3y"))
			mac.Write(s.raw)
			g.Expect(s.header.Get(SignatureHeader)).To(Equal("sha256=" + hex.EncodeToString(mac.Sum(nil))))
			g.Expect(s.header.Get("Authorization")).To(Equal("Bearer tok-s3cret"))
			g.Expect(s.body).To(And(HaveKeyWithValue("event", "RolledBack"), HaveKeyWithValue("commit", sha),
				HaveKeyWithValue("target", "web"), HaveKeyWithValue("namespace", "shop"), HaveKey("text")))
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			srv, got := fakeProvider(t, http.StatusCreated, "")
			p := convergev1.NotificationProvider{Type: tt.typ, Address: srv.URL}
			if !tt.typ.IsCommitStatus() {
				p.Address = srv.URL + "/services/T000/B000/XXXX"
			}
			c := creds
			if tt.typ != convergev1.BitbucketProvider && tt.typ != convergev1.WebhookProvider {
				c.username, c.password = "", ""
			}
			m := rolledBackMsg()
			txt, err := (*summary)(nil).text(context.Background(), m)
			g.Expect(err).NotTo(HaveOccurred())
			req, err := buildRequest(p, c, notification{msg: m, text: txt, sourceURL: "ssh://git@127.0.0.1:2222/acme/app.git"})
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(send(context.Background(), http.DefaultClient, req, string(tt.typ), time.Now())).To(Succeed())
			g.Expect(*got).To(HaveLen(1))
			s := (*got)[0]
			g.Expect(s.method).To(Equal(http.MethodPost))
			g.Expect(s.header.Get("Content-Type")).To(Equal("application/json"))
			tt.check(g, s)
		})
	}
}

// TestSendClassifiesAnswers: 429 and 5xx are retryable (Retry-After read as seconds or a
// date), 401 and 404 are not; errors never hold the address of a chat webhook.
func TestSendClassifiesAnswers(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	tests := []struct {
		code       int
		retryAfter string
		retryable  bool
		wait       time.Duration
	}{
		{http.StatusTooManyRequests, "7", true, 7 * time.Second},
		{http.StatusTooManyRequests, now.Add(90 * time.Second).Format(http.TimeFormat), true, 90 * time.Second},
		{http.StatusServiceUnavailable, "", true, 0},
		{http.StatusBadGateway, "100000", true, maxRetryAfter},
		{http.StatusUnauthorized, "", false, 0},
		{http.StatusNotFound, "", false, 0},
		{http.StatusUnprocessableEntity, "", false, 0},
	}
	for _, tt := range tests {
		t.Run(http.StatusText(tt.code), func(t *testing.T) {
			g := NewWithT(t)
			srv, _ := fakeProvider(t, tt.code, tt.retryAfter)
			secretURL := srv.URL + "/services/T000/B000/s3cretpath"
			req, err := buildRequest(convergev1.NotificationProvider{Type: convergev1.SlackProvider},
				credentials{address: secretURL}, notification{msg: rolledBackMsg(), text: "x"})
			g.Expect(err).NotTo(HaveOccurred())
			err = send(context.Background(), http.DefaultClient, req, "slack", now)
			var se *sendError
			g.Expect(err).To(BeAssignableToTypeOf(se))
			se = err.(*sendError)
			g.Expect(se.code).To(Equal(tt.code))
			g.Expect(se.retryable).To(Equal(tt.retryable))
			g.Expect(se.retryAfter).To(Equal(tt.wait))
			g.Expect(err.Error()).NotTo(ContainSubstring("s3cret"))
			g.Expect(err.Error()).NotTo(ContainSubstring(srv.URL))
		})
	}
	t.Run("no answer", func(t *testing.T) {
		g := NewWithT(t)
		req, err := buildRequest(convergev1.NotificationProvider{Type: convergev1.SlackProvider},
			credentials{address: "http://127.0.0.1:1/services/s3cret"}, notification{msg: rolledBackMsg(), text: "x"})
		g.Expect(err).NotTo(HaveOccurred())
		err = send(context.Background(), http.DefaultClient, req, "slack", now)
		g.Expect(err).To(HaveOccurred())
		g.Expect(err.(*sendError).retryable).To(BeTrue())
		g.Expect(err.Error()).NotTo(ContainSubstring("s3cret"))
	})
}

// TestForgeFromSourceURL: the forge is the Notifier's (provider.address, or the public
// service of its type); the repository comes from the SyncTarget's URL in its https, ssh
// and scp forms when it is on that forge's host, unless the provider names it.
func TestForgeFromSourceURL(t *testing.T) {
	gh := convergev1.NotificationProvider{Type: "github"}
	ghe := convergev1.NotificationProvider{Type: "github", Address: "https://ghe.example.com/api/v3/"}
	tests := []struct {
		name, url string
		p         convergev1.NotificationProvider
		wantBase  string
		wantRepo  string
		wantErr   string
	}{
		{"github https", "https://github.com/acme/app.git", gh, "https://api.github.com", "acme/app", ""},
		{"github scp", "git@github.com:acme/app.git", gh, "https://api.github.com", "acme/app", ""},
		{"github's api address", "https://GitHub.com/acme/app", convergev1.NotificationProvider{Type: "github", Address: "https://api.github.com"}, "https://api.github.com", "acme/app", ""},
		{"github enterprise ssh", "ssh://git@ghe.example.com:2222/acme/app", ghe, "https://ghe.example.com/api/v3", "acme/app", ""},
		{"gitlab.com subgroup", "https://gitlab.com/group/sub/app.git", convergev1.NotificationProvider{Type: "gitlab"}, "https://gitlab.com", "group/sub/app", ""},
		{"self-hosted gitlab", "https://gitlab.example.com/group/app.git", convergev1.NotificationProvider{Type: "gitlab", Address: "https://gitlab.example.com"}, "https://gitlab.example.com", "group/app", ""},
		{"gitea over http when the address says so", "http://git.local:3000/acme/app", convergev1.NotificationProvider{Type: "gitea", Address: "http://git.local:3000"}, "http://git.local:3000", "acme/app", ""},
		{"bitbucket", "git@bitbucket.org:ws/app.git", convergev1.NotificationProvider{Type: "bitbucket"}, "https://api.bitbucket.org", "ws/app", ""},
		{"address and repository override", "https://user:pw@mirror.example.com/x.git",
			convergev1.NotificationProvider{Type: "gitea", Address: "http://127.0.0.1:9/", Repository: "acme/app"}, "http://127.0.0.1:9", "acme/app", ""},
		{"github enterprise is not github.com", "ssh://git@ghe.example.com/acme/app", gh, "", "", `skipped: the SyncTarget's repository is on "ghe.example.com", not on this Notifier's forge ("github.com")`},
		{"a self-hosted gitlab needs its address", "https://gitlab.example.com/group/app.git", convergev1.NotificationProvider{Type: "gitlab"}, "", "", "skipped"},
		{"another host than the address", "https://user:s3cret@github.com/acme/app", ghe, "", "", `on "github.com", not on this Notifier's forge ("ghe.example.com")`},
		{"no repository path", "https://user:s3cret@github.com/app", gh, "", "", "set provider.repository"},
		{"unreadable url", "https://user:s3cret@[bad", gh, "", "", "cannot read the source url"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			fr, err := repoOf(tt.p, tt.url)
			if tt.wantErr != "" {
				g.Expect(err).To(MatchError(ContainSubstring(tt.wantErr)))
				g.Expect(err.Error()).NotTo(ContainSubstring("s3cret"))
				return
			}
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(fr).To(Equal(forgeRepo{base: tt.wantBase, repo: tt.wantRepo}))
		})
	}
}

// TestForgeStates: pending when a revision starts, success or failure when it ends, and
// nothing for a drift correction.
func TestForgeStates(t *testing.T) {
	g := NewWithT(t)
	g.Expect(statusState("github", convergev1.EventProgressing)).To(Equal("pending"))
	g.Expect(statusState("github", convergev1.EventSucceeded)).To(Equal("success"))
	g.Expect(statusState("gitea", convergev1.EventRolledBack)).To(Equal("failure"))
	g.Expect(statusState("gitlab", convergev1.EventProgressing)).To(Equal("running"))
	g.Expect(statusState("gitlab", convergev1.EventFailed)).To(Equal("failed"))
	g.Expect(statusState("bitbucket", convergev1.EventSucceeded)).To(Equal("SUCCESSFUL"))
	g.Expect(statusState("github", convergev1.EventStalled)).To(Equal("error"))
	req, err := buildRequest(convergev1.NotificationProvider{Type: "github"}, credentials{},
		notification{msg: Message{Event: convergev1.EventDriftCorrected, Commit: sha}, sourceURL: "https://github.com/a/b"})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(req).To(BeNil())
	g.Expect(bitbucketKey(strings.Repeat("n", 60))).To(HaveLen(40))
}

// TestForgeErrorsSayWhy: a forge's refusal carries its own explanation, never the token.
func TestForgeErrorsSayWhy(t *testing.T) {
	tests := []struct {
		typ  convergev1.ProviderType
		code int
		body string
		want string
	}{
		{"github", http.StatusUnprocessableEntity, `{"message":"No commit found for SHA: 0123","documentation_url":"https://docs.github.com"}`, "422 Unprocessable Entity: No commit found for SHA"},
		{"gitlab", http.StatusBadRequest, `{"message":{"state":["is invalid"]}}`, `400 Bad Request: {"state":["is invalid"]}`},
		{"bitbucket", http.StatusNotFound, `{"type":"error","error":{"message":"Repository not found"}}`, "404 Not Found: Repository not found"},
		{"gitea", http.StatusUnauthorized, `{"message":"token is required: got token tok-s3cret"}`, "got token ***"},
	}
	for _, tt := range tests {
		t.Run(string(tt.typ), func(t *testing.T) {
			g := NewWithT(t)
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(tt.code)
				_, _ = w.Write([]byte(tt.body))
			}))
			t.Cleanup(srv.Close)
			req, err := buildRequest(convergev1.NotificationProvider{Type: tt.typ, Address: srv.URL, Repository: "acme/app"},
				credentials{token: "tok-s3cret", username: "u", password: "p"}, notification{msg: rolledBackMsg()})
			g.Expect(err).NotTo(HaveOccurred())
			err = send(context.Background(), http.DefaultClient, req, string(tt.typ), time.Now())
			g.Expect(err).To(MatchError(ContainSubstring(tt.want)))
			g.Expect(err.Error()).NotTo(ContainSubstring("tok-s3cret"))
			g.Expect(err.(*sendError).retryable).To(BeFalse())
		})
	}
}
