package charts

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"path/filepath"
	"strings"
	"testing"

	. "github.com/onsi/gomega"

	"github.com/converge-gitops/converge/internal/netguard"
	"github.com/converge-gitops/converge/sources"
)

// bomb is a gzip stream that decompresses to a tar of one file, name, of 1 GiB of zeros:
// a header, then 1024 gzip members of 1 MiB of zeros each (about 1 MiB compressed).
func bomb(t testing.TB, name string) []byte {
	t.Helper()
	var hdr bytes.Buffer
	tw := tar.NewWriter(&hdr)
	if err := tw.WriteHeader(&tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: 0o644, Size: 1 << 30}); err != nil {
		t.Fatal(err)
	}
	out := gzipped(t, hdr.Bytes())
	zeros := gzipped(t, make([]byte, 1<<20))
	for range 1024 {
		out = append(out, zeros...)
	}
	return out
}

// gzipped compresses data.
func gzipped(t testing.TB, data []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	_, _ = gz.Write(data)
	if err := gz.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// manyFiles is a chart of n empty files.
func manyFiles(t testing.TB, n int) []byte {
	entries := []tarEntry{file("small/Chart.yaml", "name: small\nversion: 1.0.0\n")}
	for i := range n {
		entries = append(entries, file(fmt.Sprintf("small/templates/f%06d.yaml", i), ""))
	}
	return tgz(t, entries...)
}

// TestHostileArchives: each archive is refused with an error that says why, and nothing
// is left in the cache.
func TestHostileArchives(t *testing.T) {
	chartYAML := file("small/Chart.yaml", "name: small\nversion: 1.0.0\n")
	link := func(name, target string, typ byte) tarEntry {
		return tarEntry{hdr: tar.Header{Name: name, Linkname: target, Typeflag: typ, Mode: 0o777}}
	}
	for _, tc := range []struct {
		name    string
		archive []byte
		kind    error
		message string
	}{
		{"dot-dot", tgz(t, chartYAML, file("small/../../etc/passwd", "x")), ErrBadArchive, "leaves the archive's directory"},
		{"absolute", tgz(t, chartYAML, file("/etc/passwd", "x")), ErrBadArchive, "absolute"},
		{"symlink", tgz(t, chartYAML, link("small/templates", "/etc", tar.TypeSymlink)), ErrBadArchive, "is a link"},
		{"hardlink", tgz(t, chartYAML, link("small/values.yaml", "/etc/passwd", tar.TypeLink)), ErrBadArchive, "is a link"},
		{"device", tgz(t, chartYAML, tarEntry{hdr: tar.Header{Name: "small/null", Typeflag: tar.TypeChar, Devmajor: 1, Devminor: 3}}), ErrBadArchive, "not a regular file"},
		{"another top directory", tgz(t, chartYAML, file("other/values.yaml", "x")), ErrBadArchive, "not under the chart's directory small/"},
		{"no Chart.yaml", tgz(t, file("small/values.yaml", "x")), ErrBadArchive, "no small/Chart.yaml"},
		{"twice the same file", tgz(t, chartYAML, chartYAML), ErrBadArchive, "twice"},
		{"not gzip", []byte(strings.Repeat("not a chart ", 100)), ErrBadArchive, "not a gzip archive"},
		{"100k files", manyFiles(t, 100_000), sources.ErrLimitExceeded, "more than 10000 files"},
		{"decompression bomb", bomb(t, "small/Chart.yaml"), sources.ErrLimitExceeded, "larger than the cap"},
		{"archive over its cap", append(packageChart(t, "small", small("1.0.0")), make([]byte, DefaultArchiveBytes)...), sources.ErrLimitExceeded, "the chart archive is larger than the cap of 16777216 bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			repo := newHelmRepo(t, false)
			repo.add(repoChart{name: "small", version: "1.0.0", archive: tc.archive})
			c := newClient(t)
			src := Source{Repository: repo.srv.URL, Name: "small"}
			_, err := c.Fetch(t.Context(), src, mustResolve(t, c, src))
			g.Expect(err).To(MatchError(tc.kind))
			g.Expect(err).To(MatchError(ContainSubstring(tc.message)))
			g.Expect(cacheEntries(t, c.CacheDir)).To(BeEmpty())
		})
	}
}

