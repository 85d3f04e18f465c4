package sources

import (
	"context"
	"errors"
	"fmt"
	"hash"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	clocktesting "k8s.io/utils/clock/testing"
)

// countMACs makes h count the HMACs it computes.
func countMACs(h http.Handler) *atomic.Int64 {
	n := &atomic.Int64{}
	wh := h.(*webhookHandler)
	next := wh.newMAC
	wh.newMAC = func(key []byte) hash.Hash {
		n.Add(1)
		return next(key)
	}
	return n
}

// post sends body to h from remote with the given signature header, and returns the answer.
func post(h http.Handler, remote, body, header, sig string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(http.MethodPost, WebhookPath, strings.NewReader(body))
	req.RemoteAddr = remote
	if header != "" {
		req.Header.Set(header, sig)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

// manyTargets is 20 targets of github.com/org/app sharing one secret, 5 sharing another and
// one without a secret.
func manyTargets() fakeTargets {
	var ts []WebhookTarget
	for i := range 20 {
		ts = append(ts, WebhookTarget{Key: Key(fmt.Sprintf("a%d", i)), Secret: []byte("secret-a"), Name: fmt.Sprintf("team-a/t%d", i)})
	}
	for i := range 5 {
		ts = append(ts, WebhookTarget{Key: Key(fmt.Sprintf("b%d", i)), Secret: []byte("secret-b"), Name: fmt.Sprintf("team-b/t%d", i)})
	}
	ts = append(ts, WebhookTarget{Key: "none", Name: "team-c/t"})
	return fakeTargets{"github.com/org/app": ts}
}

// TestWebhookOneHMACPerSecret: 25 targets sharing two secrets cost two HMACs of the body,
// whether the signature is wrong or right, and a right one triggers all the targets of its
// secret and only those.
func TestWebhookOneHMACPerSecret(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, header, sig string
		want              int
		triggered         int
	}{
		{name: "wrong signature", header: "X-Hub-Signature-256", sig: "sha256=" + hmacHex("guess", genericPush), want: 401},
		{name: "wrong gitlab token", header: "X-Gitlab-Token", sig: "guess", want: 401},
		{name: "signed with the shared secret", header: "X-Hub-Signature-256", sig: "sha256=" + hmacHex("secret-a", genericPush), want: 202, triggered: 20},
		{name: "signed with the other secret", header: "X-Signature", sig: "sha256=" + hmacHex("secret-b", genericPush), want: 202, triggered: 5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			trig := &fakeTrigger{}
			h := NewWebhookHandler(manyTargets(), trig, WebhookOptions{})
			macs := countMACs(h)
			rec := post(h, "192.0.2.1:1234", genericPush, tc.header, tc.sig)
			g.Expect(rec.Code).To(Equal(tc.want), rec.Body.String())
			g.Expect(trig.triggered()).To(HaveLen(tc.triggered))
			if tc.header != "X-Gitlab-Token" {
				g.Expect(macs.Load()).To(BeEquivalentTo(2), "one HMAC per distinct secret")
			}
		})
	}
}

// TestWebhookRefusalsLookAlike: a repository nobody follows, a followed one with a wrong
// signature, one followed by 20 targets sharing a secret, and one whose targets have no
// secret get the same answer — status, headers and body — after the same work: one HMAC.
func TestWebhookRefusalsLookAlike(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	shared := manyTargets()["github.com/org/app"][:20]
	targets := fakeTargets{
		"github.com/org/app":      {{Key: "app", Secret: []byte("s"), Name: "team/app"}},
		"github.com/org/crowd":    shared,
		"github.com/org/nosecret": {{Key: "nosecret", Name: "team/nosecret"}},
	}
	type answer struct {
		code   int
		header http.Header
		body   string
		macs   int64
	}
	refuse := func(repo string) answer {
		h := NewWebhookHandler(targets, &fakeTrigger{}, WebhookOptions{})
		macs := countMACs(h)
		body := `{"repository":{"url":"https://github.com/org/` + repo + `"}}`
		rec := post(h, "192.0.2.1:1234", body, "X-Hub-Signature-256", "sha256="+hmacHex("guess", body))
		return answer{code: rec.Code, header: rec.Header(), body: rec.Body.String(), macs: macs.Load()}
	}
	unknown := refuse("unknown")
	g.Expect(unknown.code).To(Equal(http.StatusUnauthorized))
	g.Expect(unknown.macs).To(BeEquivalentTo(1), "an unknown repository costs one HMAC, like a known one")
	for _, repo := range []string{"app", "crowd", "nosecret"} {
		g.Expect(refuse(repo)).To(Equal(unknown), repo)
	}
}

// TestWebhookSourceKeyOnlyWhenSigned: the keys of targets that must be looked up (reading
// credentials) are looked up only for the targets whose secret signed the request; a refused
// request looks none up, and a target whose lookup fails is skipped, not the others.
func TestWebhookSourceKeyOnlyWhenSigned(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	var lookups atomic.Int64
	lookup := func(k Key, err error) func(context.Context) (Key, error) {
		return func(context.Context) (Key, error) {
			lookups.Add(1)
			return k, err
		}
	}
	targets := fakeTargets{"github.com/org/app": {
		{SourceKey: lookup("a", nil), Secret: []byte("secret-a"), Name: "team-a/a"},
		{SourceKey: lookup("", errors.New("reading the source credentials secret team-a/creds: not found")), Secret: []byte("secret-a"), Name: "team-a/broken"},
		{SourceKey: lookup("b", nil), Secret: []byte("secret-b"), Name: "team-b/b"},
	}}
	trig := &fakeTrigger{}
	h := NewWebhookHandler(targets, trig, WebhookOptions{})
	for range 10 {
		g.Expect(post(h, "192.0.2.1:1234", genericPush, "X-Signature", "sha256="+hmacHex("guess", genericPush)).Code).
			To(Equal(http.StatusUnauthorized))
	}
	g.Expect(lookups.Load()).To(BeZero(), "no lookup for a refused request")

	g.Expect(post(h, "192.0.2.1:1234", genericPush, "X-Signature", "sha256="+hmacHex("secret-a", genericPush)).Code).
		To(Equal(http.StatusAccepted))
	g.Expect(lookups.Load()).To(BeEquivalentTo(2), "only the targets of the secret that signed")
	g.Expect(trig.triggered()).To(Equal([]Key{"a"}))
}

