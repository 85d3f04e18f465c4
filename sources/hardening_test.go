package sources

// Hostile servers, moved refs and hostile webhook clients. Each test says what an
// attacker controls and what must hold anyway.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	mathrand "math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/converge-gitops/converge/internal/gittest"
	"github.com/converge-gitops/converge/sources/poll"
)

// urlSecret is the password put in repository URLs; it must never come back in an error.
const urlSecret = "url-token-7d1c0ffee"

// withURLCredentials puts user:urlSecret into an http(s) URL.
func withURLCredentials(u string) string {
	return strings.Replace(u, "://", "://converge:"+urlSecret+"@", 1)
}

// TestHardeningTagMoved: a tag moved (lightweight or annotated, as `git tag -f` and a forced
// push do) is followed to its new commit, the old checkout stays as it was, and a deleted tag
// is a clear ErrRefNotFound.
func TestHardeningTagMoved(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	f := newFixture(t)
	ctx := ctxTimeout(t, 30*time.Second)
	c1 := f.repo.Commit(t, "main", map[string]string{"app.yaml": "v: 1\n"})
	c2 := f.repo.Commit(t, "main", map[string]string{"app.yaml": "v: 2\n"})
	f.repo.Tag(t, "v1", c1)
	f.repo.AnnotatedTag(t, "v2", c1)

	for _, tag := range []string{"v1", "v2"} {
		src := Source{URL: f.src.URL, Ref: Ref{Tag: tag}}
		rev, err := Resolve(ctx, src)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(rev).To(Equal(Revision{Ref: tag, Commit: c1}))
		dir1, err := f.cache.Checkout(ctx, src, rev)
		g.Expect(err).NotTo(HaveOccurred())

		if tag == "v1" {
			f.repo.Tag(t, tag, c2)
		} else {
			f.repo.AnnotatedTag(t, tag, c2)
		}
		moved, err := Resolve(ctx, src)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(moved).To(Equal(Revision{Ref: tag, Commit: c2}), "the moved tag is followed")
		g.Expect(moved.String()).NotTo(Equal(rev.String()), "a moved tag is a new revision, not the same one")
		dir2, err := f.cache.Checkout(ctx, src, moved)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(readTree(t, dir2)).To(Equal(map[string]string{"app.yaml": "v: 2\n"}))
		g.Expect(readTree(t, dir1)).To(Equal(map[string]string{"app.yaml": "v: 1\n"}), "the old checkout is untouched")

		f.repo.DeleteTag(t, tag)
		_, err = Resolve(ctx, src)
		g.Expect(err).To(MatchError(ErrRefNotFound))
		g.Expect(err.Error()).To(ContainSubstring(fmt.Sprintf("tag %q does not exist", tag)))
	}
}

// garbageCase is a server that does not speak git properly.
type garbageCase struct {
	name string
	// handler answers everything, or only upload-pack when proxy is set.
	handler http.HandlerFunc
	// proxy sends the ref advertisement to a real server, so that the garbage comes with
	// the fetch (Checkout) instead of the ref listing (Resolve).
	proxy bool
}

func randomBytes(n int) []byte {
	rng := mathrand.New(mathrand.NewPCG(7, uint64(n)))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(rng.UintN(256))
	}
	return b
}

