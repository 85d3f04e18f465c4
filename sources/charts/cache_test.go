package charts

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/converge-gitops/converge/sources"
)

// privateChart is a chart only its owner may read.
func privateChart(t testing.TB) []byte {
	files := small("1.0.0")
	files["values.yaml"] = []byte("greeting: tenant-a-private-value\n")
	return packageChart(t, "small", files)
}

// basicAuth accepts user and password only.
func basicAuth(user, password string) func(*http.Request) bool {
	return func(r *http.Request) bool {
		u, p, ok := r.BasicAuth()
		return ok && u == user && p == password
	}
}

// TestCacheIsNotSharedAcrossRepositories: tenant B's own repository, whose index names the
// digest of tenant A's private chart (status and notifications show it), is asked for the
// archive — B gets what B's repository serves, never A's chart from the cache; A's
// repository sees no request of B's.
func TestCacheIsNotSharedAcrossRepositories(t *testing.T) {
	g := NewWithT(t)
	archiveA := privateChart(t)
	repoA := newHelmRepo(t, false)
	repoA.auth = basicAuth("tenant-a", "a-pass-word")
	repoA.add(repoChart{name: "small", version: "1.0.0", archive: archiveA})
	c := newClient(t) // one client, as the daemon has, for every tenant
	srcA := Source{Repository: repoA.srv.URL, Name: "small", Credentials: Credentials{Username: "tenant-a", Password: "a-pass-word"}}
	resA := mustResolve(t, c, srcA)
	dirA, err := c.Fetch(t.Context(), srcA, resA)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(os.ReadFile(filepath.Join(dirA, "values.yaml"))).To(ContainSubstring("tenant-a-private-value"))
	requestsA := repoA.requests.Load()

	// B's index names A's digest; B's archive at that version is B's own (another one).
	repoB := newHelmRepo(t, false)
	repoB.add(repoChart{name: "small", version: "1.0.0", archive: packageChart(t, "small", small("1.0.0")), digest: hexDigest(resA.Digest)})
	srcB := Source{Repository: repoB.srv.URL, Name: "small"}
	resB := mustResolve(t, c, srcB)
	g.Expect(resB.Digest).To(Equal(resA.Digest))
	for _, r := range []Resolved{resB, {Version: resB.Version, Digest: resB.Digest}} {
		dir, err := c.Fetch(t.Context(), srcB, r)
		g.Expect(err).To(MatchError(ErrBadArchive), "B's repository was asked, and its archive is not A's")
		g.Expect(dir).To(BeEmpty())
	}
	g.Expect(repoB.requests.Load()).To(BeNumerically(">=", 3), "B's index and B's archive were asked for")
	g.Expect(repoA.requests.Load()).To(Equal(requestsA), "nothing of B's reached A's repository")
}

// TestCacheIsNotSharedAcrossCredentials: the same repository with other credentials (or
// none) is asked again — and refuses them; the same credentials share the cache, as they
// would get the same archive.
func TestCacheIsNotSharedAcrossCredentials(t *testing.T) {
	g := NewWithT(t)
	repo := newHelmRepo(t, false)
	repo.auth = basicAuth("tenant-a", "a-pass-word")
	repo.add(repoChart{name: "small", version: "1.0.0", archive: privateChart(t)})
	c := newClient(t)
	src := Source{Repository: repo.srv.URL, Name: "small", Credentials: Credentials{Username: "tenant-a", Password: "a-pass-word"}}
	r := mustResolve(t, c, src)
	dir, err := c.Fetch(t.Context(), src, r)
	g.Expect(err).NotTo(HaveOccurred())

	for name, creds := range map[string]Credentials{
		"none":      {},
		"wrong":     {Username: "tenant-a", Password: "guessed-pass"},
		"bearer":    {BearerToken: "another-token"},
		"custom CA": {Username: "tenant-a", Password: "a-pass-word", CA: []byte("-----BEGIN CERTIFICATE-----")},
	} {
		before := repo.requests.Load()
		other := src
		other.Credentials = creds
		got, err := c.Fetch(t.Context(), other, r)
		g.Expect(err).To(HaveOccurred(), name)
		g.Expect(got).To(BeEmpty(), name)
		if name != "custom CA" {
			g.Expect(err).To(MatchError(sources.ErrAuthFailed), name)
			g.Expect(repo.requests.Load()).To(BeNumerically(">", before), name)
		}
	}

	before := repo.requests.Load()
	again, err := c.Fetch(t.Context(), src, Resolved{Version: r.Version, Digest: r.Digest})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(again).To(Equal(dir))
	g.Expect(repo.requests.Load()).To(Equal(before), "the same repository and credentials: from the cache")
}