// TestWebhookRateLimit: an address gets its burst, then 429 with Retry-After, before its body
// is read, until its bucket refills; other addresses are not affected; the addresses of one
// IPv6 /64 share a bucket.
func TestWebhookRateLimit(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	clk := clocktesting.NewFakePassiveClock(t0)
	trig := &fakeTrigger{}
	h := NewWebhookHandler(fakeTargets{"github.com/org/app": {{Key: "app", Secret: []byte("s")}}}, trig,
		WebhookOptions{RateLimit: 0.5, RateBurst: 3, Clock: clk})
	signed := "sha256=" + hmacHex("s", genericPush)
	send := func(remote string) *httptest.ResponseRecorder {
		return post(h, remote, genericPush, "X-Signature", signed)
	}

	for range 3 {
		g.Expect(send("192.0.2.1:1000").Code).To(Equal(http.StatusAccepted))
	}
	body := &endlessBody{left: 1 << 20}
	req := httptest.NewRequest(http.MethodPost, WebhookPath, body)
	req.RemoteAddr = "192.0.2.1:1001"
	req.Header.Set("X-Signature", signed)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	g.Expect(rec.Code).To(Equal(http.StatusTooManyRequests))
	g.Expect(rec.Header().Get("Retry-After")).To(Equal("2"), "one request every 2 s")
	g.Expect(body.read).To(BeZero(), "the body of a refused request is not read")
	g.Expect(trig.triggered()).To(HaveLen(3))

	g.Expect(send("192.0.2.2:1000").Code).To(Equal(http.StatusAccepted), "another address")
	g.Expect(send("[::ffff:192.0.2.1]:1000").Code).To(Equal(http.StatusTooManyRequests), "the same address, IPv4-mapped")

	for range 3 {
		g.Expect(send("[2001:db8:0:1::1]:1000").Code).To(Equal(http.StatusAccepted))
	}
	g.Expect(send("[2001:db8:0:1::ffff]:1000").Code).To(Equal(http.StatusTooManyRequests), "the same /64")
	g.Expect(send("[2001:db8:0:2::1]:1000").Code).To(Equal(http.StatusAccepted), "another /64")

	clk.SetTime(t0.Add(2 * time.Second))
	g.Expect(send("192.0.2.1:1000").Code).To(Equal(http.StatusAccepted), "one token back after 2 s")
	g.Expect(send("192.0.2.1:1000").Code).To(Equal(http.StatusTooManyRequests))
}

// TestWebhookRateLimitTableIsBounded: a flood from many addresses holds at most the table's
// size, the addresses beyond it share one bucket, and once idle long enough for a full
// bucket the entries are dropped without changing any answer.
func TestWebhookRateLimitTableIsBounded(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	clk := clocktesting.NewFakePassiveClock(t0)
	h := NewWebhookHandler(fakeTargets{}, &fakeTrigger{}, WebhookOptions{RateLimit: 1, RateBurst: 2, Clock: clk})
	lim := h.(*webhookHandler).limiter
	lim.max = 100
	send := func(i int) int {
		return post(h, fmt.Sprintf("10.0.%d.%d:1000", i/256, i%256), genericPush, "X-Signature", "sha256=00").Code
	}

	overflow := map[int]int{}
	for i := range 1000 {
		overflow[send(i)]++
	}
	g.Expect(lim.size()).To(Equal(100))
	g.Expect(overflow).To(Equal(map[int]int{http.StatusUnauthorized: 102, http.StatusTooManyRequests: 898}),
		"100 addresses in the table, and a burst of 2 shared by the 900 others")
	g.Expect(send(0)).To(Equal(http.StatusUnauthorized), "an address in the table keeps its own bucket")

	clk.SetTime(t0.Add(2 * time.Second)) // a burst of 2 at one a second: full again
	g.Expect(send(5000)).To(Equal(http.StatusUnauthorized))
	g.Expect(lim.size()).To(Equal(1), "idle entries dropped")
	g.Expect(send(0)).To(Equal(http.StatusUnauthorized))
	g.Expect(send(0)).To(Equal(http.StatusUnauthorized))
	g.Expect(send(0)).To(Equal(http.StatusTooManyRequests), "a dropped entry starts again with a full burst, no more")
}

// TestClientAddr: the rate limit key of a remote address.
func TestClientAddr(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ remote, want string }{
		{"192.0.2.1:443", "192.0.2.1"},
		{"[::ffff:192.0.2.1]:443", "192.0.2.1"},
		{"[2001:db8:1:2:3:4:5:6]:443", "2001:db8:1:2::/64"},
		{"[fe80::1%eth0]:443", "fe80::/64"},
		{"not an address", "not an address"},
		{"", ""},
	} {
		t.Run(tc.remote, func(t *testing.T) {
			NewWithT(t).Expect(clientAddr(tc.remote)).To(Equal(tc.want))
		})
	}
}