// TestHardeningGarbageServer: servers answering random bytes, HTML, nothing, truncated
// pkt-lines, a redirect loop, a broken status line or a truncated pack are each a clear
// error of one kind, with the credentials of the URL redacted and nothing cached. None
// makes the process panic.
func TestHardeningGarbageServer(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	repo := gittest.NewRepo(t, root, "org/app")
	commit := repo.Commit(t, "main", map[string]string{"app.yaml": "v: 1\n", "blob.bin": string(randomBytes(64 << 10))})
	real := gittest.NewHTTPServer(t, root, gittest.HTTPOptions{})

	// upstream fetches what the real server answers to r, for the proxied cases.
	upstream := func(r *http.Request) (*http.Response, []byte) {
		req, err := http.NewRequestWithContext(r.Context(), r.Method, real.URL+r.URL.RequestURI(), r.Body)
		if err != nil {
			panic(err)
		}
		req.Header = r.Header.Clone()
		req.Header.Del("Authorization")
		resp, err := http.DefaultTransport.RoundTrip(req)
		if err != nil {
			panic(err)
		}
		defer func() { _ = resp.Body.Close() }()
		body, _ := io.ReadAll(resp.Body)
		return resp, body
	}
	advertisement := "001e# service=git-upload-pack\n0000"
	for _, tc := range []garbageCase{
		{name: "random bytes as the ref advertisement", handler: func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "application/x-git-upload-pack-advertisement")
			_, _ = w.Write(randomBytes(64 << 10))
		}},
		{name: "an html login page", handler: func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "text/html")
			_, _ = io.WriteString(w, "<!doctype html><html><body><form>Sign in to continue</form></body></html>\n")
		}},
		{name: "an empty answer", handler: func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "application/x-git-upload-pack-advertisement")
		}},
		{name: "a pkt-line longer than what follows", handler: func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "application/x-git-upload-pack-advertisement")
			_, _ = io.WriteString(w, advertisement+"0fff"+strings.Repeat("a", 40))
		}},
		{name: "a ref line with a bad hash", handler: func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "application/x-git-upload-pack-advertisement")
			line := "zzzz" + strings.Repeat("z", 36) + " refs/heads/main\x00multi_ack\n"
			_, _ = fmt.Fprintf(w, "%s%04x%s0000", advertisement, len(line)+4, line)
		}},
		{name: "a server error with an html page", handler: func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "text/html")
			w.WriteHeader(http.StatusInternalServerError)
			_, _ = io.WriteString(w, "<html><body><h1>500 Internal Server Error</h1></body></html>")
		}},
		{name: "a redirect loop", handler: func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, r.URL.RequestURI(), http.StatusFound)
		}},
		{name: "random bytes as the pack", proxy: true, handler: func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "application/x-git-upload-pack-result")
			_, _ = w.Write(randomBytes(256 << 10))
		}},
		{name: "a pack cut in half", proxy: true, handler: func(w http.ResponseWriter, r *http.Request) {
			resp, body := upstream(r)
			w.Header().Set("Content-Type", resp.Header.Get("Content-Type"))
			_, _ = w.Write(body[:len(body)/2])
		}},
		{name: "a pack with its bytes flipped", proxy: true, handler: func(w http.ResponseWriter, r *http.Request) {
			resp, body := upstream(r)
			w.Header().Set("Content-Type", resp.Header.Get("Content-Type"))
			for i := len(body) / 3; i < len(body); i += 97 {
				body[i] ^= 0x5a
			}
			_, _ = w.Write(body)
		}},
		{name: "NAK and nothing else", proxy: true, handler: func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "application/x-git-upload-pack-result")
			_, _ = io.WriteString(w, "0008NAK\n")
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if tc.proxy && !strings.HasSuffix(r.URL.Path, "/git-upload-pack") {
					resp, body := upstream(r)
					w.Header().Set("Content-Type", resp.Header.Get("Content-Type"))
					w.WriteHeader(resp.StatusCode)
					_, _ = w.Write(body)
					return
				}
				tc.handler(w, r)
			}))
			t.Cleanup(srv.Close)
			src := Source{URL: withURLCredentials(srv.URL + "/org/app"), Ref: Ref{Branch: "main"}}
			cache := newTestCache(t, CacheOptions{})
			ctx := ctxTimeout(t, 20*time.Second)

			var err error
			if tc.proxy {
				rev, rerr := Resolve(ctx, src)
				g.Expect(rerr).NotTo(HaveOccurred(), "the ref listing is real")
				g.Expect(rev.Commit).To(Equal(commit))
				_, err = cache.Checkout(ctx, src, rev)
				_, cached := cache.Path(src, rev)
				g.Expect(cached).To(BeFalse(), "nothing is cached from a broken fetch")
				g.Expect(listDir(cache.tmp)).To(BeEmpty(), "nor left half-written")
			} else {
				_, err = Resolve(ctx, src)
			}
			g.Expect(err).To(HaveOccurred())
			t.Log(err)
			g.Expect(kindOf(t, err)).To(BeElementOf(ErrFetchFailed, ErrRefNotFound, ErrRepositoryNotFound))
			g.Expect(errors.Is(err, context.DeadlineExceeded)).To(BeFalse(), "a clear error, not a wait for the deadline")
			g.Expect(len(err.Error())).To(BeNumerically("<", 1024), "the garbage is not copied into the message")
			noSecretIn(g, err, urlSecret)
		})
	}

	t.Run("not http at all", func(t *testing.T) {
		g := NewWithT(t)
		addr := rawServer(t, func(c net.Conn) { _, _ = c.Write([]byte("SSH-2.0-nope\r\n\x00\x01garbage\r\n\r\n")) })
		_, err := Resolve(ctxTimeout(t, 20*time.Second), Source{URL: withURLCredentials("http://" + addr + "/org/app")})
		g.Expect(err).To(HaveOccurred())
		t.Log(err)
		g.Expect(kindOf(t, err)).To(Equal(ErrFetchFailed))
		noSecretIn(g, err, urlSecret)
	})
	t.Run("closes the connection at once", func(t *testing.T) {
		g := NewWithT(t)
		addr := rawServer(t, func(net.Conn) {})
		_, err := Resolve(ctxTimeout(t, 20*time.Second), Source{URL: withURLCredentials("http://" + addr + "/org/app")})
		g.Expect(err).To(HaveOccurred())
		t.Log(err)
		g.Expect(kindOf(t, err)).To(Equal(ErrFetchFailed))
		g.Expect(err.Error()).To(ContainSubstring("closed the connection"))
		noSecretIn(g, err, urlSecret)
	})
	t.Run("ssh to a server speaking garbage", func(t *testing.T) {
		g := NewWithT(t)
		key, _ := gittest.NewSSHKey(t, "")
		sshSrv := gittest.NewSSHServer(t, t.TempDir())
		addr := rawServer(t, func(c net.Conn) {
			_, _ = c.Write(randomBytes(4096))
			_, _ = c.Write([]byte("\r\n"))
		})
		_, err := Resolve(ctxTimeout(t, 20*time.Second), Source{URL: "ssh://git@" + addr + "/org/app.git",
			Auth: &Auth{Identity: key, KnownHosts: sshSrv.KnownHosts()}})
		g.Expect(err).To(HaveOccurred())
		t.Log(err)
		g.Expect(kindOf(t, err)).To(BeElementOf(ErrFetchFailed, ErrUnreachable))
		g.Expect(len(err.Error())).To(BeNumerically("<", 1024))
	})
}

