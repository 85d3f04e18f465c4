// Package ui is converge's web UI: an http.Handler that shows every SyncTarget, its
// history, inventory tree with live health, events and pending diff, and acts on it
// (reconcile, suspend, resume, roll back) — reading and writing with the identity it
// is built with, the user's own, never more.
//
// Pages are html/template rendered on the server; a little JavaScript (embedded, like
// the style sheet: no CDN, no fonts, works air-gapped) follows /events, a stream of
// server-sent events fed by one shared informer per kind, and swaps the fragments that
// changed. The Content-Security-Policy allows nothing but the handler's own files.
package ui

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
)

// Options configure a Server.
type Options struct {
	// Config is the identity every read and action uses: the user's.
	Config *rest.Config
	// Namespace limits the UI to one namespace; empty shows every namespace.
	Namespace string
	// AccessToken, when set, must be presented once as ?token= (the URL converge ui
	// prints); the browser then keeps it in a strict cookie. Other local users of the
	// machine cannot use the UI (and the user's credentials) without it.
	AccessToken string
	// TokenUsed, when set, is called each time a URL carrying AccessToken is accepted.
	TokenUsed func()
	// AllowedHosts, when set, are the only Host headers served (against DNS rebinding).
	AllowedHosts []string
	// Now is the clock of the ages shown; nil is time.Now.
	Now func() time.Time
	// InCluster, when set, serves many users, each authenticated by a bearer token and
	// authorized per request (see InCluster); Config is then the server's own identity.
	InCluster *InCluster
}

// Server is the UI's http.Handler.
type Server struct {
	opts   Options
	store  Store
	client client.Client
	hub    *hub
	mux    *http.ServeMux
	pages  *pages

	whoOnce sync.Once
	who     string

	// logs counts the Pod logs each user streams.
	logs logStreams
	// clusters keeps whether each cluster answered, for the clusters page.
	clusters probes
}

// New starts the shared watches with opts.Config and returns the handler; they stop
// with ctx.
func New(ctx context.Context, opts Options) (*Server, error) {
	c, err := client.New(opts.Config, client.Options{Scheme: scheme()})
	if err != nil {
		return nil, fmt.Errorf("connecting to the cluster: %w", err)
	}
	h := newHub()
	s := newServer(opts, nil, c, h)
	if err := s.checkAccess(ctx); err != nil {
		return nil, err
	}
	if s.store, err = newInformerStore(ctx, opts.Config, opts.Namespace, h); err != nil {
		return nil, err
	}
	return s, nil
}

// checkAccess lists what the watches will list, once: a user who may not gets a clear
// error now rather than watches that retry for ever.
func (s *Server) checkAccess(ctx context.Context) error {
	where := "every namespace (-n limits the UI to one)"
	if s.opts.Namespace != "" {
		where = "namespace " + s.opts.Namespace
	}
	// SyncTargets first: the error names what matters most when both are refused.
	for _, l := range []struct {
		kind string
		list client.ObjectList
	}{{"SyncTargets", &convergev1.SyncTargetList{}}, {"Events", &corev1.EventList{}}} {
		if err := s.client.List(ctx, l.list, client.InNamespace(s.opts.Namespace), client.Limit(1)); err != nil {
			return fmt.Errorf("listing %s in %s: %s", l.kind, where, s.explain(err))
		}
	}
	return nil
}

// NewWithStore returns a handler over store (tests and benchmarks); c makes the
// actions, the inventory reads and the diff and may be nil when those are not used.
func NewWithStore(opts Options, store Store, c client.Client) *Server {
	return newServer(opts, store, c, newHub())
}

func newServer(opts Options, store Store, c client.Client, h *hub) *Server {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	s := &Server{opts: opts, store: store, client: c, hub: h, mux: http.NewServeMux(), pages: mustParsePages()}
	s.routes()
	return s
}

