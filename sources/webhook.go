package sources

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/go-logr/logr"
)

// WebhookPath is where the webhook receiver listens.
const WebhookPath = "/hooks/git"

// DefaultMaxWebhookBytes caps the size of a webhook payload.
const DefaultMaxWebhookBytes int64 = 3 << 20

// maxPayloadURLs bounds the repository URLs looked up for one payload.
const maxPayloadURLs = 16

// WebhookTarget is a source a push webhook may trigger, with the secret its webhooks must be
// signed with.
type WebhookTarget struct {
	// Key of the source to poll (Source.Key).
	Key Key
	// Secret signs the webhooks for this target (the "token" of its webhookSecretRef). A target
	// with an empty secret is never triggered.
	Secret []byte
	// Name identifies the target in logs, e.g. "<namespace>/<name>".
	Name string
}

// WebhookTargets finds the targets that follow a repository.
type WebhookTargets interface {
	// TargetsForRepo returns the targets whose source URL normalizes (NormalizeURL) to repo.
	TargetsForRepo(ctx context.Context, repo string) ([]WebhookTarget, error)
}

// Triggerer starts polls; *Scheduler is one.
type Triggerer interface {
	Trigger(Key) error
}

// WebhookOptions configures the webhook receiver.
type WebhookOptions struct {
	// MaxBodyBytes caps the payload (default 3 MiB); larger requests get 413.
	MaxBodyBytes int64
	// Log receives one line per request handled (default: discard).
	Log logr.Logger
}

// NewWebhookHandler returns the handler of POST /hooks/git. It accepts push payloads of GitHub
// (X-Hub-Signature-256: sha256=<hex>), GitLab (X-Gitlab-Token), Gitea, Forgejo and Gogs
// (X-Gitea-Signature, X-Forgejo-Signature, X-Gogs-Signature: <hex>) and a generic sender
// (X-Signature: sha256=<hex>), where every signature is the HMAC-SHA256 of the body. The
// generic payload is {"repository": {"url": "<clone url>"}}; the forges' own shapes work too.
//
// It reads the repository URLs from the payload, asks targets for the sources following that
// repository, checks the signature against each one's secret in constant time, and triggers a
// poll of exactly those whose secret matches. It answers 202 when it triggered at least one,
// 401 when the signature is missing or matches no target (an unknown repository included, so
// that callers cannot probe which repositories are followed), 400 on a malformed payload, 413
// above the size cap, 405 for another method, and 503 when the poll queue is full.
func NewWebhookHandler(targets WebhookTargets, trigger Triggerer, opts WebhookOptions) http.Handler {
	if opts.MaxBodyBytes <= 0 {
		opts.MaxBodyBytes = DefaultMaxWebhookBytes
	}
	if opts.Log.GetSink() == nil {
		opts.Log = logr.Discard()
	}
	return &webhookHandler{targets: targets, trigger: trigger, opts: opts, newMAC: newSHA256MAC}
}

// newSHA256MAC is the HMAC of webhook signatures.
func newSHA256MAC(key []byte) hash.Hash { return hmac.New(sha256.New, key) }

// NewWebhookServer returns an HTTP server for the webhook handler on addr, with header, read
// and write timeouts so that slow clients cannot hold connections open.
func NewWebhookServer(addr string, h http.Handler) *http.Server {
	mux := http.NewServeMux()
	mux.Handle(WebhookPath, h)
	return &http.Server{
		Addr:              addr,
		Handler:           mux,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
	}
}

type webhookHandler struct {
	targets WebhookTargets
	trigger Triggerer
	opts    WebhookOptions
	// newMAC makes the HMAC of a secret (tests count the calls).
	newMAC func(key []byte) hash.Hash
}

// signatures are what a request presents: hex HMACs, and GitLab's plain token.
type signatures struct {
	hmacs  [][]byte
	tokens []string
}

func readSignatures(h http.Header) signatures {
	var sigs signatures
	add := func(v string) {
		if b, err := hex.DecodeString(strings.TrimSpace(v)); err == nil && len(b) == sha256.Size {
			sigs.hmacs = append(sigs.hmacs, b)
		}
	}
	for _, name := range []string{"X-Hub-Signature-256", "X-Signature"} {
		for _, v := range h.Values(name) {
			if hexSig, ok := strings.CutPrefix(strings.TrimSpace(v), "sha256="); ok {
				add(hexSig)
			}
		}
	}
	for _, name := range []string{"X-Gitea-Signature", "X-Forgejo-Signature", "X-Gogs-Signature"} {
		for _, v := range h.Values(name) {
			add(strings.TrimPrefix(strings.TrimSpace(v), "sha256="))
		}
	}
	for _, v := range h.Values("X-Gitlab-Token") {
		if v != "" {
			sigs.tokens = append(sigs.tokens, v)
		}
	}
	return sigs
}

func (s signatures) empty() bool { return len(s.hmacs) == 0 && len(s.tokens) == 0 }