// rawServer accepts TCP connections on loopback, lets serve write what it wants, and closes
// each connection after reading what the client sent first.
func rawServer(t *testing.T, serve func(net.Conn)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				defer func() { _ = c.Close() }()
				_ = c.SetDeadline(time.Now().Add(5 * time.Second))
				serve(c)
				_, _ = c.Read(make([]byte, 4096))
			})
		}
	})
	t.Cleanup(func() { _ = ln.Close(); wg.Wait() })
	return ln.Addr().String()
}

// TestHardeningErrorBodyIsBounded: a server answering an error status with an endless body
// cannot make the client read it all into memory (go-git keeps the body of an error answer
// as its "reason"): the client stops after a small prefix.
func TestHardeningErrorBodyIsBounded(t *testing.T) {
	t.Parallel()
	const total = 96 << 20
	for _, status := range []int{http.StatusInternalServerError, http.StatusUnauthorized, http.StatusNotFound, http.StatusForbidden} {
		t.Run(http.StatusText(status), func(t *testing.T) {
			g := NewWithT(t)
			var written atomic.Int64
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				w.Header().Set("Content-Type", "text/plain")
				w.WriteHeader(status)
				chunk := bytes.Repeat([]byte("endless error page "), 32<<10/19)
				for written.Load() < total {
					n, err := w.Write(chunk)
					written.Add(int64(n))
					if err != nil {
						return
					}
				}
			}))
			t.Cleanup(srv.Close)
			_, err := Resolve(ctxTimeout(t, 60*time.Second), Source{URL: withURLCredentials(srv.URL + "/org/app")})
			g.Expect(err).To(HaveOccurred())
			t.Log(err)
			_ = kindOf(t, err)
			noSecretIn(g, err, urlSecret)
			g.Expect(len(err.Error())).To(BeNumerically("<", 1024))
			// Socket buffers on loopback hold a few MiB that the client never read.
			g.Expect(written.Load()).To(BeNumerically("<", 32<<20), "the client read the whole error body")
		})
	}
}

// TestHardeningRedirectKeepsCredentials: a server that redirects the ref listing to another
// origin never makes the client send that origin the credentials meant for the first, be they
// basic auth, a bearer token or userinfo in the URL.
func TestHardeningRedirectKeepsCredentials(t *testing.T) {
	t.Parallel()
	const password, token = "basic-password-5e1f", "bearer-token-5e1f"
	var mu sync.Mutex
	var seen []string
	evil := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.Header.Get("Authorization"), r.URL.String())
		if u := r.URL.User; u != nil {
			seen = append(seen, u.String())
		}
		mu.Unlock()
		w.Header().Set("WWW-Authenticate", `Basic realm="evil"`)
		http.Error(w, "who are you", http.StatusUnauthorized)
	}))
	t.Cleanup(evil.Close)
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, evil.URL+r.URL.RequestURI(), http.StatusTemporaryRedirect)
	}))
	t.Cleanup(origin.Close)

	for _, src := range []Source{
		{URL: origin.URL + "/org/app", Auth: &Auth{Username: "alice", Password: password}},
		{URL: origin.URL + "/org/app", Auth: &Auth{BearerToken: token}},
		{URL: withURLCredentials(origin.URL + "/org/app")},
	} {
		_, err := Resolve(ctxTimeout(t, 20*time.Second), src)
		g := NewWithT(t)
		g.Expect(err).To(HaveOccurred())
		noSecretIn(g, err, password, token, urlSecret)
	}
	mu.Lock()
	defer mu.Unlock()
	g := NewWithT(t)
	g.Expect(seen).NotTo(BeEmpty(), "the redirect was followed")
	for _, s := range seen {
		g.Expect(s).NotTo(Or(ContainSubstring(password), ContainSubstring(token), ContainSubstring(urlSecret),
			ContainSubstring("Basic "), ContainSubstring("Bearer ")), "credentials sent to the redirect target")
	}
}

