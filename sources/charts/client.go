package charts

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"time"
)

// Client resolves, downloads, extracts and verifies charts. It is safe for concurrent use.
type Client struct {
	// CacheDir holds the extracted charts, in CacheDir/<scope>/sha256-<hex>/<chart name>/,
	// the scope a hash of the repository and the credentials (see Fetch): a directory is
	// complete once it exists (written elsewhere, then renamed) and is never changed
	// afterwards, until collected.
	CacheDir string
	// MaxCacheBytes bounds the extracted charts the cache keeps (default
	// DefaultCacheBytes): once a download grows the cache past it, the charts used least
	// recently are removed. A chart used in the last 10 minutes is kept whatever the size
	// (a render may be reading it).
	MaxCacheBytes int64
	// CacheMaxAge: a chart no Fetch returned for that long is removed (default
	// DefaultCacheMaxAge).
	CacheMaxAge time.Duration
	// AllowLoopback lets a repository — and every address a redirect, a chart URL of its
	// index or a registry's token realm leads to — be at a loopback, link-local,
	// unspecified or multicast address: for tests, local development and the CLI on a
	// user's machine. Without it such a connection is refused when dialled (after name
	// resolution), as a tenant would otherwise reach the daemon's host and cloud metadata.
	AllowLoopback bool
	// HTTPClient, when set, is the client requests go through (its Transport, when an
	// *http.Transport, is cloned to add a custom CA and, without AllowLoopback, the
	// address check, which replaces its DialContext; another Transport is refused without
	// AllowLoopback; its redirect policy is replaced). Default: one with sane timeouts.
	HTTPClient *http.Client
	// Limits bound what is read from a repository.
	Limits Limits
	// Now tells the time of the cache's uses (default time.Now).
	Now func() time.Time

	// allowAddr, in tests, lets the client reach addresses otherwise refused.
	allowAddr func(netip.AddrPort) bool

	mu         sync.Mutex
	transports map[string]http.RoundTripper // by CA bundle
	indexes    map[string]*cachedIndex      // by repository and credentials
	verified   map[string]Signer            // by archive digest, repository, credentials, chart and keyring
	origins    map[string]originSeen        // by artifact repository, credentials and digest

	cache chartCache
}

// Default timeouts of the client made when HTTPClient is nil.
const (
	dialTimeout     = 30 * time.Second
	tlsTimeout      = 10 * time.Second
	responseTimeout = 60 * time.Second
	requestTimeout  = 5 * time.Minute
	maxRedirects    = 10
)

func (c *Client) limits() Limits { return c.Limits.withDefaults() }

// Resolve returns the newest version of the chart that src.Version allows (an OCI chart
// pinned by digest: that one). For an artifact: the manifest of its tag, of the newest tag
// its version range allows, or of its digest.
func (c *Client) Resolve(ctx context.Context, src Source) (Resolved, error) {
	op := src.op("resolve", "of")
	if err := checkSource(src); err != nil {
		return Resolved{}, wrap(ctx, op, src, err)
	}
	switch {
	case src.IsArtifact():
		r, err := c.resolveArtifact(ctx, src)
		return r, wrap(ctx, op, src, err)
	case src.IsOCI():
		return c.resolveOCI(ctx, src)
	}
	return c.resolveHTTP(ctx, src)
}

// maxVersions caps the versions Versions returns.
const maxVersions = 50

// Versions returns the versions of the chart that src.Version allows, newest first, at
// most 50: from the repository's index, or an OCI repository's tags (Helm's "_" read as
// "+"). A chart pinned by digest has only its own. For an artifact: the tags its version
// range allows, its tag when the repository has it, or "digest" for one pinned.
func (c *Client) Versions(ctx context.Context, src Source) ([]string, error) {
	op := src.op("list the versions of", "of")
	if err := checkSource(src); err != nil {
		return nil, wrap(ctx, op, src, err)
	}
	if src.IsArtifact() {
		out, err := c.artifactVersions(ctx, src)
		return out, wrap(ctx, op, src, err)
	}
	var all []string
	if src.IsOCI() {
		tags, err := c.ociTags(ctx, src)
		if err != nil {
			return nil, wrap(ctx, op, src, err)
		}
		for _, t := range tags {
			all = append(all, strings.ReplaceAll(t, "_", "+"))
		}
	} else {
		idx, err := c.index(ctx, src, true)
		if err != nil {
			return nil, wrap(ctx, op, src, err)
		}
		for _, e := range idx.entries[src.Name] {
			all = append(all, e.Version)
		}
	}
	in, err := inRange(len(all), func(i int) string { return all[i] }, src.Version)
	if err != nil {
		return nil, wrap(ctx, op, src, err)
	}
	out := make([]string, 0, min(len(in), maxVersions))
	for _, i := range in[:min(len(in), maxVersions)] {
		out = append(out, all[i])
	}
	return out, nil
}

