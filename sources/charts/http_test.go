package charts

import (
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"testing"

	. "github.com/onsi/gomega"

	"github.com/converge-gitops/converge/sources"
)

// newClient is a client of the repositories of tests, on loopback.
func newClient(t testing.TB) *Client {
	return &Client{CacheDir: filepath.Join(t.TempDir(), "charts"), AllowLoopback: true}
}

// TestHTTPRepositoryVersions: an exact version is that version; a range is its newest
// match; the chart fetched is the one of the version, read from a cache afterwards.
func TestHTTPRepositoryVersions(t *testing.T) {
	g := NewWithT(t)
	repo := newHelmRepo(t, false)
	for _, v := range []string{"6.4.0", "6.5.0", "6.10.1", "7.0.0-rc.1"} {
		repo.add(repoChart{name: "podinfo", version: v, archive: podinfo(t, v)})
	}
	c := newClient(t)
	src := Source{Repository: repo.srv.URL, Name: "podinfo"}

	for version, want := range map[string]string{"6.5.0": "6.5.0", ">=6.4 <6.10": "6.5.0", "~6": "6.10.1", "": "6.10.1", "7.0.0-rc.1": "7.0.0-rc.1"} {
		src.Version = version
		r, err := c.Resolve(t.Context(), src)
		g.Expect(err).NotTo(HaveOccurred(), version)
		g.Expect(r.Version).To(Equal(want), version)
		g.Expect(r.Digest).To(Equal("sha256:"+sha(podinfo(t, want))), version)
		g.Expect(r.URL).To(Equal(repo.srv.URL + "/charts/podinfo-" + want + ".tgz"))
	}

	src.Version = "6.5.0"
	r, err := c.Resolve(t.Context(), src)
	g.Expect(err).NotTo(HaveOccurred())
	parsed, err := ParseRevision(r.String())
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(parsed).To(Equal(Resolved{Version: "6.5.0", Digest: r.Digest}))

	// Fetched by the revision alone (no URL): the index gives it.
	dir, err := c.Fetch(t.Context(), src, parsed)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(filepath.Base(dir)).To(Equal("podinfo"))
	chartYAML, err := os.ReadFile(filepath.Join(dir, "Chart.yaml"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(chartYAML)).To(ContainSubstring("version: 6.5.0"))
	g.Expect(filepath.Join(dir, "templates", "deployment.yaml")).To(BeARegularFile())

	before := repo.requests.Load()
	again, err := c.Fetch(t.Context(), src, parsed)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(again).To(Equal(dir))
	g.Expect(repo.requests.Load()).To(Equal(before), "a cached chart costs no request")

	src.Version = ">=8"
	_, err = c.Resolve(t.Context(), src)
	g.Expect(err).To(MatchError(sources.ErrRefNotFound))
	g.Expect(err).To(MatchError(ContainSubstring(`no version matches ">=8"`)))
	_, err = c.Resolve(t.Context(), Source{Repository: repo.srv.URL, Name: "absent"})
	g.Expect(err).To(MatchError(ContainSubstring("the repository has no such chart")))
}

// TestHTTPNewVersionIsFoundOnTheNextResolve, and an unchanged index is revalidated
// without being sent again.
func TestHTTPNewVersionIsFoundOnTheNextResolve(t *testing.T) {
	g := NewWithT(t)
	repo := newHelmRepo(t, false)
	repo.add(repoChart{name: "small", version: "1.0.0", archive: packageChart(t, "small", small("1.0.0"))})
	c := newClient(t)
	src := Source{Repository: repo.srv.URL + "/", Name: "small", Version: "^1"}
	r, err := c.Resolve(t.Context(), src)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(r.Version).To(Equal("1.0.0"))
	_, err = c.Resolve(t.Context(), src)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(repo.indexGET.Load()).To(Equal(int64(1)), "the unchanged index was answered 304")

	repo.add(repoChart{name: "small", version: "1.1.0", archive: packageChart(t, "small", small("1.1.0"))})
	r, err = c.Resolve(t.Context(), src)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(r.Version).To(Equal("1.1.0"))
	g.Expect(repo.indexGET.Load()).To(Equal(int64(2)))
}

// TestHTTPChartURLs: relative URLs resolve against the repository, absolute ones are
// followed; an index without digests gets the archive's.
func TestHTTPChartURLs(t *testing.T) {
	g := NewWithT(t)
	other := newHelmRepo(t, false)
	other.add(repoChart{name: "small", version: "2.0.0", archive: packageChart(t, "small", small("2.0.0"))})
	repo := newHelmRepo(t, false)
	repo.add(repoChart{name: "small", version: "1.0.0", archive: packageChart(t, "small", small("1.0.0")), url: "/charts/small-1.0.0.tgz"})
	repo.add(repoChart{name: "small", version: "1.1.0", archive: packageChart(t, "small", small("1.1.0")),
		url: repo.srv.URL + "/charts/small-1.1.0.tgz", digest: "-"})
	repo.add(repoChart{name: "small", version: "2.0.0", archive: other.charts[0].archive, url: other.srv.URL + "/charts/small-2.0.0.tgz"})
	c := newClient(t)
	for _, v := range []string{"1.0.0", "1.1.0", "2.0.0"} {
		src := Source{Repository: repo.srv.URL, Name: "small", Version: v}
		r, err := c.Resolve(t.Context(), src)
		g.Expect(err).NotTo(HaveOccurred(), v)
		g.Expect(r.Digest).To(Equal("sha256:"+sha(packageChart(t, "small", small(v)))), v)
		dir, err := c.Fetch(t.Context(), src, r)
		g.Expect(err).NotTo(HaveOccurred(), v)
		g.Expect(os.ReadFile(filepath.Join(dir, "Chart.yaml"))).To(ContainSubstring("version: " + v))
	}
	g.Expect(other.requests.Load()).To(Equal(int64(1)), "the absolute URL was followed")

	// The digest computed for the version the index gives none stands while the index
	// does: resolving it again costs the index's revalidation alone.
	before := repo.requests.Load()
	r, err := c.Resolve(t.Context(), Source{Repository: repo.srv.URL, Name: "small", Version: "1.1.0"})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(r.Digest).To(Equal("sha256:" + sha(packageChart(t, "small", small("1.1.0")))))
	g.Expect(repo.requests.Load()).To(Equal(before + 1))
}

// recordingServer serves archive at any path and records the Authorization headers.
type recordingServer struct {
	*httptest.Server
	mu   sync.Mutex
	auth []string
}

func newRecordingServer(t *testing.T, archive []byte) *recordingServer {
	s := &recordingServer{}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.auth = append(s.auth, r.Header.Get("Authorization"))
		s.mu.Unlock()
		_, _ = w.Write(archive)
	}))
	t.Cleanup(s.Close)
	return s
}

