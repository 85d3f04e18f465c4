package sources

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"time"

	"github.com/go-git/go-git/v5/plumbing/protocol/packp"
	"github.com/go-git/go-git/v5/plumbing/transport"
	githttp "github.com/go-git/go-git/v5/plumbing/transport/http"
	gitssh "github.com/go-git/go-git/v5/plumbing/transport/ssh"
	"golang.org/x/crypto/ssh"
	"golang.org/x/net/proxy"
)

// baseHTTPTransport is shared by every HTTP(S) remote without a custom CA, so that polls reuse
// connections. Deadlines come from each operation's context.
var baseHTTPTransport = &http.Transport{
	Proxy:                 http.ProxyFromEnvironment,
	DialContext:           (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
	ForceAttemptHTTP2:     true,
	MaxIdleConns:          100,
	MaxIdleConnsPerHost:   8,
	IdleConnTimeout:       90 * time.Second,
	TLSHandshakeTimeout:   10 * time.Second,
	ExpectContinueTimeout: time.Second,
	TLSClientConfig:       &tls.Config{MinVersion: tls.VersionTLS12},
}

var (
	httpClients   sync.Map // CA hash → transport.Transport
	sshTransport  = gitssh.NewClient(nil)
	defaultClient = githttp.NewClient(&http.Client{Transport: boundedErrorBodies{baseHTTPTransport}})
)

// maxErrorBody bounds what is read of an HTTP answer with an error status.
const maxErrorBody = 64 << 10

// boundedErrorBodies cuts the body of answers with a status of 300 or more to maxErrorBody:
// go-git reads such a body whole, to quote it as the error's reason, so a hostile server
// answering an error with an endless body would otherwise fill the memory.
type boundedErrorBodies struct{ rt http.RoundTripper }

func (b boundedErrorBodies) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := b.rt.RoundTrip(req)
	if err == nil && resp.StatusCode >= http.StatusMultipleChoices && resp.Body != nil {
		resp.Body = struct {
			io.Reader
			io.Closer
		}{io.LimitReader(resp.Body, maxErrorBody), resp.Body}
	}
	return resp, err
}

// httpTransport returns the go-git HTTP client for a CA bundle (nil: the system's authorities).
func httpTransport(a *Auth) (transport.Transport, error) {
	if a == nil || len(a.CACert) == 0 {
		return defaultClient, nil
	}
	sum := sha256.Sum256(a.CACert)
	key := hex.EncodeToString(sum[:])
	if c, ok := httpClients.Load(key); ok {
		return c.(transport.Transport), nil
	}
	pool, err := a.certPool()
	if err != nil {
		return nil, err
	}
	tr := baseHTTPTransport.Clone()
	tr.TLSClientConfig = &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: pool}
	c, _ := httpClients.LoadOrStore(key, githttp.NewClient(&http.Client{Transport: boundedErrorBodies{tr}}))
	return c.(transport.Transport), nil
}

// remote is one repository reached with one set of credentials, ready to open sessions.
type remote struct {
	rawURL string
	ep     *transport.Endpoint
	client transport.Transport
	auth   transport.AuthMethod
	red    *redactor
	ssh    bool
}

// newRemote checks the URL and credentials of src and prepares the transport.
func newRemote(src Source) (*remote, error) {
	r := &remote{rawURL: src.URL, red: newRedactor(src.URL, src.Auth)}
	if err := src.Ref.Validate(); err != nil {
		return nil, err
	}
	scheme, _, _, _, _, err := splitURL(src.URL)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidSource, err)
	}
	ep, err := transport.NewEndpoint(src.URL)
	if err != nil {
		return nil, fmt.Errorf("%w: malformed url", ErrInvalidSource)
	}
	r.ep = ep
	switch scheme {
	case "http", "https":
		if err := src.Auth.checkHTTP(); err != nil {
			return nil, err
		}
		if r.client, err = httpTransport(src.Auth); err != nil {
			return nil, err
		}
		switch {
		case src.Auth == nil:
		case src.Auth.BearerToken != "":
			r.auth = &githttp.TokenAuth{Token: src.Auth.BearerToken}
		case src.Auth.Username != "":
			r.auth = &githttp.BasicAuth{Username: src.Auth.Username, Password: src.Auth.Password}
		}
	case "ssh":
		signer, hostKeys, err := src.Auth.ssh()
		if err != nil {
			return nil, err
		}
		user := ep.User
		if user == "" {
			user = "git"
		}
		port := ep.Port
		if port <= 0 {
			port = gitssh.DefaultPort
		}
		r.client = sshTransport
		r.ssh = true
		r.auth = &sshAuth{
			user:   user,
			signer: signer,
			check:  hostKeys.check,
			algos:  hostKeys.algorithms(net.JoinHostPort(ep.Host, strconv.Itoa(port))),
		}
	default:
		return nil, fmt.Errorf("%w: unsupported url scheme %q: use https://, http:// or ssh://", ErrInvalidSource, scheme)
	}
	return r, nil
}

