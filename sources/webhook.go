package sources

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/utils/clock"
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
	// Key of the source to poll (Source.Key), unless SourceKey is set.
	Key Key
	// SourceKey, when set, returns the key of the source to poll in place of Key. It is called
	// only for a target whose secret signed the request, so that what it costs (reading the
	// source's credentials) is never paid for an unauthenticated request.
	SourceKey func(context.Context) (Key, error)
	// Secret signs the webhooks for this target (the "token" of its webhookSecretRef). A target
	// with an empty secret is never triggered.
	Secret []byte
	// Name identifies the target in logs, e.g. "<namespace>/<name>".
	Name string
	// Wake, when set, is called in place of a poll: the target is no source but something
	// a webhook of the repository wakes (a SyncTargetSet listing its pull requests).
	Wake func()
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
	// RateLimit is how many requests a second one client address (for IPv6, one /64) may send;
	// 0 means no limit. A request above it is answered 429 with Retry-After before its body is
	// read. Behind a proxy, all clients share the proxy's address.
	RateLimit float64
	// RateBurst is how many requests an address may send at once (default: RateLimit, at
	// least 1).
	RateBurst int
	// Clock times the rate limit (default: the real clock).
	Clock clock.PassiveClock
	// Registry, when set, has the handler take the push notifications of OCI registries at
	// POST /hooks/oci too (see RegistryPayloadRepositories), for its targets: those following
	// an OCI repository (NormalizeOCIRepository), whose sources its Trigger polls. Both routes
	// share the size cap and the rate limit.
	Registry *WebhookRoute
}

// WebhookRoute is what a route of the webhook receiver wakes: the targets following the
// repository a payload names, and the pollers of their sources.
type WebhookRoute struct {
	Targets WebhookTargets
	Trigger Triggerer
}

