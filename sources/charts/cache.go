package charts

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"time"
)

// Defaults of the cache's collection.
const (
	// DefaultCacheBytes bounds the extracted charts the cache keeps.
	DefaultCacheBytes = 1 << 30
	// DefaultCacheMaxAge: a chart unused for that long is removed.
	DefaultCacheMaxAge = 24 * time.Hour
	// cacheGrace: a chart used this recently is never removed (a render may be reading
	// it), nor a temporary directory this young (a download may be writing it).
	cacheGrace = 10 * time.Minute
	// collectEvery: a Fetch served from the cache collects at most this often (a download
	// collects every time).
	collectEvery = 10 * time.Minute
)

// CacheDir is where the daemon keeps the charts when its checkouts are in checkouts: a
// directory inside it (as the gitDirectories generator's are), so that the charts live on
// the volume the cache directory is. The checkouts' collector removes only directories
// named by a Git commit; the charts' are not.
func CacheDir(checkouts string) string { return filepath.Join(checkouts, "charts") }

// chartCache is what the client knows of its cache directory: every chart in it, its
// size and last use. The disk is read once, at the first use.
type chartCache struct {
	mu        sync.Mutex
	loaded    bool
	entries   map[string]*cacheEntry // by directory, <scope>/sha256-<hex>
	collected time.Time
}

// cacheEntry is an archive extracted into the cache.
type cacheEntry struct {
	bytes int64
	used  time.Time
}

var (
	scopePattern  = regexp.MustCompile(`^[0-9a-f]{32}$`)
	entryPattern  = regexp.MustCompile(`^sha256-[0-9a-f]{64}$`)
	transientName = regexp.MustCompile(`^\.(tmp|trash)-`)
)

func (c *Client) now() time.Time {
	if c.Now != nil {
		return c.Now()
	}
	return time.Now()
}

// scopeDir is the part of the cache of one repository with one set of credentials. A chart
// is served from the cache only to a source naming the same repository with the same
// credentials: the source that downloaded it, or one that would get the same archive with
// the same request. Any other asks its own repository. The name is a hash: no credential
// is in a path. Artifacts have scopes of their own, apart from charts', one for each layer
// media type chosen (the same manifest gives another tree by another layer).
func (c *Client) scopeDir(src Source) string {
	parts := []string{"chart cache scope", strings.TrimSuffix(src.Repository, "/"), src.Credentials.digest()}
	if src.IsArtifact() {
		parts = append([]string{"artifact cache scope", src.LayerMediaType}, parts[1:]...)
	}
	h := sha256.New()
	for _, v := range parts {
		_, _ = fmt.Fprintf(h, "%d:%s;", len(v), v)
	}
	return filepath.Join(c.CacheDir, hex.EncodeToString(h.Sum(nil))[:32])
}

// entryDir is where the archive of digest, from src's repository, is extracted.
func (c *Client) entryDir(src Source, digest string) string {
	return filepath.Join(c.scopeDir(src), "sha256-"+hexDigest(digest))
}

// cached returns the directory of the chart, or of the artifact's tree, when the cache
// holds it for src, and marks it used.
func (c *Client) cached(src Source, r Resolved) (string, bool) {
	entry := c.entryDir(src, r.Digest)
	lay := src.layout()
	dir := filepath.Join(entry, lay.top)
	c.cache.mu.Lock()
	defer c.cache.mu.Unlock()
	c.load()
	e, ok := c.cache.entries[entry]
	if !ok {
		return "", false
	}
	if !lay.holds(dir) {
		return "", false
	}
	e.used = c.now()
	_ = os.Chtimes(entry, e.used, e.used) // the last use, for the next process
	return dir, true
}

// place renames tmp, an extracted archive of bytes, into the cache as entry (unless
// another download put it there meanwhile), and marks it used.
func (c *Client) place(tmp, entry string, bytes int64) error {
	c.cache.mu.Lock()
	defer c.cache.mu.Unlock()
	c.load()
	if err := os.MkdirAll(filepath.Dir(entry), 0o755); err != nil {
		return fmt.Errorf("chart cache: %w", err)
	}
	if err := os.Rename(tmp, entry); err != nil && !errors.Is(err, fs.ErrExist) && !isNotEmpty(err) {
		return fmt.Errorf("chart cache: %w", err)
	}
	now := c.now()
	_ = os.Chtimes(entry, now, now)
	if e, ok := c.cache.entries[entry]; ok {
		e.used = now
	} else {
		c.cache.entries[entry] = &cacheEntry{bytes: bytes, used: now}
	}
	return nil
}