// fakeClock is a time tests move.
type fakeClock struct{ now time.Time }

func (f *fakeClock) Now() time.Time          { return f.now }
func (f *fakeClock) advance(d time.Duration) { f.now = f.now.Add(d) }

// TestCacheIsCollected: after a download grows the cache past MaxCacheBytes, the charts
// used least recently go; a chart unused for CacheMaxAge goes; a chart used within the
// last minutes stays whatever the size; a client started on the cache of another (a
// restart) knows its charts and their last use, and removes what an interrupted download
// and the former layout left.
func TestCacheIsCollected(t *testing.T) {
	g := NewWithT(t)
	repo := newHelmRepo(t, false)
	for _, v := range []string{"1.0.0", "1.1.0", "1.2.0", "1.3.0", "1.4.0"} {
		repo.add(repoChart{name: "small", version: v, archive: packageChart(t, "small", small(v))})
	}
	clock := &fakeClock{now: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)}
	c := newClient(t)
	c.Now = clock.Now
	src := Source{Repository: repo.srv.URL, Name: "small"}
	fetch := func(c *Client, v string) string {
		t.Helper()
		src := src
		src.Version = v
		dir, err := c.Fetch(t.Context(), src, mustResolve(t, c, src))
		g.Expect(err).NotTo(HaveOccurred(), v)
		return filepath.Dir(dir)
	}
	d100 := fetch(c, "1.0.0")
	size := dirSize(d100)
	g.Expect(size).To(BeNumerically(">", 0))
	c.MaxCacheBytes = 2*size + size/2 // room for two charts

	clock.advance(time.Hour)
	d110 := fetch(c, "1.1.0")
	clock.advance(time.Hour)
	g.Expect(fetch(c, "1.0.0")).To(Equal(d100)) // used again: 1.1.0 is the least recent
	clock.advance(time.Hour)
	d120 := fetch(c, "1.2.0")
	g.Expect(d100).To(BeADirectory())
	g.Expect(d120).To(BeADirectory())
	g.Expect(d110).NotTo(BeAnExistingFile(), "the least recently used chart went")

	// Within the grace period, charts stay even over the size.
	clock.advance(time.Minute)
	g.Expect(fetch(c, "1.0.0")).To(Equal(d100))
	d130 := fetch(c, "1.3.0")
	g.Expect([]string{d100, d120, d130}).To(HaveEach(BeADirectory()))

	// A restart: the same directory, another client, a day later. It knows the charts
	// from the disk, and what is left of a download and of the former layout goes.
	leftTmp := filepath.Join(c.CacheDir, ".tmp-interrupted")
	oldLayout := filepath.Join(c.CacheDir, "sha256-"+strings.Repeat("ab", 32))
	g.Expect(os.MkdirAll(filepath.Join(leftTmp, "small"), 0o755)).To(Succeed())
	g.Expect(os.MkdirAll(filepath.Join(oldLayout, "small"), 0o755)).To(Succeed())
	for _, dir := range []string{leftTmp, oldLayout} {
		g.Expect(os.Chtimes(dir, clock.now, clock.now)).To(Succeed())
	}
	clock.advance(DefaultCacheMaxAge + time.Hour)
	restarted := &Client{CacheDir: c.CacheDir, Now: clock.Now, AllowLoopback: true}
	d140 := fetch(restarted, "1.4.0")
	g.Expect(d140).To(BeADirectory())
	for _, gone := range []string{d100, d120, d130, leftTmp, oldLayout} {
		g.Expect(gone).NotTo(BeAnExistingFile(), gone)
	}
	g.Expect(cacheEntries(t, filepath.Dir(d140))).To(ConsistOf(filepath.Base(d140)))
}

// TestDerivedCacheDirIsUnderTheCacheDir: the charts are kept inside the daemon's cache
// directory, never beside it (the Deployment's volume is the cache directory itself).
func TestDerivedCacheDirIsUnderTheCacheDir(t *testing.T) {
	g := NewWithT(t)
	for _, dir := range []string{"/cache", "/cache/", "/var/cache/converge", "relative"} {
		rel, err := filepath.Rel(filepath.Clean(dir), CacheDir(dir))
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(rel).NotTo(HavePrefix(".."), dir)
		g.Expect(rel).NotTo(Equal("."), dir)
	}
}