// NewWebhookHandler returns the handler of POST /hooks/git. It accepts push payloads of GitHub
// (X-Hub-Signature-256: sha256=<hex>), GitLab (X-Gitlab-Token), Gitea, Forgejo and Gogs
// (X-Gitea-Signature, X-Forgejo-Signature, X-Gogs-Signature: <hex>) and a generic sender
// (X-Signature: sha256=<hex>), where every signature is the HMAC-SHA256 of the body. The
// generic payload is {"repository": {"url": "<clone url>"}}; the forges' own shapes work too.
//
// It reads the repository URLs from the payload, asks targets for the sources following that
// repository, checks the signature against their secrets in constant time — one HMAC of the
// body per distinct secret — and triggers a poll of exactly those whose secret matches. It
// answers 202 when the signature matched, 401 when the signature is missing or matches no
// target, 400 on a malformed payload, 413 above the size cap, 405 for another method, 429 above
// the rate limit of the client's address and 503 when the poll queue is full.
//
// A repository nobody follows is answered like a followed one with a wrong signature: the same
// 401 with the same body, after one HMAC of the body with a random key: the work a followed
// repository whose targets share one secret costs, so that neither the answer nor its time
// tells that it is followed. (Each further distinct secret costs one more HMAC.)
//
// With opts.Registry, POST /hooks/oci takes registries' push notifications alike, signed
// the same ways, or carrying the token as Authorization: Bearer <token> (or the bare token:
// what Harbor, Distribution and Azure Container Registry send as configured), or in the
// path, /hooks/oci/<token>, for those that send no header of the user's choosing (Docker
// Hub, Quay, a Pub/Sub push). A notification of something else than a push (a pull, a
// deletion) is answered 200 and triggers nothing, whatever it names, so that a registry does
// not send it again.
func NewWebhookHandler(targets WebhookTargets, trigger Triggerer, opts WebhookOptions) http.Handler {
	if opts.MaxBodyBytes <= 0 {
		opts.MaxBodyBytes = DefaultMaxWebhookBytes
	}
	if opts.Log.GetSink() == nil {
		opts.Log = logr.Discard()
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	h := &webhookHandler{git: webhookRoute{targets: targets, trigger: trigger, repositories: PayloadRepositories},
		opts: opts, newMAC: newSHA256MAC, decoy: make([]byte, 32)}
	if r := opts.Registry; r != nil {
		h.oci = &webhookRoute{targets: r.Targets, trigger: r.Trigger, repositories: RegistryPayloadRepositories, tokens: true}
	}
	_, _ = rand.Read(h.decoy) // never fails
	if opts.RateLimit > 0 {
		h.limiter = newAddrLimiter(opts.RateLimit, opts.RateBurst, opts.Clock)
	}
	return h
}

// newSHA256MAC is the HMAC of webhook signatures.
func newSHA256MAC(key []byte) hash.Hash { return hmac.New(sha256.New, key) }

// NewWebhookServer returns an HTTP server for the webhook handler on addr, with header, read
// and write timeouts so that slow clients cannot hold connections open.
func NewWebhookServer(addr string, h http.Handler) *http.Server {
	mux := http.NewServeMux()
	mux.Handle(WebhookPath, h)
	mux.Handle(OCIWebhookPath, h)
	mux.Handle(OCIWebhookPath+"/", h)
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
	git  webhookRoute
	oci  *webhookRoute // nil: registries' notifications are not taken
	opts WebhookOptions
	// newMAC makes the HMAC of a secret (tests count the calls).
	newMAC func(key []byte) hash.Hash
	// decoy is the random key of the HMAC computed when no target has a secret.
	decoy   []byte
	limiter *addrLimiter // nil: no rate limit
}

// webhookRoute is one path of the receiver: how its payloads name repositories, who follows
// them and what polls their sources.
type webhookRoute struct {
	targets      WebhookTargets
	trigger      Triggerer
	repositories func(body []byte) ([]string, error)
	// tokens: a bearer token in Authorization, or in the path, is accepted too.
	tokens bool
}

// signatures reads what a request to the route presents.
func (rt *webhookRoute) signatures(h http.Header, pathToken string) signatures {
	sigs := readSignatures(h)
	if rt.tokens {
		sigs.addBearerTokens(h, pathToken)
	}
	return sigs
}

// targetsOf lists the targets following any of repos.
func (rt *webhookRoute) targetsOf(ctx context.Context, repos []string) ([]WebhookTarget, error) {
	var found []WebhookTarget
	for _, repo := range repos {
		targets, err := rt.targets.TargetsForRepo(ctx, repo)
		if err != nil {
			return nil, err
		}
		found = append(found, targets...)
	}
	return found, nil
}

// maxSignatures bounds the signatures of each kind read from one request.
const maxSignatures = 16

// signatures are what a request presents: hex HMACs, and the SHA-256 of GitLab's plain tokens.
type signatures struct {
	hmacs  [][]byte
	tokens [][sha256.Size]byte
}

func readSignatures(h http.Header) signatures {
	var sigs signatures
	add := func(v string) {
		if len(sigs.hmacs) == maxSignatures {
			return
		}
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
		sigs.addToken(v)
	}
	return sigs
}

// addToken adds a plain token presented, by its SHA-256.
func (s *signatures) addToken(v string) {
	if v != "" && len(s.tokens) < maxSignatures {
		s.tokens = append(s.tokens, sha256.Sum256([]byte(v)))
	}
}

// addBearerTokens adds the tokens registries present: the Authorization header, "Bearer
// <token>" or the bare token, and the token of the path.
func (s *signatures) addBearerTokens(h http.Header, pathToken string) {
	for _, v := range h.Values("Authorization") {
		v = strings.TrimSpace(v)
		if scheme, tok, ok := strings.Cut(v, " "); ok && strings.EqualFold(scheme, "Bearer") {
			v = strings.TrimSpace(tok)
		}
		s.addToken(v)
	}
	s.addToken(pathToken)
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
	for _, gotTok := range s.tokens {
		if subtle.ConstantTimeCompare(gotTok[:], wantTok[:]) == 1 {
			ok = true
		}
	}
	return ok
}

// authenticate returns the targets whose secret signed the request. It verifies each distinct
// secret once, and when there is none (an unknown repository, or targets without a readable
// secret) it verifies a random key instead, so that a refusal costs the same work either way.
func (h *webhookHandler) authenticate(sigs signatures, body []byte, targets []WebhookTarget) []WebhookTarget {
	valid := map[string]bool{}
	for _, t := range targets {
		if len(t.Secret) == 0 {
			continue
		}
		if _, done := valid[string(t.Secret)]; !done {
			valid[string(t.Secret)] = sigs.verify(h.newMAC, body, t.Secret)
		}
	}
	if len(valid) == 0 {
		_ = sigs.verify(h.newMAC, body, h.decoy)
		return nil
	}
	var out []WebhookTarget
	for _, t := range targets {
		if valid[string(t.Secret)] {
			out = append(out, t)
		}
	}
	return out
}

func (h *webhookHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	log := h.opts.Log.WithValues("remote", r.RemoteAddr)
	route, pathToken, ok := h.admit(w, r)
	if !ok {
		return
	}
	body, ok := h.readBody(w, r)
	if !ok {
		return
	}
	sigs := route.signatures(r.Header, pathToken)
	if sigs.empty() {
		log.V(1).Info("webhook refused: no signature")
		http.Error(w, "missing signature", http.StatusUnauthorized)
		return
	}
	repos, err := route.repositories(body)
	if errors.Is(err, errNoPush) {
		_, _ = fmt.Fprintln(w, "no push in the notification")
		return
	}
	if err != nil {
		http.Error(w, "malformed payload: "+err.Error(), http.StatusBadRequest)
		return
	}
	found, err := route.targetsOf(r.Context(), repos)
	if err != nil {
		log.Error(err, "webhook: listing targets", "repositories", repos)
		http.Error(w, "cannot list targets", http.StatusInternalServerError)
		return
	}
	valid := h.authenticate(sigs, body, found)
	if len(valid) == 0 {
		log.V(1).Info("webhook refused: signature matches no target", "repositories", repos)
		http.Error(w, "signature does not match any target of this repository", http.StatusUnauthorized)
		return
	}
	triggered, full := h.triggerAll(r.Context(), log, route.trigger, valid)
	log.Info("webhook accepted", "repositories", repos, "targets", len(valid), "triggered", triggered)
	if full {
		w.Header().Set("Retry-After", "1")
		http.Error(w, "poll queue full, retry later", http.StatusServiceUnavailable)
		return
	}
	w.WriteHeader(http.StatusAccepted)
	_, _ = fmt.Fprintf(w, "triggered %d\n", triggered)
}

// admit answers a request to another path, with another method than POST, or above the rate
// limit of its address, and returns the route of one that goes on, with the token its path
// carries.
func (h *webhookHandler) admit(w http.ResponseWriter, r *http.Request) (*webhookRoute, string, bool) {
	route, pathToken := h.route(r.URL.Path)
	if route == nil {
		http.NotFound(w, r)
		return nil, "", false
	}
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return nil, "", false
	}
	if h.limiter != nil {
		if wait, ok := h.limiter.allow(clientAddr(r.RemoteAddr)); !ok {
			w.Header().Set("Retry-After", strconv.Itoa(int(max(1, math.Ceil(wait.Seconds())))))
			http.Error(w, "too many requests, retry later", http.StatusTooManyRequests)
			return nil, "", false
		}
	}
	return route, pathToken, true
}

