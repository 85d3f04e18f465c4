package notify

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
)

// credentials are the keys of a Notifier's Secret. Their values are never logged, put in
// an error, an event or the status.
type credentials struct {
	token, username, password, hmacKey, address string
}

// notification is what a provider turns into a request.
type notification struct {
	msg  Message
	text string
	// sourceURL is the SyncTarget's spec.source.url, from which forges are derived.
	sourceURL string
}

// request is one HTTP request to a provider.
type request struct {
	method, url string
	header      http.Header
	body        []byte
	// ident is what besides the body identifies the request for deduplication (a
	// forge's path with the commit); never a secret.
	ident string
}

// digest identifies a request's content: an identical one next is not sent again.
func (r *request) digest() string {
	sum := sha256.Sum256(append([]byte(r.ident+"\n"), r.body...))
	return hex.EncodeToString(sum[:12])
}

// buildRequest turns a notification into the provider's request; nil when the provider has
// nothing to say about it (a commit status for an event without a commit).
func buildRequest(p convergev1.NotificationProvider, c credentials, n notification) (*request, error) {
	switch p.Type {
	case convergev1.WebhookProvider:
		return webhookRequest(p, c, n)
	case convergev1.SlackProvider, convergev1.TeamsProvider, convergev1.DiscordProvider:
		return chatRequest(p, c, n)
	case convergev1.GitHubProvider, convergev1.GitLabProvider, convergev1.GiteaProvider, convergev1.BitbucketProvider:
		return statusRequest(p, c, n)
	}
	return nil, fmt.Errorf("unknown provider type %q", p.Type)
}

// chatAddress is the webhook URL: the Secret's address key wins over spec.provider.address.
func chatAddress(p convergev1.NotificationProvider, c credentials) (string, error) {
	addr := c.address
	if addr == "" {
		addr = p.Address
	}
	if !strings.HasPrefix(addr, "https://") && !strings.HasPrefix(addr, "http://") {
		return "", errors.New("no webhook address: set spec.provider.address or the Secret's address key (an http(s) URL)")
	}
	return addr, nil
}

func jsonRequest(url string, body any) (*request, error) {
	b, err := json.Marshal(body)
	if err != nil {
		return nil, fmt.Errorf("encoding the request: %w", err)
	}
	h := http.Header{}
	h.Set("Content-Type", "application/json")
	h.Set("User-Agent", "converge")
	return &request{method: http.MethodPost, url: url, header: h, body: b}, nil
}

// sendError is a request that failed: retryable (429, 5xx, network) or not (other 4xx).
type sendError struct {
	code       int // 0: no answer
	retryable  bool
	retryAfter time.Duration
	msg        string
}

func (e *sendError) Error() string { return e.msg }

// maxRetryAfter caps how long a Retry-After can hold a Notifier's deliveries back.
const maxRetryAfter = 10 * time.Minute

// send sends req and classifies the answer. Errors never quote the URL (a chat webhook's
// URL is its credential): kind names the provider instead. A forge's own explanation
// (its JSON "message", e.g. GitHub's "No commit found for SHA") is added, cut short and
// with the request's credentials removed should the forge echo them.
func send(ctx context.Context, hc *http.Client, req *request, kind string, now time.Time) error {
	hr, err := http.NewRequestWithContext(ctx, req.method, req.url, bytes.NewReader(req.body))
	if err != nil {
		return &sendError{msg: kind + ": invalid address"}
	}
	hr.Header = req.header.Clone()
	resp, err := hc.Do(hr)
	if err != nil {
		return &sendError{retryable: ctx.Err() == nil, msg: kind + ": " + transportReason(err)}
	}
	defer func() { _ = resp.Body.Close() }()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		return nil
	}
	e := &sendError{code: resp.StatusCode, msg: fmt.Sprintf("%s answered %d %s", kind, resp.StatusCode,
		http.StatusText(resp.StatusCode))}
	if req.ident != "" {
		if m := forgeMessage(body, req.header); m != "" {
			e.msg += ": " + m
		}
	}
	if resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode >= 500 {
		e.retryable = true
		e.retryAfter = retryAfter(resp.Header.Get("Retry-After"), now)
	}
	return e
}

// transportReason says why a request got no answer without quoting its URL.
func transportReason(err error) string {
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return "timed out"
	case errors.Is(err, context.Canceled):
		return "canceled"
	}
	return "no answer (connection failed)"
}

// retryAfter reads a Retry-After header: seconds, or an HTTP date; capped.
func retryAfter(v string, now time.Time) time.Duration {
	if v == "" {
		return 0
	}
	var d time.Duration
	if s, err := strconv.ParseFloat(strings.TrimSpace(v), 64); err == nil && s >= 0 {
		d = time.Duration(s * float64(time.Second))
	} else if t, err := http.ParseTime(v); err == nil {
		d = t.Sub(now)
	}
	return min(max(d, 0), maxRetryAfter)
}

// forgeMessage is the "message" of a forge's JSON error (GitHub, Gitea, GitLab) or
// Bitbucket's "error.message", at most 200 runes, without the request's credentials.
func forgeMessage(body []byte, h http.Header) string {
	var v struct {
		Message json.RawMessage `json:"message"`
		Error   struct {
			Message string `json:"message"`
		} `json:"error"`
	}
	if json.Unmarshal(body, &v) != nil {
		return ""
	}
	var m string
	if json.Unmarshal(v.Message, &m) != nil {
		m = string(v.Message) // GitLab may answer {"message": {"field": ["reason"]}}
	}
	if m == "" {
		m = v.Error.Message
	}
	_, auth, _ := strings.Cut(h.Get("Authorization"), " ")
	for _, secret := range []string{auth, h.Get("PRIVATE-TOKEN")} {
		if len(secret) >= 4 {
			m = strings.ReplaceAll(m, secret, "***")
		}
	}
	return cut(strings.TrimSpace(m), 200)
}