// TestHTTPCredentialsGoToTheRepositoryOnly: basic auth and bearer authenticate to the
// repository; a chart URL on another host, and a redirect to one, get no credentials;
// wrong credentials are an error that does not quote them.
func TestHTTPCredentialsGoToTheRepositoryOnly(t *testing.T) {
	archive := packageChart(t, "small", small("1.0.0"))
	for _, tc := range []struct {
		name  string
		creds Credentials
		ok    func(*http.Request) bool
	}{
		{"basic", Credentials{Username: "reader", Password: "s3cret-pass"}, func(r *http.Request) bool {
			u, p, ok := r.BasicAuth()
			return ok && u == "reader" && p == "s3cret-pass"
		}},
		{"bearer", Credentials{BearerToken: "t0ken-value"}, func(r *http.Request) bool {
			return r.Header.Get("Authorization") == "Bearer t0ken-value"
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			elsewhere := newRecordingServer(t, archive)
			repo := newHelmRepo(t, false)
			repo.auth = tc.ok
			repo.add(repoChart{name: "small", version: "1.0.0", archive: archive})
			repo.add(repoChart{name: "small", version: "1.1.0", archive: archive, url: elsewhere.URL + "/small-1.1.0.tgz"})
			c := newClient(t)
			src := Source{Repository: repo.srv.URL, Name: "small", Version: "1.0.0", Credentials: tc.creds}

			dir, err := c.Fetch(t.Context(), src, mustResolve(t, c, src))
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(filepath.Join(dir, "Chart.yaml")).To(BeARegularFile())

			src.Version = "1.1.0"
			_, err = c.Resolve(t.Context(), src) // same archive: served from the cache
			g.Expect(err).NotTo(HaveOccurred())
			c2 := newClient(t)
			_, err = c2.Fetch(t.Context(), src, mustResolve(t, c2, src))
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(elsewhere.auth).To(ConsistOf(""), "no credentials to another host")

			wrong := src
			wrong.Credentials = Credentials{Username: "reader", Password: "wr0ng-pass", BearerToken: ""}
			_, err = newClient(t).Resolve(t.Context(), wrong)
			g.Expect(err).To(MatchError(sources.ErrAuthFailed))
			g.Expect(err.Error()).NotTo(ContainSubstring("wr0ng-pass"))
		})
	}
}

