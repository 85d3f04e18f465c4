package gittest

import (
	"crypto/subtle"
	"encoding/pem"
	"io"
	"log"
	"net/http"
	"net/http/cgi"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

// HTTPOptions configures an HTTPServer.
type HTTPOptions struct {
	// Username and Password, when Username is set, are required as HTTP basic auth.
	Username, Password string
	// BearerToken, when set, is required as "Authorization: Bearer <token>". When both basic auth
	// and a bearer token are configured, either is accepted.
	BearerToken string
	// TLS serves HTTPS with a self-signed certificate for 127.0.0.1; see CACert.
	TLS bool
}

// RequestKind selects requests of the smart HTTP protocol.
type RequestKind int

const (
	// AllRequests selects every request.
	AllRequests RequestKind = iota
	// InfoRefs selects ref advertisements: GET …/info/refs (what ls-remote costs).
	InfoRefs
	// UploadPack selects fetches: POST …/git-upload-pack.
	UploadPack
)

// HTTPStats counts the requests an HTTPServer received.
type HTTPStats struct {
	// InfoRefs counts authorized GET …/info/refs?service=git-upload-pack requests.
	InfoRefs int64
	// UploadPack counts authorized POST …/git-upload-pack requests: fetches.
	UploadPack int64
	// ReceivePack counts authorized POST …/git-receive-pack requests: pushes.
	ReceivePack int64
	// Unauthorized counts requests refused with 401.
	Unauthorized int64
	// MaxInFlight is the largest number of requests that were being served at once.
	MaxInFlight int64
}

// HTTPServer serves every repository under its root over smart HTTP with the system
// `git http-backend`, on 127.0.0.1.
type HTTPServer struct {
	// URL is the base URL, e.g. http://127.0.0.1:41234, without a trailing slash.
	URL string

	opts    HTTPOptions
	srv     *httptest.Server
	backend http.Handler
	stop    chan struct{}

	infoRefs, uploadPack, receivePack, unauthorized atomic.Int64
	inFlight, maxInFlight                           atomic.Int64

	mu    sync.Mutex
	holds []*hold
}

type hold struct {
	kind RequestKind
	ch   chan struct{}
	once sync.Once
}

// NewHTTPServer starts a smart HTTP git server for the repositories under root. It is stopped
// when the test ends.
func NewHTTPServer(t testing.TB, root string, opts HTTPOptions) *HTTPServer {
	t.Helper()
	gitPath, err := exec.LookPath("git")
	if err != nil {
		t.Fatalf("gittest: %v", err)
	}
	s := &HTTPServer{
		opts: opts,
		stop: make(chan struct{}),
		backend: &cgi.Handler{
			Path: gitPath,
			Args: []string{"http-backend"},
			Dir:  root,
			Env: []string{
				"GIT_PROJECT_ROOT=" + root,
				"GIT_HTTP_EXPORT_ALL=1",
				"GIT_CONFIG_NOSYSTEM=1",
				"GIT_CONFIG_GLOBAL=" + os.DevNull,
				"PATH=" + os.Getenv("PATH"),
			},
			Stderr: io.Discard, // "Not a git repository" and the like: tests look at responses
		},
	}
	s.srv = httptest.NewUnstartedServer(http.HandlerFunc(s.serve))
	s.srv.Config.ErrorLog = log.New(io.Discard, "", 0) // TLS handshake refusals are expected in tests
	if opts.TLS {
		s.srv.StartTLS()
	} else {
		s.srv.Start()
	}
	s.URL = s.srv.URL
	t.Cleanup(func() {
		close(s.stop)
		s.srv.CloseClientConnections()
		s.srv.Close()
	})
	return s
}

// RepoURL is the clone URL of r on this server.
func (s *HTTPServer) RepoURL(r *Repo) string {
	return s.URL + "/" + r.Name
}

// CACert returns the PEM of the certificate the server presents when started with TLS: what a
// client has to trust (ca.crt).
func (s *HTTPServer) CACert() []byte {
	c := s.srv.Certificate()
	if c == nil {
		return nil
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})
}

