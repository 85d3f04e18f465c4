package ui

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/singleflight"
	"golang.org/x/time/rate"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// InCluster makes the handler serve many users from inside the cluster: each request
// carries a bearer token (an Authorization header, e.g. from an authenticating proxy,
// or the cookie the login page sets), checked with a TokenReview, and every read and
// action is authorized for that user with a SubjectAccessReview before the handler
// does it with its own identity. The handler's rights are never lent to a user.
//
// What a stranger can make it spend is bounded: a token is reviewed at most once per
// CacheTTL when accepted and once per FailureTTL when refused; other reviews are
// limited per client address (AuthRate, AuthBurst); the caches hold at most CacheSize
// entries each; and the /events streams are capped per user and in all.
type InCluster struct {
	// Client creates the TokenReviews and SubjectAccessReviews.
	Client client.Client
	// CacheTTL is how long an accepted token and an authorization are reused (30 s).
	CacheTTL time.Duration
	// FailureTTL is how long a refused token is refused without asking again (10 s).
	FailureTTL time.Duration
	// CacheSize bounds each cache: tokens accepted, tokens refused, authorizations (8192).
	CacheSize int
	// AuthRate and AuthBurst limit the TokenReviews one client address (IPv6: one /64)
	// may cause: AuthRate a second, AuthBurst at once (5 and 20). Past them the request
	// is answered 429 without a review.
	AuthRate  rate.Limit
	AuthBurst int
	// MaxStreamsPerUser and MaxStreams cap the open /events streams (10 and 1000).
	MaxStreamsPerUser, MaxStreams int
	// Now is the clock of the caches and the rate limit; nil is time.Now.
	Now func() time.Time

	once     sync.Once
	users    *ttlCache[authenticationv1.UserInfo]
	refused  *ttlCache[struct{}]
	sars     *ttlCache[bool]
	attempts *addressLimits
	streams  *streamLimits
	reviews  singleflight.Group
}

// Defaults of InCluster's limits.
const (
	defaultCacheTTL     = 30 * time.Second
	defaultFailureTTL   = 10 * time.Second
	defaultCacheSize    = 8192
	defaultAuthRate     = 5
	defaultAuthBurst    = 20
	defaultUserStreams  = 10
	defaultTotalStreams = 1000
	// addressTableSize bounds the table of per-address buckets.
	addressTableSize = 16384
	// reviewTimeout bounds one TokenReview, which concurrent requests may share.
	reviewTimeout = 10 * time.Second
)

// init fills in the defaults and makes the caches, once.
func (ic *InCluster) init() {
	ic.once.Do(func() {
		ic.CacheTTL = orDefault(ic.CacheTTL, defaultCacheTTL)
		ic.FailureTTL = orDefault(ic.FailureTTL, defaultFailureTTL)
		ic.CacheSize = orDefault(ic.CacheSize, defaultCacheSize)
		ic.AuthRate = orDefault(ic.AuthRate, defaultAuthRate)
		ic.AuthBurst = orDefault(ic.AuthBurst, defaultAuthBurst)
		ic.MaxStreamsPerUser = orDefault(ic.MaxStreamsPerUser, defaultUserStreams)
		ic.MaxStreams = orDefault(ic.MaxStreams, defaultTotalStreams)
		if ic.Now == nil {
			ic.Now = time.Now
		}
		ic.users = newTTLCache[authenticationv1.UserInfo](ic.CacheSize)
		ic.refused = newTTLCache[struct{}](ic.CacheSize)
		ic.sars = newTTLCache[bool](ic.CacheSize)
		ic.attempts = newAddressLimits(addressTableSize, ic.AuthRate, ic.AuthBurst)
		ic.streams = &streamLimits{open: map[string]int{}, perUser: ic.MaxStreamsPerUser, most: ic.MaxStreams}
	})
}

func orDefault[T int | float64 | time.Duration | rate.Limit](v, def T) T {
	if v <= 0 {
		return def
	}
	return v
}

