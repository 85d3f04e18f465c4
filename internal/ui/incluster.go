package ui

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// InCluster makes the handler serve many users from inside the cluster: each request
// carries a bearer token (an Authorization header, e.g. from an authenticating proxy,
// or the cookie the login page sets), checked with a TokenReview, and every read and
// action is authorized for that user with a SubjectAccessReview before the handler
// does it with its own identity. The handler's rights are never lent to a user.
type InCluster struct {
	// Client creates the TokenReviews and SubjectAccessReviews.
	Client client.Client
	// CacheTTL is how long an answer is reused (default 30 s).
	CacheTTL time.Duration

	mu    sync.Mutex
	users map[[32]byte]cached[authenticationv1.UserInfo]
	sars  map[string]cached[bool]
}

type cached[T any] struct {
	value T
	until time.Time
}

// userKey carries the authenticated user in a request's context.
type userKey struct{}

// errUnauthenticated is a request without a valid token.
var errUnauthenticated = errors.New("unauthenticated")

func (ic *InCluster) ttl() time.Duration {
	if ic.CacheTTL <= 0 {
		return 30 * time.Second
	}
	return ic.CacheTTL
}

// authenticate reviews token, reusing a recent answer.
func (ic *InCluster) authenticate(ctx context.Context, token string) (authenticationv1.UserInfo, error) {
	key := sha256.Sum256([]byte(token))
	ic.mu.Lock()
	if c, ok := ic.users[key]; ok && time.Now().Before(c.until) {
		ic.mu.Unlock()
		return c.value, nil
	}
	ic.mu.Unlock()
	review := &authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{Token: token}}
	if err := ic.Client.Create(ctx, review); err != nil {
		return authenticationv1.UserInfo{}, fmt.Errorf("reviewing the token: %w", err)
	}
	if !review.Status.Authenticated {
		return authenticationv1.UserInfo{}, errUnauthenticated
	}
	ic.mu.Lock()
	defer ic.mu.Unlock()
	if ic.users == nil {
		ic.users = map[[32]byte]cached[authenticationv1.UserInfo]{}
	}
	ic.users[key] = cached[authenticationv1.UserInfo]{review.Status.User, time.Now().Add(ic.ttl())}
	return review.Status.User, nil
}

// allowed asks the API server whether user may do attrs, reusing a recent answer.
func (ic *InCluster) allowed(ctx context.Context, user authenticationv1.UserInfo, attrs authorizationv1.ResourceAttributes) (bool, error) {
	key := fmt.Sprintf("%s|%s|%s|%s|%s|%s|%s|%s", user.Username, user.UID, strings.Join(user.Groups, ","),
		attrs.Verb, attrs.Group, attrs.Resource, attrs.Namespace, attrs.Name)
	ic.mu.Lock()
	if c, ok := ic.sars[key]; ok && time.Now().Before(c.until) {
		ic.mu.Unlock()
		return c.value, nil
	}
	ic.mu.Unlock()
	extra := map[string]authorizationv1.ExtraValue{}
	for k, v := range user.Extra {
		extra[k] = authorizationv1.ExtraValue(v)
	}
	sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User: user.Username, UID: user.UID, Groups: user.Groups, Extra: extra, ResourceAttributes: &attrs}}
	if err := ic.Client.Create(ctx, sar); err != nil {
		return false, fmt.Errorf("asking whether %s may %s %s: %w", user.Username, attrs.Verb, attrs.Resource, err)
	}
	ic.mu.Lock()
	defer ic.mu.Unlock()
	if ic.sars == nil {
		ic.sars = map[string]cached[bool]{}
	}
	ic.sars[key] = cached[bool]{sar.Status.Allowed, time.Now().Add(ic.ttl())}
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
// the login page (or 401 to a script).
func (s *Server) authenticateRequest(w http.ResponseWriter, r *http.Request) (*http.Request, bool) {
	ic := s.opts.InCluster
	if r.URL.Path == "/login" || strings.HasPrefix(r.URL.Path, "/static/") {
		return r, true
	}
	token := bearer(r)
	if token == "" {
		s.loginPage(w, r, http.StatusUnauthorized, "")
		return nil, false
	}
	user, err := ic.authenticate(r.Context(), token)
	if err != nil {
		msg := "the token was not accepted"
		if !errors.Is(err, errUnauthenticated) {
			msg = err.Error()
		}
		s.loginPage(w, r, http.StatusUnauthorized, msg)
		return nil, false
	}
	return r.WithContext(context.WithValue(r.Context(), userKey{}, user)), true
}

func (s *Server) loginPage(w http.ResponseWriter, r *http.Request, code int, msg string) {
	s.renderStatus(w, r, code, "login", map[string]any{"Message": msg})
}

// serveLogin takes a token from the login form and keeps it in a strict cookie.
func (s *Server) serveLogin(w http.ResponseWriter, r *http.Request) {
	token := strings.TrimSpace(r.FormValue("token"))
	if _, err := s.opts.InCluster.authenticate(r.Context(), token); token == "" || err != nil {
		s.loginPage(w, r, http.StatusUnauthorized, "the token was not accepted")
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
	return ic.allowed(ctx, user, authorizationv1.ResourceAttributes{Verb: verb, Group: group, Resource: resource, Namespace: ns, Name: name})
}

// requestUser is the name of the request's user in in-cluster mode, else "".
func requestUser(ctx context.Context) string {
	if u, ok := ctx.Value(userKey{}).(authenticationv1.UserInfo); ok {
		return u.Username
	}
	return ""
}
