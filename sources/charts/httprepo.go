package charts

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"sort"
	"strings"
	"sync"

	"github.com/Masterminds/semver/v3"
	"sigs.k8s.io/yaml"

	"github.com/converge-gitops/converge/sources"
)

// indexEntry is what converge reads of one chart version of an index.yaml.
type indexEntry struct {
	Version string   `json:"version"`
	URLs    []string `json:"urls"`
	Digest  string   `json:"digest"`
}

type indexFile struct {
	Entries map[string][]indexEntry `json:"entries"`
}

// cachedIndex is the last index.yaml read from a repository, with what revalidates it.
type cachedIndex struct {
	etag, lastModified string
	entries            map[string][]indexEntry
	// sums are the sha256 of archives the index gives no digest for, by URL, computed
	// while this index stood: a poll that finds the index unchanged downloads none again.
	sums sync.Map
}

var hexPattern = regexp.MustCompile(`^[0-9a-f]{64}$`)

// resolveHTTP reads the repository's index (revalidated: an unchanged one costs no
// download) and picks the newest version src.Version allows.
func (c *Client) resolveHTTP(ctx context.Context, src Source) (Resolved, error) {
	op := "resolve chart " + src.Name + " of"
	idx, err := c.index(ctx, src, true)
	if err != nil {
		return Resolved{}, wrap(ctx, op, src, err)
	}
	e, err := pick(idx.entries[src.Name], src.Version)
	if err != nil {
		return Resolved{}, wrap(ctx, op, src, err)
	}
	r, err := entryResolved(src, e)
	if err != nil {
		return Resolved{}, wrap(ctx, op, src, err)
	}
	if r.Digest != "" {
		return r, nil
	}
	// The index gives no digest: the archive's own is the revision's.
	if sum, ok := idx.sums.Load(r.URL); ok {
		r.Digest = "sha256:" + sum.(string)
		return r, nil
	}
	_, sum, err := c.downloadHTTP(ctx, src, r, "")
	if err != nil {
		return Resolved{}, wrap(ctx, op, src, err)
	}
	idx.sums.Store(r.URL, sum)
	r.Digest = "sha256:" + sum
	return r, nil
}

// entryResolved is the version of e with its absolute URL and digest ("" when the index
// gives none).
func entryResolved(src Source, e indexEntry) (Resolved, error) {
	if len(e.URLs) == 0 {
		return Resolved{}, fmt.Errorf("%w: version %s of chart %s has no URL in the index", sources.ErrFetchFailed, e.Version, src.Name)
	}
	u, err := chartURL(src.Repository, e.URLs[0])
	if err != nil {
		return Resolved{}, err
	}
	r := Resolved{Version: e.Version, URL: u.String()}
	if e.Digest != "" {
		d := strings.ToLower(strings.TrimPrefix(e.Digest, "sha256:"))
		if !hexPattern.MatchString(d) {
			return Resolved{}, fmt.Errorf("%w: version %s of chart %s has a digest that is not a sha256 in the index", sources.ErrFetchFailed, e.Version, src.Name)
		}
		r.Digest = "sha256:" + d
	}
	return r, nil
}

// chartURL resolves a chart URL of the index against the repository.
func chartURL(repository, ref string) (*url.URL, error) {
	base, err := url.Parse(strings.TrimSuffix(repository, "/") + "/")
	if err != nil {
		return nil, invalid("the repository is not a URL")
	}
	u, err := base.Parse(ref)
	if err != nil {
		return nil, fmt.Errorf("%w: the index has a chart URL that does not parse", sources.ErrFetchFailed)
	}
	if u.Scheme != "https" && u.Scheme != "http" {
		return nil, fmt.Errorf("%w: the index has a chart URL of scheme %q: only http and https are followed", sources.ErrFetchFailed, u.Scheme)
	}
	if u.User != nil {
		return nil, fmt.Errorf("%w: the index has a chart URL with credentials in it", sources.ErrFetchFailed)
	}
	return u, nil
}

// pick returns the newest entry that version (an exact version or a semver range; ""
// is "*") allows.
func pick(entries []indexEntry, version string) (indexEntry, error) {
	if len(entries) == 0 {
		return indexEntry{}, fmt.Errorf("%w: the repository has no such chart", sources.ErrRefNotFound)
	}
	for _, e := range entries {
		if version != "" && e.Version == version {
			return e, nil
		}
	}
	i, err := newest(len(entries), func(i int) string { return entries[i].Version }, version)
	if err != nil {
		return indexEntry{}, err
	}
	return entries[i], nil
}

// newest returns the index of the newest of n versions that constraint allows.
func newest(n int, version func(int) string, constraint string) (int, error) {
	in, err := inRange(n, version, constraint)
	if err != nil {
		return 0, err
	}
	if len(in) == 0 {
		if constraint == "" {
			constraint = "*"
		}
		return 0, fmt.Errorf("%w: no version matches %q", sources.ErrRefNotFound, constraint)
	}
	return in[0], nil
}

// inRange returns the indexes of the n versions that constraint (a version or a semver
// range; "" is "*") allows, newest first; versions that are not semver are left out.
func inRange(n int, version func(int) string, constraint string) ([]int, error) {
	if constraint == "" {
		constraint = "*"
	}
	cons, err := semver.NewConstraint(constraint)
	if err != nil {
		return nil, invalid("version %q is neither a version nor a semver range: %v", constraint, err)
	}
	var out []int
	parsed := map[int]*semver.Version{}
	for i := range n {
		v, err := semver.NewVersion(version(i))
		if err != nil || !cons.Check(v) {
			continue
		}
		out = append(out, i)
		parsed[i] = v
	}
	sort.SliceStable(out, func(a, b int) bool { return parsed[out[a]].GreaterThan(parsed[out[b]]) })
	return out, nil
}