// stallProxy forwards TCP connections to a server and, once the server has sent limit bytes
// in all (limit < 0: no limit), stops passing on anything it sends: a server that stalls in
// the middle of an answer. It closes both sides when the client closes its side.
type stallProxy struct {
	ln     net.Listener
	target string
	limit  atomic.Int64
	sent   atomic.Int64
	wg     sync.WaitGroup
}

func newStallProxy(t *testing.T, target string) *stallProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &stallProxy{ln: ln, target: target}
	p.limit.Store(-1)
	p.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", target)
			if err != nil {
				_ = c.Close()
				continue
			}
			p.pipe(c, s)
		}
	})
	t.Cleanup(func() { _ = ln.Close(); p.wg.Wait() })
	return p
}

func (p *stallProxy) addr() string { return p.ln.Addr().String() }

func (p *stallProxy) pipe(c, s net.Conn) {
	done := make(chan struct{})
	closeBoth := sync.OnceFunc(func() { _ = c.Close(); _ = s.Close(); close(done) })
	p.wg.Go(func() {
		_, _ = io.Copy(s, c)
		closeBoth()
	})
	p.wg.Go(func() {
		buf := make([]byte, 4096)
		for {
			n, err := s.Read(buf)
			if n > 0 {
				out := buf[:n]
				stall := false
				if limit := p.limit.Load(); limit >= 0 {
					left := limit - p.sent.Load()
					if left < int64(n) {
						out, stall = buf[:max(left, 0)], true
					}
				}
				if _, werr := c.Write(out); werr != nil {
					closeBoth()
					return
				}
				p.sent.Add(int64(len(out)))
				if stall {
					<-done // hold the connection open, silent, until the client gives up
					return
				}
			}
			if err != nil {
				closeBoth()
				return
			}
		}
	})
}

// clientGoroutines counts the goroutines of git clients: go-git, x/crypto/ssh, the HTTP
// client's connections and this package's fetches.
func clientGoroutines() int {
	buf := make([]byte, 8<<20)
	buf = buf[:runtime.Stack(buf, true)]
	n := 0
	for _, stack := range strings.Split(string(buf), "\n\n") {
		for _, frame := range []string{"github.com/go-git/", "golang.org/x/crypto/ssh", "net/http.(*persistConn)",
			"sources.(*Cache)", "sources.ctxDialer", "sources.(*remote)"} {
			if strings.Contains(stack, frame) {
				n++
				break
			}
		}
	}
	return n
}