// TestDigestMismatch: an archive that is not the one the index names is refused.
func TestDigestMismatch(t *testing.T) {
	g := NewWithT(t)
	repo := newHelmRepo(t, false)
	repo.add(repoChart{name: "small", version: "1.0.0", archive: packageChart(t, "small", small("1.0.0")), digest: sha([]byte("another archive"))})
	c := newClient(t)
	src := Source{Repository: repo.srv.URL, Name: "small"}
	_, err := c.Fetch(t.Context(), src, mustResolve(t, c, src))
	g.Expect(err).To(MatchError(ErrBadArchive))
	g.Expect(err).To(MatchError(ContainSubstring("not the expected sha256:" + sha([]byte("another archive")))))
	g.Expect(cacheEntries(t, c.CacheDir)).To(BeEmpty())
}

// TestIndexOverItsCap: an index.yaml larger than its cap is refused while read.
func TestIndexOverItsCap(t *testing.T) {
	g := NewWithT(t)
	repo := newHelmRepo(t, false)
	repo.index = []byte("apiVersion: v1\nentries: {}\n# " + strings.Repeat("x", 2<<20) + "\n")
	c := &Client{CacheDir: t.TempDir(), Limits: Limits{IndexBytes: 1 << 20}, AllowLoopback: true}
	_, err := c.Resolve(t.Context(), Source{Repository: repo.srv.URL, Name: "small"})
	g.Expect(err).To(MatchError(sources.ErrLimitExceeded))
	g.Expect(err).To(MatchError(ContainSubstring("index.yaml is larger than the cap of 1048576 bytes")))
}

// TestExtractedSizeCaps: the files of a chart are capped one by one and together.
func TestExtractedSizeCaps(t *testing.T) {
	g := NewWithT(t)
	big := strings.Repeat("a", 3000)
	for lim, message := range map[Limits]string{
		{FileBytes: 2000}:      "small/values.yaml is larger than the cap of 2000 bytes for one file",
		{ExtractedBytes: 5000}: "the extracted chart is larger than the cap of 5000 bytes",
	} {
		archive := tgz(t, file("small/Chart.yaml", "name: small\nversion: 1.0.0\n"), file("small/values.yaml", big), file("small/more.yaml", big))
		repo := newHelmRepo(t, false)
		repo.add(repoChart{name: "small", version: "1.0.0", archive: archive})
		c := &Client{CacheDir: t.TempDir(), Limits: lim, AllowLoopback: true}
		src := Source{Repository: repo.srv.URL, Name: "small"}
		_, err := c.Fetch(t.Context(), src, mustResolve(t, c, src))
		g.Expect(err).To(MatchError(sources.ErrLimitExceeded))
		g.Expect(err).To(MatchError(ContainSubstring(message)))
		g.Expect(cacheEntries(t, c.CacheDir)).To(BeEmpty())
	}
}

// onlyAddressesOf lets the client reach the loopback addresses of servers, and no other
// loopback or link-local address: the servers stand for repositories on allowed hosts.
func onlyAddressesOf(servers ...*httptest.Server) func(netip.AddrPort) bool {
	allowed := map[netip.AddrPort]bool{}
	for _, s := range servers {
		allowed[netip.MustParseAddrPort(s.Listener.Addr().String())] = true
	}
	return func(ap netip.AddrPort) bool { return allowed[ap] }
}

// guardedClient is a client without AllowLoopback that reaches servers only.
func guardedClient(t testing.TB, servers ...*httptest.Server) *Client {
	return &Client{CacheDir: filepath.Join(t.TempDir(), "charts"), allowAddr: onlyAddressesOf(servers...)}
}