// index returns the repository's index entries. With revalidate, the index is read again
// (conditionally: an unchanged index costs no download); without, a cached one serves.
func (c *Client) index(ctx context.Context, src Source, revalidate bool) (*cachedIndex, error) {
	key := src.Repository + "\x00" + src.Credentials.digest()
	c.mu.Lock()
	cached := c.indexes[key]
	c.mu.Unlock()
	if cached != nil && !revalidate {
		return cached, nil
	}
	u, err := chartURL(src.Repository, "index.yaml")
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, invalid("the repository is not a URL")
	}
	if cached != nil {
		setIf(req.Header, "If-None-Match", cached.etag)
		setIf(req.Header, "If-Modified-Since", cached.lastModified)
	}
	resp, err := c.do(req, src, true)
	if err != nil {
		return nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode == http.StatusNotModified && cached != nil {
		return cached, nil
	}
	fresh, err := c.readIndex(resp)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	if c.indexes == nil {
		c.indexes = map[string]*cachedIndex{}
	}
	c.indexes[key] = fresh
	c.mu.Unlock()
	return fresh, nil
}

func setIf(h http.Header, name, value string) {
	if value != "" {
		h.Set(name, value)
	}
}

// readIndex reads and parses an index.yaml answer, bounded by Limits.IndexBytes.
func (c *Client) readIndex(resp *http.Response) (*cachedIndex, error) {
	if err := okStatus(resp, "index.yaml"); err != nil {
		return nil, err
	}
	max := c.limits().IndexBytes
	if resp.ContentLength > max {
		return nil, limitErr("index.yaml", max)
	}
	data, err := io.ReadAll(io.LimitReader(resp.Body, max+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > max {
		return nil, limitErr("index.yaml", max)
	}
	var idx indexFile
	if err := yaml.Unmarshal(data, &idx); err != nil {
		return nil, fmt.Errorf("%w: index.yaml does not parse: %v", sources.ErrFetchFailed, err)
	}
	return &cachedIndex{etag: resp.Header.Get("ETag"), lastModified: resp.Header.Get("Last-Modified"), entries: idx.Entries}, nil
}

func okStatus(resp *http.Response, what string) error {
	if resp.StatusCode == http.StatusOK {
		return nil
	}
	return &statusError{code: resp.StatusCode, what: what}
}

// do sends req with the source's credentials when send is set and req goes to the
// repository's own origin — never to another host a chart URL names.
func (c *Client) do(req *http.Request, src Source, send bool) (*http.Response, error) {
	hc, err := c.httpClient(src)
	if err != nil {
		return nil, err
	}
	repo, err := url.Parse(src.Repository)
	if err != nil {
		return nil, invalid("the repository is not a URL")
	}
	cr := src.Credentials
	if send && sameOrigin(repo, req.URL) {
		switch {
		case cr.BearerToken != "":
			req.Header.Set("Authorization", "Bearer "+cr.BearerToken)
		case cr.Username != "" || cr.Password != "":
			req.SetBasicAuth(cr.Username, cr.Password)
		}
	}
	req.Header.Set("User-Agent", "converge")
	return hc.Do(req)
}

// fetchHTTP downloads the chart of r (its URL read from the index when r has none) into
// the cache.
func (c *Client) fetchHTTP(ctx context.Context, src Source, r Resolved) (string, error) {
	dir, _, err := c.downloadHTTP(ctx, src, r, hexDigest(r.Digest))
	if err != nil {
		return "", wrap(ctx, "fetch chart "+src.Name+" "+r.Version+" from", src, err)
	}
	return dir, nil
}

// downloadHTTP downloads and installs the archive of r, checking it against wantHex
// (unchecked when empty).
func (c *Client) downloadHTTP(ctx context.Context, src Source, r Resolved, wantHex string) (string, string, error) {
	u, err := c.archiveURL(ctx, src, r)
	if err != nil {
		return "", "", err
	}
	resp, err := c.get(ctx, src, u, "the chart archive", c.limits().ArchiveBytes)
	if err != nil {
		return "", "", err
	}
	defer func() { _ = resp.Body.Close() }()
	return c.install(resp.Body, wantHex, "", src)
}

// get sends a GET to u (credentials only to the repository's origin) and checks the
// answer's status and declared size.
func (c *Client) get(ctx context.Context, src Source, u, what string, max int64) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, fmt.Errorf("%w: bad URL for %s", sources.ErrFetchFailed, what)
	}
	resp, err := c.do(req, src, true)
	if err != nil {
		return nil, err
	}
	if err := okStatus(resp, what); err != nil {
		_ = resp.Body.Close()
		return nil, err
	}
	if resp.ContentLength > max {
		_ = resp.Body.Close()
		return nil, limitErr(what, max)
	}
	return resp, nil
}

// archiveURL is r's URL, or the one the index gives its version.
func (c *Client) archiveURL(ctx context.Context, src Source, r Resolved) (string, error) {
	if r.URL != "" {
		return r.URL, nil
	}
	for _, revalidate := range []bool{false, true} {
		idx, err := c.index(ctx, src, revalidate)
		if err != nil {
			return "", err
		}
		for _, e := range idx.entries[src.Name] {
			if e.Version == r.Version {
				res, err := entryResolved(src, e)
				return res.URL, err
			}
		}
	}
	return "", fmt.Errorf("%w: the index has no version %s of chart %s", sources.ErrRefNotFound, r.Version, src.Name)
}