// TestHardeningStallMidFetch: a server that stops sending halfway through the pack, over HTTP
// and over SSH, makes Checkout fail with ErrTimeout at the caller's deadline; the fetch is
// cancelled, leaves nothing behind, and every goroutine it started ends although the server
// still holds the connection open. Not parallel: it counts goroutines.
func TestHardeningStallMidFetch(t *testing.T) {
	root := t.TempDir()
	repo := gittest.NewRepo(t, root, "org/app")
	// 1 MiB that does not compress: the pack is nearly all of what the server sends.
	repo.Commit(t, "main", map[string]string{"app.yaml": "v: 1\n", "blob.bin": string(randomBytes(1 << 20))})
	httpSrv := gittest.NewHTTPServer(t, root, gittest.HTTPOptions{})
	key, pub := gittest.NewSSHKey(t, "")
	sshSrv := gittest.NewSSHServer(t, root, pub)

	for _, tc := range []struct {
		name string
		src  func(p *stallProxy) Source
		up   string
	}{
		{name: "http", up: strings.TrimPrefix(httpSrv.URL, "http://"), src: func(p *stallProxy) Source {
			return Source{URL: withURLCredentials("http://" + p.addr() + "/" + repo.Name), Ref: Ref{Branch: "main"}}
		}},
		{name: "ssh", up: sshSrv.Addr, src: func(p *stallProxy) Source {
			port := func(addr string) string { return addr[strings.LastIndex(addr, ":"):] }
			knownHosts := strings.Replace(string(sshSrv.KnownHosts()), port(sshSrv.Addr), port(p.addr()), 1)
			return Source{URL: "ssh://git@" + p.addr() + "/" + repo.Name, Ref: Ref{Branch: "main"},
				Auth: &Auth{Identity: key, KnownHosts: []byte(knownHosts)}}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			p := newStallProxy(t, tc.up)
			src := tc.src(p)
			rev, err := Resolve(ctxTimeout(t, 20*time.Second), src)
			g.Expect(err).NotTo(HaveOccurred())

			// Measure what a whole checkout receives, then stall halfway through it.
			p.sent.Store(0)
			_, err = newTestCache(t, CacheOptions{}).Checkout(ctxTimeout(t, 30*time.Second), src, rev)
			g.Expect(err).NotTo(HaveOccurred())
			whole := p.sent.Load()
			g.Expect(whole).To(BeNumerically(">", 1<<20))
			baseline := clientGoroutines()

			p.sent.Store(0)
			p.limit.Store(whole / 2)
			cache := newTestCache(t, CacheOptions{})
			start := time.Now()
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			_, err = cache.Checkout(ctx, src, rev)
			g.Expect(err).To(MatchError(ErrTimeout))
			noSecretIn(g, err, urlSecret)
			g.Expect(time.Since(start)).To(BeNumerically("<", 5*time.Second), "the deadline is kept")
			g.Expect(p.sent.Load()).To(BeNumerically(">", whole/4), "the server stalled mid-fetch, not before it")
			t.Logf("stalled after %d of %d bytes: %v", p.sent.Load(), whole, err)

			g.Eventually(clientGoroutines).WithTimeout(10*time.Second).Should(BeNumerically("<=", baseline),
				"the cancelled fetch leaves no goroutine behind")
			g.Eventually(func() []string { return listDir(cache.tmp) }).Should(BeEmpty())
			_, cached := cache.Path(src, rev)
			g.Expect(cached).To(BeFalse())
		})
	}
}

// TestHardeningWebhookOversizedBody: a 10 MiB or 1 GiB payload is refused with 413 after
// reading no more than the cap, with memory bounded by the cap, not by the payload. Not
// parallel: it measures allocations.
func TestHardeningWebhookOversizedBody(t *testing.T) {
	targets := fakeTargets{"github.com/org/app": {{Key: "k", Secret: []byte("s")}}}
	for _, size := range []int64{10 << 20, 1 << 30} {
		t.Run(fmt.Sprintf("%d MiB", size>>20), func(t *testing.T) {
			g := NewWithT(t)
			trig := &fakeTrigger{}
			h := NewWebhookHandler(targets, trig, WebhookOptions{})
			body := &endlessBody{left: size}
			req := httptest.NewRequest(http.MethodPost, WebhookPath, body)
			req.Header.Set("X-Hub-Signature-256", "sha256="+hmacHex("s", "whatever"))
			rec := httptest.NewRecorder()
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			h.ServeHTTP(rec, req)
			runtime.ReadMemStats(&after)
			g.Expect(rec.Code).To(Equal(http.StatusRequestEntityTooLarge))
			g.Expect(trig.triggered()).To(BeEmpty())
			g.Expect(body.read).To(BeNumerically("<=", DefaultMaxWebhookBytes+1), "read past the cap")
			allocated := after.TotalAlloc - before.TotalAlloc
			t.Logf("a %d MiB payload: %d bytes read, %d bytes allocated", size>>20, body.read, allocated)
			g.Expect(allocated).To(BeNumerically("<", 4*DefaultMaxWebhookBytes), "memory follows the payload")
		})
	}

	t.Run("over http", func(t *testing.T) {
		g := NewWithT(t)
		srv := httptest.NewServer(NewWebhookServer("", NewWebhookHandler(targets, &fakeTrigger{}, WebhookOptions{})).Handler)
		t.Cleanup(srv.Close)
		body := append([]byte(`{"repository":"https://github.com/org/app","pad":"`), bytes.Repeat([]byte("x"), 10<<20)...)
		body = append(body, `"}`...)
		req, err := http.NewRequest(http.MethodPost, srv.URL+WebhookPath, bytes.NewReader(body))
		g.Expect(err).NotTo(HaveOccurred())
		req.Header.Set("X-Hub-Signature-256", "sha256="+hmacHex("s", string(body)))
		resp, err := srv.Client().Do(req)
		g.Expect(err).NotTo(HaveOccurred())
		defer func() { _ = resp.Body.Close() }()
		g.Expect(resp.StatusCode).To(Equal(http.StatusRequestEntityTooLarge), "even when validly signed")
	})
}

// endlessBody yields left bytes of 'a' without holding them, and counts what was read.
type endlessBody struct {
	left, read int64
}