// Fetch returns the directory holding the chart of r (the one with Chart.yaml), or the
// whole tree of an artifact, from the cache when this repository with these credentials
// downloaded it before (no network), otherwise downloaded — bounded, its digest checked —
// and extracted safely. The directory is read-only. The cache is not shared across
// repositories or credentials, nor between charts and artifacts: a source naming the
// digest of another's private chart gets what its own repository serves, and another's
// cached archive never.
//
// An artifact's manifest must be an OCI image manifest whose config is of
// ArtifactConfigMediaType, FluxConfigMediaType, OCIEmptyConfigMediaType or
// OrasConfigMediaType, and which has one layer of ArtifactLayerMediaType,
// FluxLayerMediaType or OCILayerMediaType — or of src.LayerMediaType when set: an image
// index, a Helm chart, several candidate layers or other media types are refused.
func (c *Client) Fetch(ctx context.Context, src Source, r Resolved) (string, error) {
	op := src.op("fetch", "from")
	if err := checkSource(src); err != nil {
		return "", wrap(ctx, op, src, err)
	}
	if !digestPattern.MatchString(r.Digest) {
		return "", wrap(ctx, op, src, invalid("digest %q is not sha256:<64 hex digits>", r.Digest))
	}
	if dir, ok := c.cached(src, r); ok {
		c.collectSometimes()
		return dir, nil
	}
	switch {
	case src.IsArtifact():
		dir, err := c.fetchArtifact(ctx, src, r)
		return dir, wrap(ctx, op+" "+r.String()+" from", src, err)
	case src.IsOCI():
		return c.fetchOCI(ctx, src, r)
	}
	return c.fetchHTTP(ctx, src, r)
}

// Verify checks the chart's provenance: its .prov is signed by a key of src.Keyring and
// names the archive's sha256. With src.CosignKeys it checks instead that the OCI chart or
// artifact is signed with cosign by one of them (see VerifySigner). A failure is a
// *sources.VerificationError (it matches sources.ErrVerificationFailed) when the chart or
// artifact is not trusted, another error when the signatures could not be read.
func (c *Client) Verify(ctx context.Context, src Source, r Resolved) error {
	_, err := c.VerifySigner(ctx, src, r)
	return err
}

// VerifySigner is Verify, telling who signed the chart or artifact. A verification that
// succeeded is remembered: it costs no request again.
//
// Cosign signatures are read offline, with the public keys of src.CosignKeys only (no
// transparency log, no certificate): cosign's classic format (the tag
// sha256-<hex>.sig of the same repository, simple-signing payloads naming the manifest's
// digest, as `cosign sign --key` writes it up to cosign v2 and with
// --new-bundle-format=false), and cosign v3's default (a Sigstore bundle v0.3 attached as
// an OCI referrer, its DSSE envelope holding an in-toto statement of predicate type
// https://sigstore.dev/cosign/sign/v1 whose subject is the manifest's digest). A bundle's
// certificate, transparency log entries and timestamps are not checked: the key is what
// is trusted.
func (c *Client) VerifySigner(ctx context.Context, src Source, r Resolved) (Signer, error) {
	op := src.op("verify", "of")
	if err := checkSource(src); err != nil {
		return Signer{}, wrap(ctx, op, src, err)
	}
	if !digestPattern.MatchString(r.Digest) {
		return Signer{}, wrap(ctx, op, src, invalid("digest %q is not sha256:<64 hex digits>", r.Digest))
	}
	check, trust, err := c.verifier(ctx, src, r)
	if err != nil {
		return Signer{}, wrap(ctx, op, src, err)
	}
	key := strings.Join([]string{r.Digest, string(src.Kind), src.Repository, src.Credentials.digest(), src.Name, r.Version, trust}, "\x00")
	c.mu.Lock()
	s, ok := c.verified[key]
	c.mu.Unlock()
	if ok {
		return s, nil
	}
	if s, err = check(); err != nil {
		return Signer{}, err
	}
	c.mu.Lock()
	if c.verified == nil {
		c.verified = map[string]Signer{}
	}
	c.verified[key] = s
	c.mu.Unlock()
	return s, nil
}

// verifier is the check of src's signatures, and what names the keys it trusts.
func (c *Client) verifier(ctx context.Context, src Source, r Resolved) (func() (Signer, error), string, error) {
	if len(src.CosignKeys) > 0 {
		keys, err := readCosignKeys(src.CosignKeys)
		if err != nil {
			return nil, "", err
		}
		return func() (Signer, error) { return c.verifyCosign(ctx, src, r, keys) }, "cosign " + keys.digest, nil
	}
	if src.IsArtifact() {
		return nil, "", invalid("no cosign keys to verify the artifact with")
	}
	ring, err := readKeyring(src.Keyring)
	if err != nil {
		return nil, "", err
	}
	if src.IsOCI() {
		return func() (Signer, error) { return c.verifyOCI(ctx, src, r, ring) }, ring.digest, nil
	}
	return func() (Signer, error) { return c.verifyHTTP(ctx, src, r, ring) }, ring.digest, nil
}