// userKey carries the authenticated user in a request's context.
type userKey struct{}

// errUnauthenticated is a request without a valid token.
var errUnauthenticated = errors.New("unauthenticated")

// tooManyAttemptsError is a token that would need a review its client address may not
// have now.
type tooManyAttemptsError struct {
	retry time.Duration
}

func (e *tooManyAttemptsError) Error() string {
	return fmt.Sprintf("too many sign-in attempts from your address: try again in %d s", retrySeconds(e.retry))
}

// retrySeconds is d rounded up to whole seconds, at least 1, for Retry-After.
func retrySeconds(d time.Duration) int {
	return max(1, int((d+time.Second-1)/time.Second))
}

// authenticate reviews token for a request from addr (see clientAddress). A recent
// answer is reused, whether it accepted the token or refused it; the key of both caches
// is the token's SHA-256, never the token. Other reviews are rate limited per address,
// and concurrent requests with one token share one review.
func (ic *InCluster) authenticate(ctx context.Context, token, addr string) (authenticationv1.UserInfo, error) {
	ic.init()
	now := ic.Now()
	key := sha256.Sum256([]byte(token))
	if u, ok := ic.users.get(key, now); ok {
		return u, nil
	}
	if _, ok := ic.refused.get(key, now); ok {
		return authenticationv1.UserInfo{}, errUnauthenticated
	}
	if wait, ok := ic.attempts.take(addr, now); !ok {
		return authenticationv1.UserInfo{}, &tooManyAttemptsError{retry: wait}
	}
	v, err, _ := ic.reviews.Do(string(key[:]), func() (any, error) {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), reviewTimeout)
		defer cancel()
		return ic.review(ctx, token, key)
	})
	if err != nil {
		return authenticationv1.UserInfo{}, err
	}
	return v.(authenticationv1.UserInfo), nil
}

// review asks the API server about token and caches its verdict (not its failures to
// give one).
func (ic *InCluster) review(ctx context.Context, token string, key [32]byte) (authenticationv1.UserInfo, error) {
	review := &authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{Token: token}}
	if err := ic.Client.Create(ctx, review); err != nil {
		return authenticationv1.UserInfo{}, fmt.Errorf("reviewing the token: %w", err)
	}
	now := ic.Now()
	if !review.Status.Authenticated {
		ic.refused.add(key, struct{}{}, now.Add(ic.FailureTTL))
		return authenticationv1.UserInfo{}, errUnauthenticated
	}
	ic.users.add(key, review.Status.User, now.Add(ic.CacheTTL))
	return review.Status.User, nil
}

// allowed asks the API server whether user may do attrs, reusing a recent answer.
func (ic *InCluster) allowed(ctx context.Context, user authenticationv1.UserInfo, attrs authorizationv1.ResourceAttributes) (bool, error) {
	ic.init()
	key := sha256.Sum256(fmt.Appendf(nil, "%q %q %q %q %q %q %q %q %q %q", user.Username, user.UID, user.Groups, user.Extra,
		attrs.Verb, attrs.Group, attrs.Resource, attrs.Subresource, attrs.Namespace, attrs.Name))
	if ok, found := ic.sars.get(key, ic.Now()); found {
		return ok, nil
	}
	extra := map[string]authorizationv1.ExtraValue{}
	for k, v := range user.Extra {
		extra[k] = authorizationv1.ExtraValue(v)
	}
	sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User: user.Username, UID: user.UID, Groups: user.Groups, Extra: extra, ResourceAttributes: &attrs}}
	if err := ic.Client.Create(ctx, sar); err != nil {
		return false, fmt.Errorf("asking whether %s may %s %s: %w", user.Username, attrs.Verb, attrs.Resource, err)
	}
	ic.sars.add(key, sar.Status.Allowed, ic.Now().Add(ic.CacheTTL))
	return sar.Status.Allowed, nil
}

// tokenCookieInCluster holds the bearer token the login page received.
const tokenCookieInCluster = "converge-ui-token"