// verify reports whether any presented signature is valid for secret.
func (s signatures) verify(newMAC func([]byte) hash.Hash, body, secret []byte) bool {
	if len(secret) == 0 {
		return false
	}
	ok := false
	if len(s.hmacs) > 0 {
		m := newMAC(secret)
		m.Write(body)
		want := m.Sum(nil)
		for _, got := range s.hmacs {
			if hmac.Equal(got, want) {
				ok = true
			}
		}
	}
	wantTok := sha256.Sum256(secret)
	for _, tok := range s.tokens {
		gotTok := sha256.Sum256([]byte(tok))
		if subtle.ConstantTimeCompare(gotTok[:], wantTok[:]) == 1 {
			ok = true
		}
	}
	return ok
}

func (h *webhookHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	log := h.opts.Log.WithValues("remote", r.RemoteAddr)
	if r.URL.Path != WebhookPath {
		http.NotFound(w, r)
		return
	}
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, h.opts.MaxBodyBytes))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			http.Error(w, fmt.Sprintf("payload larger than %d bytes", h.opts.MaxBodyBytes), http.StatusRequestEntityTooLarge)
			return
		}
		http.Error(w, "cannot read payload", http.StatusBadRequest)
		return
	}
	sigs := readSignatures(r.Header)
	if sigs.empty() {
		log.V(1).Info("webhook refused: no signature")
		http.Error(w, "missing signature", http.StatusUnauthorized)
		return
	}
	repos, err := PayloadRepositories(body)
	if err != nil {
		http.Error(w, "malformed payload: "+err.Error(), http.StatusBadRequest)
		return
	}

	seen := map[Key]bool{}
	var valid []WebhookTarget
	for _, repo := range repos {
		targets, err := h.targets.TargetsForRepo(r.Context(), repo)
		if err != nil {
			log.Error(err, "webhook: listing targets", "repository", repo)
			http.Error(w, "cannot list targets", http.StatusInternalServerError)
			return
		}
		for _, t := range targets {
			if !seen[t.Key] && sigs.verify(h.newMAC, body, t.Secret) {
				seen[t.Key] = true
				valid = append(valid, t)
			}
		}
	}
	if len(valid) == 0 {
		log.V(1).Info("webhook refused: signature matches no target", "repositories", repos)
		http.Error(w, "signature does not match any target of this repository", http.StatusUnauthorized)
		return
	}

	full := false
	triggered := 0
	for _, t := range valid {
		switch err := h.trigger.Trigger(t.Key); {
		case err == nil:
			triggered++
		case errors.Is(err, ErrQueueFull):
			full = true
		default:
			log.V(1).Info("webhook: target not polled", "target", t.Name, "reason", err.Error())
		}
	}
	log.Info("webhook accepted", "repositories", repos, "targets", len(valid), "triggered", triggered)
	if full {
		w.Header().Set("Retry-After", "1")
		http.Error(w, "poll queue full, retry later", http.StatusServiceUnavailable)
		return
	}
	w.WriteHeader(http.StatusAccepted)
	_, _ = fmt.Fprintf(w, "triggered %d\n", triggered)
}

// repoURLFields are the fields of "repository" and "project" objects that hold a repository's
// URL in GitHub, GitLab, Gitea/Forgejo/Gogs and Bitbucket payloads.
var repoURLFields = []string{
	"clone_url", "ssh_url", "git_url", "html_url", "url", "http_url", "ssh_url_to_repo", "http_url_to_repo",
	"git_http_url", "git_ssh_url", "web_url", "homepage", "website",
}

// PayloadRepositories returns the normalized repository URLs (NormalizeURL) a push payload names.
// It accepts any JSON object, ignores fields of unexpected types, and fails on malformed JSON or
// when no URL is found.
func PayloadRepositories(body []byte) ([]string, error) {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, errors.New("not json")
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, errors.New("trailing data after the json object")
	}
	obj, ok := v.(map[string]any)
	if !ok {
		return nil, errors.New("not a json object")
	}

	var raw []string
	for _, k := range []string{"repository", "project"} {
		switch x := obj[k].(type) {
		case string:
			raw = append(raw, x)
		case map[string]any:
			for _, f := range repoURLFields {
				if s, ok := x[f].(string); ok {
					raw = append(raw, s)
				}
			}
			// Bitbucket: links.clone[].href and links.html.href.
			if links, ok := x["links"].(map[string]any); ok {
				if clones, ok := links["clone"].([]any); ok {
					for _, c := range clones {
						if cm, ok := c.(map[string]any); ok {
							if s, ok := cm["href"].(string); ok {
								raw = append(raw, s)
							}
						}
					}
				}
				if html, ok := links["html"].(map[string]any); ok {
					if s, ok := html["href"].(string); ok {
						raw = append(raw, s)
					}
				}
			}
		}
	}

	seen := map[string]bool{}
	var out []string
	for _, u := range raw {
		n, err := NormalizeURL(u)
		if err != nil || seen[n] {
			continue
		}
		seen[n] = true
		out = append(out, n)
		if len(out) == maxPayloadURLs {
			break
		}
	}
	if len(out) == 0 {
		return nil, errors.New("no repository url in the payload")
	}
	return out, nil
}