func mustResolve(t testing.TB, c *Client, src Source) Resolved {
	t.Helper()
	r, err := c.Resolve(t.Context(), src)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestHTTPRedirectElsewhereDropsCredentials: the repository redirects the archive to
// another host, which gets no Authorization.
func TestHTTPRedirectElsewhereDropsCredentials(t *testing.T) {
	g := NewWithT(t)
	archive := packageChart(t, "small", small("1.0.0"))
	elsewhere := newRecordingServer(t, archive)
	repo := newHelmRepo(t, false)
	inner := repo.srv.Config.Handler
	repo.srv.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/charts/small-1.0.0.tgz" {
			http.Redirect(w, r, elsewhere.URL+"/small-1.0.0.tgz", http.StatusFound)
			return
		}
		inner.ServeHTTP(w, r)
	})
	repo.add(repoChart{name: "small", version: "1.0.0", archive: archive})
	c := newClient(t)
	src := Source{Repository: repo.srv.URL, Name: "small", Credentials: Credentials{Username: "u", Password: "redirected-pass"}}
	_, err := c.Fetch(t.Context(), src, mustResolve(t, c, src))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(elsewhere.auth).To(ConsistOf(""))
}

// TestHTTPCustomCA: a repository whose certificate the system does not trust is reached
// with ca.crt, and refused without.
func TestHTTPCustomCA(t *testing.T) {
	g := NewWithT(t)
	repo := newHelmRepo(t, true)
	repo.add(repoChart{name: "small", version: "1.0.0", archive: packageChart(t, "small", small("1.0.0"))})
	src := Source{Repository: repo.srv.URL, Name: "small"}
	_, err := newClient(t).Resolve(t.Context(), src)
	g.Expect(err).To(MatchError(sources.ErrUntrustedCertificate))

	src.Credentials.CA = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: repo.srv.Certificate().Raw})
	c := newClient(t)
	r, err := c.Resolve(t.Context(), src)
	g.Expect(err).NotTo(HaveOccurred())
	_, err = c.Fetch(t.Context(), src, r)
	g.Expect(err).NotTo(HaveOccurred())

	src.Credentials.CA = []byte("not a certificate")
	_, err = newClient(t).Resolve(t.Context(), src)
	g.Expect(err).To(MatchError(sources.ErrInvalidSource))
}

// TestSourceChecks: credentials in the URL, another scheme, a digest on an HTTP
// repository are refused before any request, without quoting the password.
func TestSourceChecks(t *testing.T) {
	g := NewWithT(t)
	c := newClient(t)
	for _, src := range []Source{
		{Repository: "https://user:hunter22@charts.example", Name: "x"},
		{Repository: "ftp://charts.example", Name: "x"},
		{Repository: "https://charts.example", Name: "../x"},
		{Repository: "https://charts.example", Name: "x", Digest: "sha256:" + sha(nil)},
	} {
		_, err := c.Resolve(t.Context(), src)
		g.Expect(err).To(MatchError(sources.ErrInvalidSource))
		g.Expect(err.Error()).NotTo(ContainSubstring("hunter22"))
	}
	_, err := ParseRevision("6.5.0@sha1:abc")
	g.Expect(err).To(MatchError(sources.ErrInvalidSource))
	g.Expect(Credentials{Password: "hunter22"}.String()).NotTo(ContainSubstring("hunter22"))
}