// bearer is the request's token: the Authorization header, else the login cookie.
func bearer(r *http.Request) string {
	if h := r.Header.Get("Authorization"); strings.HasPrefix(h, "Bearer ") {
		return strings.TrimSpace(strings.TrimPrefix(h, "Bearer "))
	}
	if c, err := r.Cookie(tokenCookieInCluster); err == nil {
		return c.Value
	}
	return ""
}

// authenticateRequest puts the request's user in its context; without one it shows
// the login page (or 401 to a script), and 429 when its address has made too many
// attempts.
func (s *Server) authenticateRequest(w http.ResponseWriter, r *http.Request) (*http.Request, bool) {
	if r.URL.Path == "/login" || strings.HasPrefix(r.URL.Path, "/static/") {
		return r, true
	}
	token := bearer(r)
	if token == "" {
		s.loginPage(w, r, http.StatusUnauthorized, "")
		return nil, false
	}
	user, err := s.opts.InCluster.authenticate(r.Context(), token, clientAddress(r.RemoteAddr))
	if err != nil {
		s.refuseLogin(w, r, err)
		return nil, false
	}
	return r.WithContext(context.WithValue(r.Context(), userKey{}, user)), true
}

// refuseLogin shows the login page with why the token was not taken.
func (s *Server) refuseLogin(w http.ResponseWriter, r *http.Request, err error) {
	var tooMany *tooManyAttemptsError
	switch {
	case errors.As(err, &tooMany):
		w.Header().Set("Retry-After", strconv.Itoa(retrySeconds(tooMany.retry)))
		s.loginPage(w, r, http.StatusTooManyRequests, err.Error())
	case errors.Is(err, errUnauthenticated):
		s.loginPage(w, r, http.StatusUnauthorized, "the token was not accepted")
	default:
		s.loginPage(w, r, http.StatusUnauthorized, err.Error())
	}
}

func (s *Server) loginPage(w http.ResponseWriter, r *http.Request, code int, msg string) {
	s.renderStatus(w, r, code, "login", map[string]any{"Message": msg})
}

// serveLogin takes a token from the login form and keeps it in a strict cookie.
func (s *Server) serveLogin(w http.ResponseWriter, r *http.Request) {
	token := strings.TrimSpace(r.FormValue("token"))
	if token == "" {
		s.refuseLogin(w, r, errUnauthenticated)
		return
	}
	if _, err := s.opts.InCluster.authenticate(r.Context(), token, clientAddress(r.RemoteAddr)); err != nil {
		s.refuseLogin(w, r, err)
		return
	}
	http.SetCookie(w, &http.Cookie{Name: tokenCookieInCluster, Value: token, Path: "/", HttpOnly: true,
		Secure: r.TLS != nil, SameSite: http.SameSiteStrictMode})
	http.Redirect(w, r, "/", http.StatusSeeOther)
}

// can says whether the request's user may do verb on resource (of converge.dev for
// synctargets, of the core group for events and secrets) in ns; always true outside
// in-cluster mode, where the API server judges the user's own requests.
func (s *Server) can(ctx context.Context, verb, group, resource, ns, name string) (bool, error) {
	ic := s.opts.InCluster
	if ic == nil {
		return true, nil
	}
	user, ok := ctx.Value(userKey{}).(authenticationv1.UserInfo)
	if !ok {
		return false, errUnauthenticated
	}
	resource, sub, _ := strings.Cut(resource, "/") // "pods/log": a subresource
	return ic.allowed(ctx, user, authorizationv1.ResourceAttributes{Verb: verb, Group: group, Resource: resource,
		Subresource: sub, Namespace: ns, Name: name})
}

// requestUser is the name of the request's user in in-cluster mode, else "".
func requestUser(ctx context.Context) string {
	if u, ok := ctx.Value(userKey{}).(authenticationv1.UserInfo); ok {
		return u.Username
	}
	return ""
}