func (b *endlessBody) Read(p []byte) (int, error) {
	if b.left <= 0 {
		return 0, io.EOF
	}
	n := min(int64(len(p)), b.left)
	for i := range p[:n] {
		p[i] = 'a'
	}
	b.left -= n
	b.read += n
	return int(n), nil
}

// TestHardeningWebhookReplay: a validly signed push replayed with another repository's URL
// substituted or added — for a repository whose targets even share the secret — is refused,
// as is the original signature on any other body. The untouched replay only triggers a poll of
// the repository it names, which is harmless.
func TestHardeningWebhookReplay(t *testing.T) {
	t.Parallel()
	const secret = "team-a-secret"
	targets := fakeTargets{
		"github.com/org/app":   {{Key: "app", Secret: []byte(secret)}},
		"github.com/org/admin": {{Key: "admin", Secret: []byte(secret)}},
		"github.com/org/other": {{Key: "other", Secret: []byte("team-b-secret")}},
	}
	signed := githubPush
	sig := "sha256=" + hmacHex(secret, signed)
	for _, tc := range []struct {
		name string
		body string
		want int
		keys []Key
	}{
		{name: "the original, replayed", body: signed, want: 202, keys: []Key{"app"}},
		{name: "url replaced", body: strings.ReplaceAll(signed, "org/app", "org/admin"), want: 401},
		{name: "url replaced with a team-b repository", body: strings.ReplaceAll(signed, "org/app", "org/other"), want: 401},
		{name: "another repository added", body: strings.Replace(signed, `"commits":[]`,
			`"commits":[],"project":{"web_url":"https://github.com/org/admin"}`, 1), want: 401},
		{name: "whitespace added", body: signed + "\n", want: 401},
		{name: "json re-encoded", body: strings.ReplaceAll(signed, `":"`, `": "`), want: 401},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			trig := &fakeTrigger{}
			req := httptest.NewRequest(http.MethodPost, WebhookPath, strings.NewReader(tc.body))
			req.Header.Set("X-Hub-Signature-256", sig)
			rec := httptest.NewRecorder()
			NewWebhookHandler(targets, trig, WebhookOptions{}).ServeHTTP(rec, req)
			g.Expect(rec.Code).To(Equal(tc.want), rec.Body.String())
			g.Expect(trig.triggered()).To(Equal(tc.keys))
		})
	}
}

// countingTargets counts the lookups of a hostile payload.
type countingTargets struct{ lookups atomic.Int64 }

func (c *countingTargets) TargetsForRepo(_ context.Context, repo string) ([]WebhookTarget, error) {
	c.lookups.Add(1)
	if repo == "github.com/org/app" {
		return []WebhookTarget{{Key: "app", Secret: []byte("s")}}, nil
	}
	return nil, nil
}

// TestHardeningWebhookHostilePayloads: deep nesting, a hundred thousand URLs, lookalike hosts
// and wrong types: a 400 or 401 without panic, a bounded number of lookups, and no trigger of
// a repository the payload does not really name.
func TestHardeningWebhookHostilePayloads(t *testing.T) {
	t.Parallel()
	var many strings.Builder
	many.WriteString(`{"repository":{"links":{"clone":[`)
	for i := range 50_000 {
		fmt.Fprintf(&many, `{"href":"https://github.com/org/r%d"},`, i)
	}
	many.WriteString(`{"href":"https://github.com/org/app"}]}}}`)
	for _, tc := range []struct {
		name string
		body string
		want int
	}{
		{name: "nested a million deep", body: `{"repository":` + strings.Repeat("[", 1_000_000) + strings.Repeat("]", 1_000_000) + `}`, want: 400},
		{name: "nested objects", body: strings.Repeat(`{"repository":`, 100_000) + `"https://github.com/org/app"` + strings.Repeat("}", 100_000), want: 400},
		{name: "fifty thousand urls", body: many.String(), want: 401},
		{name: "a lookalike host", body: `{"repository":{"url":"https://gіthub.com/org/app"}}`, want: 400},
		{name: "a nul in the url", body: `{"repository":{"url":"https://github.com/org/app\u0000.evil.com/x"}}`, want: 400},
		{name: "path climbing out", body: `{"repository":{"url":"https://github.com/org/other/../../org/app/../evil"}}`, want: 401},
		{name: "nulls and wrong types everywhere", body: `{"repository":{"url":null,"clone_url":[],"ssh_url":{},"links":{"clone":"x","html":[]}},"project":1e999}`, want: 400},
		{name: "empty arrays", body: `{"repository":[],"project":[]}`, want: 400},
		{name: "a huge number", body: `{"repository":{"url":1` + strings.Repeat("0", 100_000) + `}}`, want: 400},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			targets := &countingTargets{}
			trig := &fakeTrigger{}
			req := httptest.NewRequest(http.MethodPost, WebhookPath, strings.NewReader(tc.body))
			req.Header.Set("X-Signature", "sha256="+hmacHex("s", tc.body))
			rec := httptest.NewRecorder()
			NewWebhookHandler(targets, trig, WebhookOptions{}).ServeHTTP(rec, req)
			g.Expect(rec.Code).To(Equal(tc.want), rec.Body.String())
			g.Expect(trig.triggered()).To(BeEmpty())
			g.Expect(targets.lookups.Load()).To(BeNumerically("<=", maxPayloadURLs))
		})
	}
}