// session opens an upload-pack session (fetch) bound to ctx.
func (r *remote) session(ctx context.Context) (transport.UploadPackSession, func(), error) {
	return openSession(ctx, r, r.client.NewUploadPackSession)
}

// pushSession opens a receive-pack session (push) bound to ctx.
func (r *remote) pushSession(ctx context.Context) (transport.ReceivePackSession, func(), error) {
	return openSession(ctx, r, r.client.NewReceivePackSession)
}

// openSession opens a session with newSession and returns it with what closes it. For SSH the
// connection is dialed through a dialer that closes it when ctx ends, so that a server that
// stalls — even inside the SSH handshake — cannot outlive the deadline.
func openSession[S io.Closer](ctx context.Context, r *remote,
	newSession func(*transport.Endpoint, transport.AuthMethod) (S, error)) (S, func(), error) {
	ep := *r.ep
	release := func() {}
	if r.ssh {
		id := newDialID()
		dialers.Store(id, ctx)
		release = func() { dialers.Delete(id) }
		ep.Proxy = transport.ProxyOptions{URL: ctxDialScheme + "://" + id}
	}
	s, err := newSession(&ep, r.auth)
	if err != nil {
		release()
		var none S
		return none, nil, err
	}
	return s, func() { _ = s.Close(); release() }, nil
}

// listRefs is ls-remote: it reads the refs the server advertises, and nothing else.
func (r *remote) listRefs(ctx context.Context) (*packp.AdvRefs, error) {
	s, done, err := r.session(ctx)
	if err != nil {
		return nil, err
	}
	defer done()
	return s.AdvertisedReferencesContext(ctx)
}

// sshAuth authenticates with one key and checks the host key against known_hosts, asking the
// server for the key types known_hosts has for it.
type sshAuth struct {
	user   string
	signer ssh.Signer
	check  ssh.HostKeyCallback
	algos  []string
}

func (a *sshAuth) Name() string   { return "ssh-public-keys" }
func (a *sshAuth) String() string { return "user: " + a.user + ", name: " + a.Name() }

func (a *sshAuth) ClientConfig() (*ssh.ClientConfig, error) {
	return &ssh.ClientConfig{
		User:              a.user,
		Auth:              []ssh.AuthMethod{ssh.PublicKeys(a.signer)},
		HostKeyCallback:   a.check,
		HostKeyAlgorithms: a.algos,
	}, nil
}

// ctxDialScheme is a proxy scheme registered with golang.org/x/net/proxy, which go-git's SSH
// transport consults; it lets each operation dial with its own context.
const ctxDialScheme = "converge-ctx-dial"

var dialers sync.Map // id → context.Context

func init() {
	proxy.RegisterDialerType(ctxDialScheme, func(u *url.URL, _ proxy.Dialer) (proxy.Dialer, error) {
		v, ok := dialers.Load(u.Host)
		if !ok {
			return nil, fmt.Errorf("no dialer for this operation")
		}
		return ctxDialer{ctx: v.(context.Context)}, nil
	})
}

func newDialID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

type ctxDialer struct{ ctx context.Context }

func (d ctxDialer) Dial(network, addr string) (net.Conn, error) {
	return d.DialContext(context.Background(), network, addr)
}

// DialContext dials with the operation's context (the one go-git passes carries no deadline) and
// closes the connection when that context ends.
func (d ctxDialer) DialContext(_ context.Context, network, addr string) (net.Conn, error) {
	nd := net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}
	c, err := nd.DialContext(d.ctx, network, addr)
	if err != nil {
		return nil, err
	}
	stop := context.AfterFunc(d.ctx, func() { _ = c.Close() })
	return &ctxConn{Conn: c, stop: stop}, nil
}

type ctxConn struct {
	net.Conn
	stop func() bool
}

func (c *ctxConn) Close() error {
	c.stop()
	return c.Conn.Close()
}