// Stats returns the request counts since the server started or since ResetStats.
func (s *HTTPServer) Stats() HTTPStats {
	return HTTPStats{
		InfoRefs:     s.infoRefs.Load(),
		UploadPack:   s.uploadPack.Load(),
		ReceivePack:  s.receivePack.Load(),
		Unauthorized: s.unauthorized.Load(),
		MaxInFlight:  s.maxInFlight.Load(),
	}
}

// ResetStats sets every count back to zero.
func (s *HTTPServer) ResetStats() {
	s.infoRefs.Store(0)
	s.uploadPack.Store(0)
	s.receivePack.Store(0)
	s.unauthorized.Store(0)
	s.maxInFlight.Store(s.inFlight.Load())
}

// InFlight is the number of requests being served right now, held ones included.
func (s *HTTPServer) InFlight() int64 { return s.inFlight.Load() }

// Hold makes requests of the given kind that arrive from now on wait, without an answer, until
// release is called, the client gives up, or the server stops. A hold never released is a server
// that stalls.
func (s *HTTPServer) Hold(kind RequestKind) (release func()) {
	h := &hold{kind: kind, ch: make(chan struct{})}
	s.mu.Lock()
	s.holds = append(s.holds, h)
	s.mu.Unlock()
	return func() {
		h.once.Do(func() { close(h.ch) })
		s.mu.Lock()
		defer s.mu.Unlock()
		for i, x := range s.holds {
			if x == h {
				s.holds = append(s.holds[:i], s.holds[i+1:]...)
				break
			}
		}
	}
}

func kindOf(r *http.Request) RequestKind {
	switch {
	case r.Method == http.MethodGet && strings.HasSuffix(r.URL.Path, "/info/refs"):
		return InfoRefs
	case r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/git-upload-pack"):
		return UploadPack
	}
	return AllRequests
}

func (s *HTTPServer) serve(w http.ResponseWriter, r *http.Request) {
	n := s.inFlight.Add(1)
	defer s.inFlight.Add(-1)
	for {
		m := s.maxInFlight.Load()
		if n <= m || s.maxInFlight.CompareAndSwap(m, n) {
			break
		}
	}

	if !s.authorized(r) {
		s.unauthorized.Add(1)
		w.Header().Set("WWW-Authenticate", `Basic realm="gittest"`)
		http.Error(w, "authentication required", http.StatusUnauthorized)
		return
	}

	kind := kindOf(r)
	switch {
	case kind == InfoRefs && r.URL.Query().Get("service") == "git-upload-pack":
		s.infoRefs.Add(1)
	case kind == UploadPack:
		s.uploadPack.Add(1)
	case r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/git-receive-pack"):
		s.receivePack.Add(1)
	}

	s.mu.Lock()
	var waits []chan struct{}
	for _, h := range s.holds {
		if h.kind == AllRequests || h.kind == kind {
			waits = append(waits, h.ch)
		}
	}
	s.mu.Unlock()
	for _, ch := range waits {
		select {
		case <-ch:
		case <-r.Context().Done():
			return
		case <-s.stop:
			return
		}
	}
	s.backend.ServeHTTP(w, r)
}

func (s *HTTPServer) authorized(r *http.Request) bool {
	if s.opts.Username == "" && s.opts.BearerToken == "" {
		return true
	}
	if s.opts.Username != "" {
		if u, p, ok := r.BasicAuth(); ok &&
			subtle.ConstantTimeCompare([]byte(u), []byte(s.opts.Username)) == 1 &&
			subtle.ConstantTimeCompare([]byte(p), []byte(s.opts.Password)) == 1 {
			return true
		}
	}
	if s.opts.BearerToken != "" {
		if tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok &&
			subtle.ConstantTimeCompare([]byte(tok), []byte(s.opts.BearerToken)) == 1 {
			return true
		}
	}
	return false
}