func portOf(s *httptest.Server) string {
	_, port, _ := net.SplitHostPort(s.Listener.Addr().String())
	return port
}

// TestLoopbackRepositoriesAreRefused: without AllowLoopback, an HTTP repository or an OCI
// registry on a loopback address — by its address or by a name that resolves to it — is
// refused before any request reaches it; with AllowLoopback it is reached.
func TestLoopbackRepositoriesAreRefused(t *testing.T) {
	g := NewWithT(t)
	repo := newHelmRepo(t, false)
	repo.add(repoChart{name: "small", version: "1.0.0", archive: packageChart(t, "small", small("1.0.0"))})
	reg := newOCIRegistry(t)
	reg.push(t, "small", "1.0.0", packageChart(t, "small", small("1.0.0")), nil)
	tripwire := newRecordingServer(t, nil)
	c := &Client{CacheDir: filepath.Join(t.TempDir(), "charts")}
	for _, repository := range []string{
		repo.srv.URL, "http://localhost:" + portOf(repo.srv), "https://127.0.0.1:" + portOf(tripwire.Server),
		"http://[::1]:" + portOf(tripwire.Server), "http://[::ffff:127.0.0.1]:" + portOf(tripwire.Server),
		"oci://" + hostOf(reg.open) + "/charts", "oci://localhost:" + portOf(reg.open) + "/charts",
	} {
		_, err := c.Resolve(t.Context(), Source{Repository: repository, Name: "small", Version: "1.0.0"})
		g.Expect(err).To(MatchError(sources.ErrInvalidSource), repository)
		g.Expect(err).To(MatchError(ContainSubstring("refusing to connect to")), repository)
		g.Expect(err).To(MatchError(ContainSubstring("a loopback address")), repository)
	}
	// A configuration artifact goes through the same client: refused alike.
	for _, repository := range []string{"oci://" + hostOf(reg.open) + "/config", "oci://localhost:" + portOf(tripwire.Server) + "/config"} {
		_, err := c.Resolve(t.Context(), Source{Kind: KindArtifact, Repository: repository, Tag: "latest"})
		g.Expect(err).To(MatchError(sources.ErrInvalidSource), repository)
		g.Expect(err).To(MatchError(ContainSubstring("a loopback address")), repository)
	}
	g.Expect(repo.requests.Load()).To(BeZero())
	g.Expect(tripwire.auth).To(BeEmpty())

	allowed := &Client{CacheDir: filepath.Join(t.TempDir(), "charts"), AllowLoopback: true}
	for _, repository := range []string{repo.srv.URL, "oci://" + hostOf(reg.open) + "/charts"} {
		src := Source{Repository: repository, Name: "small", Version: "1.0.0"}
		_, err := allowed.Fetch(t.Context(), src, mustResolve(t, allowed, src))
		g.Expect(err).NotTo(HaveOccurred(), repository)
	}
}

// TestForbiddenAddresses: loopback, link-local, cloud metadata (link-local or not),
// unspecified and multicast addresses are refused, IPv4-mapped or not; others are not.
func TestForbiddenAddresses(t *testing.T) {
	g := NewWithT(t)
	for addr, why := range map[string]string{
		"127.0.0.1": "loopback", "127.8.9.1": "loopback", "::1": "loopback", "::ffff:127.0.0.1": "loopback",
		"169.254.169.254": "cloud metadata", "fe80::1": "link-local", "fd00:ec2::254": "cloud metadata", "::ffff:169.254.169.254": "cloud metadata",
		"100.100.100.200": "cloud metadata", "169.254.1.1": "link-local",
		"0.0.0.0": "unspecified", "::": "unspecified", "224.0.0.1": "multicast", "ff02::1": "multicast", "ff05::2": "multicast",
		"64:ff9b::7f00:1": "NAT64 form of a loopback", "64:ff9b::a9fe:a9fe": "NAT64 form of a cloud metadata", "64:ff9b::a9fe:101": "NAT64 form of a link-local",
		"10.1.2.3": "", "192.168.1.1": "", "93.184.215.14": "", "2606:4700::1": "",
	} {
		got := netguard.Forbidden(netip.MustParseAddr(addr))
		if why == "" {
			g.Expect(got).To(BeEmpty(), addr)
		} else {
			g.Expect(got).To(ContainSubstring(why), addr)
		}
	}
}