// checkSource refuses a source that cannot work as written.
func checkSource(src Source) error {
	u, err := url.Parse(src.Repository)
	switch {
	case err != nil:
		return invalid("the repository is not a URL")
	case u.User != nil:
		return invalid("the repository URL holds credentials: put them in the secret")
	case u.Scheme != "https" && u.Scheme != "http" && u.Scheme != "oci":
		return invalid("the repository must be an https://, http:// or oci:// URL")
	case u.Host == "":
		return invalid("the repository URL has no host")
	case src.Digest != "" && !digestPattern.MatchString(src.Digest):
		return invalid("digest %q is not sha256:<64 hex digits>", src.Digest)
	case len(src.CosignKeys) > 0 && !src.IsOCI():
		return invalid("cosign signatures are read from an oci:// repository only")
	case len(src.CosignKeys) > 0 && src.Keyring != nil:
		return invalid("trust either cosign keys or OpenPGP keys (provenance), not both")
	}
	switch src.Kind {
	case KindChart:
		return checkChartSource(src)
	case KindArtifact:
		return checkArtifactSource(src)
	}
	return invalid("unknown source kind %q", src.Kind)
}

// checkChartSource refuses a chart source that cannot work as written.
func checkChartSource(src Source) error {
	switch {
	case src.Name == "" || strings.Contains(src.Name, "..") || strings.HasPrefix(src.Name, "/"):
		return invalid("bad chart name %q", src.Name)
	case src.Digest != "" && !src.IsOCI():
		return invalid("a digest pins an oci:// chart only")
	case src.Tag != "" || src.LayerMediaType != "":
		return invalid("a tag or a layer media type is for an artifact, not a chart")
	}
	return nil
}

// httpClient is the client for src: its CA, no credentials across origins on redirects.
func (c *Client) httpClient(src Source) (*http.Client, error) {
	rt, err := c.transport(src.Credentials.CA)
	if err != nil {
		return nil, err
	}
	hc := &http.Client{Timeout: requestTimeout}
	if c.HTTPClient != nil {
		hc.Timeout = c.HTTPClient.Timeout
		hc.Jar = c.HTTPClient.Jar
	}
	hc.Transport = rt
	hc.CheckRedirect = checkRedirect
	return hc, nil
}

// checkRedirect follows at most maxRedirects redirects, and drops the credentials of a
// redirect to another origin (scheme, host and port), or from https to http.
func checkRedirect(req *http.Request, via []*http.Request) error {
	if len(via) >= maxRedirects {
		return errTooManyRedirects
	}
	if !sameOrigin(via[0].URL, req.URL) {
		req.Header.Del("Authorization")
	}
	return nil
}

var errTooManyRedirects = &statusError{code: http.StatusLoopDetected, what: "too many redirects"}

// sameOrigin reports whether a and b have the same scheme, host and port.
func sameOrigin(a, b *url.URL) bool {
	return strings.EqualFold(a.Scheme, b.Scheme) && strings.EqualFold(a.Host, b.Host)
}

// transport is the round tripper for a CA bundle (nil: the system's), made once per bundle.
func (c *Client) transport(ca []byte) (http.RoundTripper, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	key := string(ca)
	if rt, ok := c.transports[key]; ok {
		return rt, nil
	}
	base, err := c.baseTransport()
	if err != nil {
		return nil, err
	}
	if len(ca) > 0 {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(ca) {
			return nil, invalid("ca.crt holds no PEM certificate")
		}
		t, ok := base.(*http.Transport)
		if !ok {
			return nil, invalid("a custom CA needs an *http.Transport")
		}
		t = t.Clone()
		if t.TLSClientConfig == nil {
			t.TLSClientConfig = &tls.Config{MinVersion: tls.VersionTLS12}
		}
		t.TLSClientConfig.RootCAs = pool
		base = t
	}
	if c.transports == nil {
		c.transports = map[string]http.RoundTripper{}
	}
	c.transports[key] = base
	return base, nil
}

// baseTransport is HTTPClient's Transport, or one with sane timeouts; either dials with
// the address check and checks the destination of what goes through a proxy.
func (c *Client) baseTransport() (http.RoundTripper, error) {
	if c.HTTPClient != nil && c.HTTPClient.Transport != nil {
		if c.AllowLoopback {
			return c.HTTPClient.Transport, nil
		}
		t, ok := c.HTTPClient.Transport.(*http.Transport)
		if !ok {
			return nil, invalid("HTTPClient's Transport is not an *http.Transport: the addresses it connects to cannot be checked")
		}
		t = t.Clone()
		t.DialContext = c.dialer().DialContext
		t.Proxy = c.checkedProxy(t.Proxy)
		return t, nil
	}
	return &http.Transport{
		Proxy:                 c.checkedProxy(http.ProxyFromEnvironment),
		DialContext:           c.dialer().DialContext,
		TLSHandshakeTimeout:   tlsTimeout,
		ResponseHeaderTimeout: responseTimeout,
		IdleConnTimeout:       90 * time.Second,
		MaxIdleConnsPerHost:   4,
		ForceAttemptHTTP2:     true,
		TLSClientConfig:       &tls.Config{MinVersion: tls.VersionTLS12},
	}, nil
}

// isLoopback reports whether host (with or without port) is a loopback address or
// localhost.
func isLoopback(hostport string) bool {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(strings.Trim(host, "[]"))
	return ip != nil && ip.IsLoopback()
}
