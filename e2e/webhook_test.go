package e2e

import (
	"bufio"
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
	"github.com/converge-gitops/converge/sources"
)

// hookAnswer is what a webhook receiver answered.
type hookAnswer struct {
	code       int
	body       string
	retryAfter string
}

// postHook sends a generic push of repoURL signed with token to the receiver at base.
func postHook(g Gomega, base, repoURL, token string) hookAnswer {
	req, err := hookRequest(base, repoURL, token)
	g.Expect(err).NotTo(HaveOccurred())
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
	g.Expect(err).NotTo(HaveOccurred())
	defer func() { _ = resp.Body.Close() }()
	b, _ := io.ReadAll(resp.Body)
	return hookAnswer{code: resp.StatusCode, body: string(b), retryAfter: resp.Header.Get("Retry-After")}
}

// hookRequest is a push of repoURL to the receiver at base, as a generic sender signed
// with token sends it.
func hookRequest(base, repoURL, token string) (*http.Request, error) {
	body := []byte(fmt.Sprintf(`{"repository": {"url": %q}}`, repoURL))
	mac := hmac.New(sha256.New, []byte(token))
	mac.Write(body)
	req, err := http.NewRequest(http.MethodPost, base+sources.WebhookPath, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Signature", "sha256="+hex.EncodeToString(mac.Sum(nil)))
	return req, nil
}

// apiRequests is the daemon's count of the requests it sent to the API server, from its
// metrics (client-go's rest_client_requests_total).
func apiRequests(g Gomega, metricsURL string) int {
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Get(metricsURL + "/metrics")
	g.Expect(err).NotTo(HaveOccurred())
	defer func() { _ = resp.Body.Close() }()
	total, found := 0, false
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "rest_client_requests_total{") {
			continue
		}
		n, err := strconv.ParseFloat(line[strings.LastIndex(line, " ")+1:], 64)
		g.Expect(err).NotTo(HaveOccurred(), line)
		total += int(n)
		found = true
	}
	g.Expect(found).To(BeTrue(), "the daemon exports rest_client_requests_total")
	return total
}

// TestWebhookRefusalsWithTheRealBinary: pushes with a wrong signature, for a followed
// repository and for one nobody follows, get the same 401 and cost the daemon no request to
// the API server; a flood from one address gets 429 with Retry-After; a signed push still
// deploys.
func TestWebhookRefusalsWithTheRealBinary(t *testing.T) {
	run(t, 19, "webhook refusals cost nothing (real binary)", parallel, func(s *scenario) {
		g := NewWithT(t)
		r := s.repo("app")
		first := r.commit(map[string]string{"deploy/a.yaml": configMap("a", "1")})
		st := s.syncTarget("hooked", r, func(st *convergev1.SyncTarget) {
			st.Labels = map[string]string{shardLabel: "hooks"}
			st.Spec.Source.Interval = nil
			st.Spec.Source.Schedule = "@every 1h" // only a push explains a prompt deploy
			st.Spec.Source.WebhookSecretRef = &convergev1.LocalObjectReference{Name: webhookSecret}
		})
		hooks, metrics := freeAddr(t), freeAddr(t)
		d := startDaemon(t, "hooks", "--watch-label-selector", shardLabel+"=hooks",
			"--webhook-bind-address", hooks, "--metrics-bind-address", metrics, "--webhook-rate-burst", "40")
		s.explainWith(d)
		s.waitHealthy(st, first, 90*time.Second)
		base := "http://" + hooks

		// Warm: the first refusal may read the webhook Secret once.
		g.Expect(postHook(g, base, r.httpURL(), "wrong").code).To(Equal(http.StatusUnauthorized))
		before := apiRequests(g, "http://"+metrics)
		var known, unknown hookAnswer
		for range 15 {
			known = postHook(g, base, r.httpURL(), "wrong token")
			unknown = postHook(g, base, "http://127.0.0.1:1/nobody/follows.git", "wrong token")
		}
		after := apiRequests(g, "http://"+metrics)
		g.Expect(known.code).To(Equal(http.StatusUnauthorized))
		g.Expect(unknown).To(Equal(known), "a followed repository is refused exactly as an unknown one")
		t.Logf("30 refused pushes: %d API requests (before %d, after %d)", after-before, before, after)
		g.Expect(after-before).To(BeNumerically("<=", 2), "refusals cost no API request (at most a watch renewed meanwhile)")

		// A signed push still deploys.
		next := r.commit(map[string]string{"deploy/a.yaml": configMap("a", "2")})
		pushed := time.Now()
		g.Expect(postHook(g, base, r.httpURL(), webhookToken).code).To(Equal(http.StatusAccepted))
		s.waitHealthy(st, next, 60*time.Second)
		s.latency("signed push→healthy", time.Since(pushed))

		// A flood from one address: the burst passes, the rest is told to come back later.
		var limited hookAnswer
		for range 100 {
			if a := postHook(g, base, r.httpURL(), "wrong"); a.code == http.StatusTooManyRequests {
				limited = a
				break
			}
		}
		g.Expect(limited.code).To(Equal(http.StatusTooManyRequests))
		g.Expect(limited.retryAfter).NotTo(BeEmpty())
	})
}