// TestRedirectsAndChartURLsToForbiddenAddressesAreRefused: an allowed repository that
// redirects its archive, or whose index names a chart URL, to a loopback or link-local
// address (cloud metadata) is refused at connection time: nothing reaches the other
// address.
func TestRedirectsAndChartURLsToForbiddenAddressesAreRefused(t *testing.T) {
	archive := packageChart(t, "small", small("1.0.0"))
	tripwire := newRecordingServer(t, archive)
	for name, target := range map[string]string{
		"loopback":          tripwire.URL + "/small-1.0.0.tgz",
		"loopback by name":  "http://localhost:" + portOf(tripwire.Server) + "/small-1.0.0.tgz",
		"cloud metadata":    "http://169.254.169.254/latest/meta-data/iam/security-credentials/",
		"link-local IPv6":   "http://[fe80::1]:8080/small-1.0.0.tgz",
		"unspecified":       "http://0.0.0.0:" + portOf(tripwire.Server) + "/small-1.0.0.tgz",
		"mapped IPv4 in v6": "http://[::ffff:127.0.0.1]:" + portOf(tripwire.Server) + "/small-1.0.0.tgz",
	} {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			for _, how := range []string{"redirect", "chart URL"} {
				repo := newHelmRepo(t, false)
				inner := repo.srv.Config.Handler
				repo.srv.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					if r.URL.Path == "/charts/small-1.0.0.tgz" {
						http.Redirect(w, r, target, http.StatusFound)
						return
					}
					inner.ServeHTTP(w, r)
				})
				rc := repoChart{name: "small", version: "1.0.0", archive: archive}
				if how == "chart URL" {
					rc.url = target
				}
				repo.add(rc)
				c := guardedClient(t, repo.srv)
				src := Source{Repository: repo.srv.URL, Name: "small"}
				_, err := c.Fetch(t.Context(), src, mustResolve(t, c, src))
				g.Expect(err).To(MatchError(sources.ErrInvalidSource), how)
				g.Expect(err).To(MatchError(ContainSubstring("refusing to connect to")), how)
				g.Expect(cacheEntries(t, c.CacheDir)).To(BeEmpty(), how)
			}
			g.Expect(tripwire.auth).To(BeEmpty(), "nothing reached the forbidden address")
		})
	}
}

// fakeRegistry is a server that answers every request, /v2/ included, with handler.
func fakeRegistry(t testing.TB, handler http.HandlerFunc) *httptest.Server {
	s := httptest.NewServer(handler)
	t.Cleanup(s.Close)
	return s
}

// TestOCITokenRealmOnLoopbackIsRefused: an allowed registry whose challenge sends the
// client to a token realm on a loopback address (by a name: go-containerregistry refuses
// literal ones itself) gets no request there.
func TestOCITokenRealmOnLoopbackIsRefused(t *testing.T) {
	g := NewWithT(t)
	tripwire := newRecordingServer(t, []byte(`{"token":"t"}`))
	reg := fakeRegistry(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("WWW-Authenticate", `Bearer realm="http://localhost:`+portOf(tripwire.Server)+`/token",service="registry"`)
		http.Error(w, `{"errors":[{"code":"UNAUTHORIZED","message":"token required"}]}`, http.StatusUnauthorized)
	})
	c := guardedClient(t, reg)
	_, err := c.Resolve(t.Context(), Source{Repository: "oci://" + hostOf(reg) + "/charts", Name: "small", Version: "1.0.0"})
	g.Expect(err).To(MatchError(sources.ErrInvalidSource))
	g.Expect(err).To(MatchError(ContainSubstring("refusing to connect to")))
	g.Expect(tripwire.auth).To(BeEmpty())
}