// TestHardeningWebhookSlowClients: with the server of NewWebhookServer (its timeouts lowered
// here so that the test is quick), clients sending their headers or their body a byte at a
// time are cut off at the timeout, while a normal push is served meanwhile.
func TestHardeningWebhookSlowClients(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	const secret = "s"
	trig := &fakeTrigger{}
	srv := NewWebhookServer("127.0.0.1:0", NewWebhookHandler(fakeTargets{"github.com/org/app": {{Key: "app", Secret: []byte(secret)}}}, trig, WebhookOptions{}))
	g.Expect(srv.ReadHeaderTimeout).To(And(BeNumerically(">", 0), BeNumerically("<=", 10*time.Second)))
	g.Expect(srv.ReadTimeout).To(And(BeNumerically(">", 0), BeNumerically("<=", time.Minute)))
	srv.ReadHeaderTimeout, srv.ReadTimeout = 300*time.Millisecond, 600*time.Millisecond
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	g.Expect(err).NotTo(HaveOccurred())
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	addr := ln.Addr().String()

	// slow sends head at once, then one byte of trickle every 50ms, and returns how long the
	// server kept the connection open.
	slow := func(head, trickle string) (time.Duration, error) {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			return 0, err
		}
		defer func() { _ = c.Close() }()
		start := time.Now()
		closed := make(chan struct{})
		go func() {
			_, _ = io.Copy(io.Discard, c) // returns when the server closes the connection
			close(closed)
		}()
		if _, err := io.WriteString(c, head); err != nil {
			return 0, err
		}
		for i := 0; ; i++ {
			select {
			case <-closed:
				return time.Since(start), nil
			case <-time.After(50 * time.Millisecond):
			}
			if time.Since(start) > 10*time.Second {
				return 0, errors.New("still connected after 10s")
			}
			_, _ = io.WriteString(c, trickle[i%len(trickle):i%len(trickle)+1])
		}
	}

	const n = 20
	type result struct {
		d   time.Duration
		err error
	}
	results := make(chan result, 2*n)
	for range n {
		go func() {
			d, err := slow("POST "+WebhookPath+" HTTP/1.1\r\nHost: x\r\n", "X-Slow: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n")
			results <- result{d, err}
		}()
		go func() {
			d, err := slow("POST "+WebhookPath+" HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\nX-Signature: sha256=00\r\n\r\n", `{"repository":`)
			results <- result{d, err}
		}()
	}

	// Meanwhile a push is served at once.
	body := `{"repository":{"url":"https://github.com/org/app"}}`
	req, err := http.NewRequest(http.MethodPost, "http://"+addr+WebhookPath, strings.NewReader(body))
	g.Expect(err).NotTo(HaveOccurred())
	req.Header.Set("X-Signature", "sha256="+hmacHex(secret, body))
	start := time.Now()
	resp, err := http.DefaultClient.Do(req)
	g.Expect(err).NotTo(HaveOccurred())
	_ = resp.Body.Close()
	g.Expect(resp.StatusCode).To(Equal(http.StatusAccepted))
	g.Expect(time.Since(start)).To(BeNumerically("<", 2*time.Second))
	g.Expect(trig.triggered()).To(Equal([]Key{"app"}))

	for range 2 * n {
		r := <-results
		g.Expect(r.err).NotTo(HaveOccurred())
		g.Expect(r.d).To(BeNumerically("<", 3*time.Second), "a slow client is cut off at the timeout")
	}
}