func (s *Server) routes() {
	s.mux.Handle("GET /static/", http.StripPrefix("/static/", staticHandler()))
	s.mux.HandleFunc("GET /{$}", s.serveOverview)
	s.mux.HandleFunc("GET /fragments/overview", s.serveOverviewFragment)
	s.mux.HandleFunc("GET /fragments/row/{ns}/{name}", s.serveRow)
	s.mux.HandleFunc("GET /targets/{ns}/{name}", s.serveTarget)
	s.mux.HandleFunc("GET /targets/{ns}/{name}/live", s.serveTargetLive)
	s.mux.HandleFunc("GET /targets/{ns}/{name}/diff", s.serveDiff)
	s.mux.HandleFunc("GET /targets/{ns}/{name}/compare", s.serveCompare)
	s.mux.HandleFunc("GET /targets/{ns}/{name}/versions", s.serveVersions)
	s.mux.HandleFunc("GET /targets/{ns}/{name}/values", s.serveValues)
	s.mux.HandleFunc("GET /targets/{ns}/{name}/graph", s.serveGraph)
	s.mux.HandleFunc("POST /targets/{ns}/{name}/{action}", s.serveAction)
	s.mux.HandleFunc("GET /sets/{ns}/{name}", s.serveSet)
	s.mux.HandleFunc("GET /clusters", s.serveClusters)
	s.mux.HandleFunc("GET /targets/{ns}/{name}/objects/{id}", s.serveObject)
	s.mux.HandleFunc("GET /targets/{ns}/{name}/objects/{id}/logs", s.serveLogs)
	s.mux.HandleFunc("GET /targets/{ns}/{name}/objects/{id}/owned", s.serveOwned)
	s.mux.HandleFunc("GET /targets/{ns}/{name}/objects/{id}/diff", s.serveObjectDiff)
	s.mux.HandleFunc("GET /events", s.serveEvents)
	if s.opts.InCluster != nil {
		s.mux.HandleFunc("GET /login", func(w http.ResponseWriter, r *http.Request) { s.loginPage(w, r, http.StatusOK, "") })
		s.mux.HandleFunc("POST /login", s.serveLogin)
	}
}

// ServeHTTP checks the host and the access token, sets the security headers and serves.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Security-Policy", "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "+
		"connect-src 'self'; frame-ancestors 'none'; form-action 'self'; base-uri 'none'; object-src 'none'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Cross-Origin-Opener-Policy", "same-origin")
	h.Set("Cross-Origin-Resource-Policy", "same-origin")
	if !s.hostAllowed(r.Host) {
		http.Error(w, "unknown host", http.StatusMisdirectedRequest)
		return
	}
	if !s.authenticated(w, r) {
		return
	}
	if s.opts.InCluster != nil {
		var ok bool
		if r, ok = s.authenticateRequest(w, r); !ok {
			return
		}
	}
	s.mux.ServeHTTP(w, r)
}

func (s *Server) hostAllowed(host string) bool {
	if len(s.opts.AllowedHosts) == 0 {
		return true
	}
	for _, h := range s.opts.AllowedHosts {
		if strings.EqualFold(h, host) {
			return true
		}
	}
	return false
}

// tokenCookie holds the access token in the browser.
const tokenCookie = "converge-ui"

// authenticated checks the access token: a ?token= that matches sets the cookie and
// sends the browser on to the same URL without it; otherwise the cookie must match.
func (s *Server) authenticated(w http.ResponseWriter, r *http.Request) bool {
	want := s.opts.AccessToken
	if want == "" {
		return true
	}
	if t := r.URL.Query().Get("token"); t != "" && r.Method == http.MethodGet && equal(t, want) {
		s.admit(w, r)
		return false
	}
	if c, err := r.Cookie(tokenCookie); err == nil && equal(c.Value, want) {
		return true
	}
	http.Error(w, "open the URL that converge ui printed (it carries the access token)", http.StatusUnauthorized)
	return false
}

// admit sets the access token's cookie and sends the browser on to the request's URL
// without the token.
func (s *Server) admit(w http.ResponseWriter, r *http.Request) {
	// Host-only (no Domain): the browser sends it back to this host name only. Not
	// Secure: the UI is served over plain HTTP on a loopback address.
	http.SetCookie(w, &http.Cookie{Name: tokenCookie, Value: s.opts.AccessToken, Path: "/", HttpOnly: true, SameSite: http.SameSiteStrictMode})
	if s.opts.TokenUsed != nil {
		s.opts.TokenUsed()
	}
	u := url.URL{Path: r.URL.Path, RawQuery: r.URL.RawQuery}
	if strings.HasPrefix(u.Path, "//") {
		u.Path = "/" // not another host's
	}
	q := u.Query()
	q.Del("token")
	u.RawQuery = q.Encode()
	if r.Header.Get("Sec-Fetch-Site") == "" {
		// Not a browser: a redirect.
		http.Redirect(w, r, u.RequestURI(), http.StatusSeeOther)
		return
	}
	// A browser goes on from a page of this origin: a navigation the page starts carries
	// the SameSite=Strict cookie even when the browser came from another site (the page
	// converge ui --open writes is a file), where a redirect would not.
	s.renderStatus(w, r, http.StatusOK, "enter", u.RequestURI())
}

func equal(a, b string) bool { return subtle.ConstantTimeCompare([]byte(a), []byte(b)) == 1 }

// NewAccessToken is a random token for Options.AccessToken.
func NewAccessToken() (string, error) {
	b := make([]byte, 24)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return hex.EncodeToString(b), nil
}

// Subscribers counts the open /events streams (all fed by the same watches).
func (s *Server) Subscribers() int { return s.hub.subscribers() }

func scheme() *runtime.Scheme {
	s := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(s)
	_ = convergev1.AddToScheme(s)
	return s
}