// TestAnswerBodiesAreNotQuoted: what a server that is no chart repository answers — a
// registry's /v2/, a token realm's answer, an index — reaches errors (and so the
// SyncTarget's status) as a short, one-line excerpt at most, never whole.
func TestAnswerBodiesAreNotQuoted(t *testing.T) {
	secret := "ami-id: SECRET-METADATA-" + strings.Repeat("x", 4000) + "\nline two"
	for name, h := range map[string]http.HandlerFunc{
		"registry text": func(w http.ResponseWriter, r *http.Request) { http.Error(w, secret, http.StatusNotFound) },
		"registry JSON": func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(http.StatusBadRequest)
			_, _ = fmt.Fprintf(w, `{"errors":[{"code":"NAME_UNKNOWN","message":%q,"detail":%q}]}`, secret, secret)
		},
		"token answer": func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/token" {
				_, _ = fmt.Fprintf(w, `{"note":%q}`, secret)
				return
			}
			w.Header().Set("WWW-Authenticate", `Bearer realm="http://`+r.Host+`/token",service="registry"`)
			w.WriteHeader(http.StatusUnauthorized)
		},
	} {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			reg := fakeRegistry(t, h)
			c := guardedClient(t, reg)
			_, err := c.Resolve(t.Context(), Source{Repository: "oci://" + hostOf(reg) + "/charts", Name: "small", Version: "1.0.0"})
			g.Expect(err).To(HaveOccurred())
			g.Expect(err.Error()).NotTo(ContainSubstring("x" + strings.Repeat("x", maxQuoted)))
			g.Expect(err.Error()).NotTo(ContainSubstring("line two"))
			g.Expect(err.Error()).NotTo(ContainSubstring("\n"))
			g.Expect(len(err.Error())).To(BeNumerically("<", maxDetail+300))
		})
	}
}

// TestProxiedDestinationsAreChecked: through a proxy the connection made is to the proxy,
// so the destination is checked before: a forbidden one never reaches the proxy; another
// goes through it. A Transport whose dials cannot be checked is refused.
func TestProxiedDestinationsAreChecked(t *testing.T) {
	g := NewWithT(t)
	proxy := newRecordingServer(t, []byte("through the proxy"))
	c := guardedClient(t, proxy.Server)
	proxyURL, err := url.Parse(proxy.URL)
	g.Expect(err).NotTo(HaveOccurred())
	tr := &http.Transport{Proxy: c.checkedProxy(http.ProxyURL(proxyURL)), DialContext: c.dialer().DialContext}
	for _, target := range []string{"http://169.254.169.254/latest/meta-data/", "https://[fe80::1]:8443/", "http://localhost:1/index.yaml", "http://0.0.0.0/"} {
		req, _ := http.NewRequest(http.MethodGet, target, nil)
		_, err := tr.RoundTrip(req)
		g.Expect(err).To(MatchError(sources.ErrInvalidSource), target)
		g.Expect(err).To(MatchError(ContainSubstring("refusing to connect to")), target)
	}
	g.Expect(proxy.auth).To(BeEmpty())

	req, _ := http.NewRequest(http.MethodGet, "http://93.184.215.14/index.yaml", nil)
	resp, err := tr.RoundTrip(req)
	g.Expect(err).NotTo(HaveOccurred())
	_ = resp.Body.Close()
	g.Expect(proxy.auth).To(HaveLen(1), "an allowed destination goes through the proxy")

	c.HTTPClient = &http.Client{Transport: roundTripperFunc(http.DefaultTransport.RoundTrip)}
	_, err = c.Resolve(t.Context(), Source{Repository: "https://charts.example", Name: "small"})
	g.Expect(err).To(MatchError(sources.ErrInvalidSource))
	g.Expect(err).To(MatchError(ContainSubstring("cannot be checked")))
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