// TestHardeningWebhookBurst: 10 000 signed webhook calls at once, half for a repository whose
// one source coalesces, half for one followed by 20 sources while the only poll worker is
// stuck on a stalled server and the queue holds 4: every call is answered 202 or 503 with
// Retry-After, nothing crashes, memory and goroutines come back down, and each source is
// polled at most twice for the whole burst. Not parallel: it measures memory and goroutines.
func TestHardeningWebhookBurst(t *testing.T) {
	g := NewWithT(t)
	f := newFixture(t)
	f.repo.Commit(t, "main", map[string]string{"v": "1"})
	crowd := gittest.NewRepo(t, f.root, "org/crowd")
	clk := clocktesting.NewFakeClock(t0)
	s, polls := startScheduler(t, SchedulerOptions{Options: poll.Options{Clock: clk, Jitter: noJitter, MaxConcurrent: 1, QueueSize: 4}})
	targets := &schedulerTargets{}
	srcs := []Source{f.src}
	for i := range 20 {
		branch := fmt.Sprintf("b%d", i)
		crowd.Commit(t, branch, map[string]string{"v": branch})
		srcs = append(srcs, Source{URL: f.srv.RepoURL(crowd), Ref: Ref{Branch: branch}})
	}
	rec := newRecorder()
	for i, src := range srcs {
		targets.add(src, "hook-secret")
		g.Expect(s.Subscribe(Subscription{ID: fmt.Sprint(i), Source: src, Interval: time.Hour, Notify: rec.notify})).To(Succeed())
	}
	for range srcs {
		rec.next(g)
	}
	for _, src := range srcs {
		idleAt(g, s, src.Key(), t0.Add(time.Hour))
	}

	hooks := httptest.NewServer(NewWebhookServer("", NewWebhookHandler(targets, s, WebhookOptions{})).Handler)
	t.Cleanup(hooks.Close)
	client := &http.Client{Transport: &http.Transport{MaxConnsPerHost: 32, MaxIdleConnsPerHost: 32}}
	t.Cleanup(client.CloseIdleConnections)
	bodies := map[bool]string{
		false: `{"repository":{"clone_url":"` + f.srv.RepoURL(f.repo) + `"}}`,
		true:  `{"repository":{"clone_url":"` + f.srv.RepoURL(crowd) + `"}}`,
	}

	var before runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	goroutines := runtime.NumGoroutine()
	polls.Store(0)
	release := f.srv.Hold(gittest.InfoRefs)
	defer release()
	post := func(body string) (*http.Response, error) {
		req, _ := http.NewRequest(http.MethodPost, hooks.URL+WebhookPath, strings.NewReader(body))
		req.Header.Set("X-Hub-Signature-256", "sha256="+hmacHex("hook-secret", body))
		resp, err := client.Do(req)
		if err != nil {
			return nil, err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		return resp, nil
	}
	// The first push starts the poll of the lone source, which the server holds: the only
	// worker is busy from now on.
	resp, err := post(bodies[false])
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(resp.StatusCode).To(Equal(http.StatusAccepted))
	g.Eventually(f.srv.InFlight).Should(BeEquivalentTo(1))

	const calls = 10_000
	var accepted, unavailable, noRetryAfter, other atomic.Int64
	work := make(chan bool)
	var wg sync.WaitGroup
	for range 64 {
		wg.Go(func() {
			for crowded := range work {
				resp, err := post(bodies[crowded])
				if err != nil {
					other.Add(1)
					continue
				}
				switch {
				case resp.StatusCode == http.StatusAccepted && !crowded:
					accepted.Add(1)
				case resp.StatusCode == http.StatusServiceUnavailable && crowded:
					unavailable.Add(1)
					if resp.Header.Get("Retry-After") == "" {
						noRetryAfter.Add(1)
					}
				default:
					other.Add(1)
				}
			}
		})
	}
	start := time.Now()
	for i := range calls {
		work <- i%2 == 1
	}
	close(work)
	wg.Wait()
	elapsed := time.Since(start)
	var during runtime.MemStats
	runtime.ReadMemStats(&during)
	t.Logf("%d calls in %s: %d accepted, %d 503, %d other; heap %d MiB -> %d MiB; %d polls while held",
		calls, elapsed.Round(time.Millisecond), accepted.Load(), unavailable.Load(), other.Load(),
		before.HeapAlloc>>20, during.HeapAlloc>>20, polls.Load())
	g.Expect(other.Load()).To(BeZero(), "every call is answered 202 (coalesced) or 503 (queue full)")
	g.Expect(accepted.Load()).To(BeEquivalentTo(calls / 2))
	g.Expect(unavailable.Load()).To(BeEquivalentTo(calls / 2))
	g.Expect(noRetryAfter.Load()).To(BeZero())
	g.Expect(during.HeapAlloc).To(BeNumerically("<", before.HeapAlloc+64<<20), "memory bounded")
	g.Expect(polls.Load()).To(BeNumerically("<=", 1), "one poll runs, stuck; the rest wait in the bounded queue")

	release()
	for _, src := range srcs {
		idleAt(g, s, src.Key(), t0.Add(time.Hour))
	}
	g.Expect(polls.Load()).To(BeNumerically("<=", 2*len(srcs)), "each source polled at most twice for the burst")
	client.CloseIdleConnections()
	g.Eventually(runtime.NumGoroutine).WithTimeout(10*time.Second).Should(BeNumerically("<=", goroutines+10),
		"the burst's goroutines end")
}