// route is the route of a path, nil for none, and the token the path carries
// (/hooks/oci/<token>).
func (h *webhookHandler) route(p string) (*webhookRoute, string) {
	switch {
	case p == WebhookPath:
		return &h.git, ""
	case h.oci == nil:
		return nil, ""
	case p == OCIWebhookPath:
		return h.oci, ""
	}
	if tok, ok := strings.CutPrefix(p, OCIWebhookPath+"/"); ok {
		return h.oci, tok
	}
	return nil, ""
}

// readBody reads the payload up to MaxBodyBytes, or answers why it cannot.
func (h *webhookHandler) readBody(w http.ResponseWriter, r *http.Request) ([]byte, bool) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, h.opts.MaxBodyBytes))
	if err == nil {
		return body, true
	}
	var tooBig *http.MaxBytesError
	if errors.As(err, &tooBig) {
		http.Error(w, fmt.Sprintf("payload larger than %d bytes", h.opts.MaxBodyBytes), http.StatusRequestEntityTooLarge)
	} else {
		http.Error(w, "cannot read payload", http.StatusBadRequest)
	}
	return nil, false
}

// triggerAll triggers one poll of each distinct source of the valid targets. It returns how
// many were triggered, and whether the poll queue was full for any.
func (h *webhookHandler) triggerAll(ctx context.Context, log logr.Logger, trigger Triggerer, valid []WebhookTarget) (triggered int, full bool) {
	seen := map[Key]bool{}
	for _, t := range valid {
		if t.Wake != nil {
			t.Wake()
			triggered++
			continue
		}
		key := t.Key
		if t.SourceKey != nil {
			k, err := t.SourceKey(ctx)
			if err != nil {
				log.V(1).Info("webhook: target not polled", "target", t.Name, "reason", err.Error())
				continue
			}
			key = k
		}
		if seen[key] {
			continue
		}
		seen[key] = true
		switch err := trigger.Trigger(key); {
		case err == nil:
			triggered++
		case errors.Is(err, ErrQueueFull):
			full = true
		default:
			log.V(1).Info("webhook: target not polled", "target", t.Name, "reason", err.Error())
		}
	}
	return triggered, full
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
	obj, err := decodeObject(body)
	if err != nil {
		return nil, err
	}
	return normalizedSet(payloadURLs(obj), NormalizeURL, "no repository url in the payload")
}

// decodeObject reads a payload that must be one JSON object, numbers kept as written.
func decodeObject(body []byte) (map[string]any, error) {
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
	return obj, nil
}

// payloadURLs returns the URLs the "repository" and "project" fields of a payload hold, as
// they are.
func payloadURLs(obj map[string]any) []string {
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
			raw = append(raw, bitbucketURLs(x)...)
		}
	}
	return raw
}

// bitbucketURLs returns the URLs of Bitbucket's links.clone[].href and links.html.href.
func bitbucketURLs(repo map[string]any) []string {
	links, ok := repo["links"].(map[string]any)
	if !ok {
		return nil
	}
	var raw []string
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
	return raw
}