// load reads, once, the charts the cache directory holds — their last use is their
// directory's time — and removes what an interrupted download, a collection or the
// former layout (charts shared by every repository) left there. Called with cache.mu held.
func (c *Client) load() {
	if c.cache.loaded {
		return
	}
	c.cache.loaded = true
	c.cache.entries = map[string]*cacheEntry{}
	top, _ := os.ReadDir(c.CacheDir)
	for _, d := range top {
		p := filepath.Join(c.CacheDir, d.Name())
		switch {
		case !d.IsDir():
		case entryPattern.MatchString(d.Name()):
			_ = os.RemoveAll(p)
		case transientName.MatchString(d.Name()):
			if fi, err := d.Info(); err == nil && c.now().Sub(fi.ModTime()) >= cacheGrace {
				_ = os.RemoveAll(p)
			}
		case scopePattern.MatchString(d.Name()):
			c.loadScope(p)
		}
	}
}

// loadScope reads the charts of one scope directory.
func (c *Client) loadScope(scope string) {
	list, _ := os.ReadDir(scope)
	for _, d := range list {
		if !d.IsDir() || !entryPattern.MatchString(d.Name()) {
			continue
		}
		fi, err := d.Info()
		if err != nil {
			continue
		}
		entry := filepath.Join(scope, d.Name())
		c.cache.entries[entry] = &cacheEntry{bytes: dirSize(entry), used: fi.ModTime()}
	}
}

// collectSometimes collects when the last collection is older than collectEvery.
func (c *Client) collectSometimes() {
	c.cache.mu.Lock()
	due := c.now().Sub(c.cache.collected) >= collectEvery
	c.cache.mu.Unlock()
	if due {
		c.collect()
	}
}

// collect removes the charts unused for CacheMaxAge, then, while the cache is larger than
// MaxCacheBytes, the charts used least recently — never one used within cacheGrace. A
// chart is moved out of sight under the lock, so that cached sees it whole or not at all,
// and deleted after.
func (c *Client) collect() {
	c.cache.mu.Lock()
	c.load()
	now := c.now()
	c.cache.collected = now
	var trash []string
	for _, entry := range c.victims(now) {
		if t, err := os.MkdirTemp(c.CacheDir, ".trash-"); err == nil {
			if err := os.Rename(entry, filepath.Join(t, "chart")); err != nil && !errors.Is(err, fs.ErrNotExist) {
				_ = os.Remove(t)
				continue
			}
			trash = append(trash, t)
		}
		delete(c.cache.entries, entry)
		_ = os.Remove(filepath.Dir(entry)) // the scope, when it is empty now
	}
	c.cache.mu.Unlock()
	for _, t := range trash {
		_ = os.RemoveAll(t)
	}
}

// victims are the entries to remove at now. Called with cache.mu held.
func (c *Client) victims(now time.Time) []string {
	maxAge, maxBytes := c.CacheMaxAge, c.MaxCacheBytes
	if maxAge <= 0 {
		maxAge = DefaultCacheMaxAge
	}
	if maxBytes <= 0 {
		maxBytes = DefaultCacheBytes
	}
	var out, old []string
	var total int64
	for entry, e := range c.cache.entries {
		idle := now.Sub(e.used)
		switch {
		case idle >= maxAge && idle >= cacheGrace:
			out = append(out, entry)
			continue
		case idle >= cacheGrace:
			old = append(old, entry)
		}
		total += e.bytes
	}
	sort.Slice(old, func(i, j int) bool { return c.cache.entries[old[i]].used.Before(c.cache.entries[old[j]].used) })
	for _, entry := range old {
		if total <= maxBytes {
			break
		}
		out = append(out, entry)
		total -= c.cache.entries[entry].bytes
	}
	return out
}

// dirSize is the size of the regular files under dir.
func dirSize(dir string) int64 {
	var n int64
	_ = filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if fi, err := d.Info(); err == nil {
				n += fi.Size()
			}
		}
		return nil
	})
	return n
}
