package sources

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/go-git/go-billy/v5/osfs"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/cache"
	"github.com/go-git/go-git/v5/plumbing/format/packfile"
	"github.com/go-git/go-git/v5/plumbing/protocol/packp"
	"github.com/go-git/go-git/v5/plumbing/protocol/packp/capability"
	"github.com/go-git/go-git/v5/plumbing/protocol/packp/sideband"
	"github.com/go-git/go-git/v5/plumbing/storer"
	"github.com/go-git/go-git/v5/plumbing/transport"
	"github.com/go-git/go-git/v5/storage/filesystem"
	"k8s.io/utils/clock"
)

// Defaults of CacheOptions.
const (
	DefaultMaxBytes      int64 = 256 << 20
	DefaultMaxFiles      int64 = 100_000
	DefaultFetchTimeout        = 5 * time.Minute
	DefaultGCGracePeriod       = 10 * time.Minute
	DefaultMemoryBudget  int64 = 64 << 20
)

// CacheOptions configures a Cache.
type CacheOptions struct {
	// Dir holds the checkouts; created when missing. Required.
	Dir string
	// MaxBytes caps the total size of the files of one checkout (default 256 MiB).
	MaxBytes int64
	// MaxFiles caps the number of files and symlinks of one checkout (default 100 000).
	MaxFiles int64
	// FetchTimeout bounds one fetch, which runs on behalf of every caller waiting for it, whatever
	// their own deadlines (default 5m). Each caller still stops waiting at its own deadline, and
	// the fetch is cancelled when no caller waits any more.
	FetchTimeout time.Duration
	// GCGracePeriod protects a checkout from GC for this long after Checkout returned it, so that
	// a tree being read right now is not removed under its reader (default 10m).
	GCGracePeriod time.Duration
	// Clock is the time source of the grace period (default: the real clock).
	Clock clock.PassiveClock
	// MemoryBudget bounds the uncompressed objects of one fetch unpacked in memory, the fast
	// path (default 64 MiB). From the first object that does not fit, or that is larger than a
	// sixteenth of it, the fetch goes on into a pack on disk.
	MemoryBudget int64
}

// Cache keeps read-only checkouts, one directory per repository and commit, shared by every
// source on the same repository. A checkout is written in a temporary directory and renamed into
// place once complete, so a crash never leaves a partial checkout that is later used.
type Cache struct {
	opts CacheOptions
	tmp  string

	mu      sync.Mutex
	flights map[string]*flight
	used    map[string]time.Time // checkout dir → last handed out (or asked for)
}

type flight struct {
	done    chan struct{}
	err     error
	waiters int
	cancel  context.CancelFunc
}

// NewCache opens (creating it if needed) a cache in opts.Dir and removes what an interrupted
// fetch left behind.
func NewCache(opts CacheOptions) (*Cache, error) {
	if opts.Dir == "" {
		return nil, errors.New("cache directory not set")
	}
	if opts.MaxBytes <= 0 {
		opts.MaxBytes = DefaultMaxBytes
	}
	if opts.MaxFiles <= 0 {
		opts.MaxFiles = DefaultMaxFiles
	}
	if opts.FetchTimeout <= 0 {
		opts.FetchTimeout = DefaultFetchTimeout
	}
	if opts.MemoryBudget <= 0 {
		opts.MemoryBudget = DefaultMemoryBudget
	}
	if opts.GCGracePeriod < 0 {
		opts.GCGracePeriod = 0
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	dir, err := filepath.Abs(opts.Dir)
	if err != nil {
		return nil, fmt.Errorf("cache directory: %w", err)
	}
	opts.Dir = dir
	c := &Cache{
		opts:    opts,
		tmp:     filepath.Join(dir, ".tmp"),
		flights: map[string]*flight{},
		used:    map[string]time.Time{},
	}
	if err := removeTree(c.tmp); err != nil {
		return nil, fmt.Errorf("cleaning cache: %w", err)
	}
	if err := os.MkdirAll(c.tmp, 0o755); err != nil {
		return nil, fmt.Errorf("creating cache: %w", err)
	}
	return c, nil
}

// repoDir is where the checkouts of one repository live. Checkouts are not shared across
// repositories even for the same commit: a commit served from the cache must have been fetched
// from the repository the caller named, so that one tenant cannot read another's private commit
// by naming its SHA.
func (c *Cache) repoDir(rawURL string) string {
	sum := sha256.Sum256([]byte(strings.TrimSuffix(RedactURL(strings.TrimSpace(rawURL)), "/")))
	return filepath.Join(c.opts.Dir, hex.EncodeToString(sum[:])[:24])
}

// Path returns where the checkout of rev for src lives, and whether it is there now.
func (c *Cache) Path(src Source, rev Revision) (string, bool) {
	dir := filepath.Join(c.repoDir(src.URL), rev.Commit)
	fi, err := os.Lstat(dir)
	return dir, err == nil && fi.IsDir() && isHex(rev.Commit, 40)
}

// Checkout returns the read-only directory holding the tree of rev.Commit. When the commit is
// cached it returns at once, without network. Otherwise it fetches that one commit (depth 1)
// from src, writes its tree — files read-only, symlinks kept as symlinks — and moves it into
// place. Concurrent calls for the same repository and commit share one fetch. A commit that is
// no tip of any ref any more is fetched by its SHA when the server allows it.
//
// The caps of CacheOptions apply: exceeding one returns a *LimitError and caches nothing.
func (c *Cache) Checkout(ctx context.Context, src Source, rev Revision) (string, error) {
	red := newRedactor(src.URL, src.Auth)
	if !isHex(rev.Commit, 40) {
		return "", wrapErr(ctx, "fetch", src.URL, red,
			fmt.Errorf("%w: revision %q has no full sha1 commit", ErrInvalidSource, rev.String()))
	}
	dir := filepath.Join(c.repoDir(src.URL), rev.Commit)

	c.mu.Lock()
	c.used[dir] = c.opts.Clock.Now()
	c.mu.Unlock()
	if fi, err := os.Lstat(dir); err == nil && fi.IsDir() {
		return dir, nil
	}

	c.mu.Lock()
	f, ok := c.flights[dir]
	if !ok {
		fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.opts.FetchTimeout)
		f = &flight{done: make(chan struct{}), cancel: cancel}
		c.flights[dir] = f
		go c.run(fctx, f, src, rev, dir)
	}
	f.waiters++
	c.mu.Unlock()

	select {
	case <-f.done:
		if f.err != nil {
			return "", f.err
		}
		return dir, nil
	case <-ctx.Done():
		c.mu.Lock()
		f.waiters--
		if f.waiters == 0 {
			f.cancel()
			if c.flights[dir] == f {
				delete(c.flights, dir)
			}
		}
		c.mu.Unlock()
		return "", wrapErr(ctx, "fetch", src.URL, red, ctx.Err())
	}
}

// waiting is the number of callers waiting for the fetch of dir (tests only).
func (c *Cache) waiting(src Source, rev Revision) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if f, ok := c.flights[filepath.Join(c.repoDir(src.URL), rev.Commit)]; ok {
		return f.waiters
	}
	return 0
}

func (c *Cache) run(ctx context.Context, f *flight, src Source, rev Revision, dir string) {
	defer func() {
		f.cancel()
		c.mu.Lock()
		if c.flights[dir] == f {
			delete(c.flights, dir)
		}
		c.mu.Unlock()
		close(f.done)
	}()
	if err := c.fetch(ctx, src, rev, dir); err != nil {
		f.err = wrapErr(ctx, "fetch", src.URL, newRedactor(src.URL, src.Auth), err)
	}
}

func (c *Cache) fetch(ctx context.Context, src Source, rev Revision, dir string) error {
	r, err := newRemote(src)
	if err != nil {
		return err
	}
	tmp, err := os.MkdirTemp(c.tmp, rev.Commit[:12]+"-")
	if err != nil {
		return fmt.Errorf("%w: %v", ErrFetchFailed, err)
	}
	defer func() { _ = removeTree(tmp) }()

	hash := plumbing.NewHash(rev.Commit)
	objects, closeObjects, err := c.fetchPack(ctx, r, hash, tmp)
	if err != nil {
		return err
	}
	defer closeObjects()

	tree, list := filepath.Join(tmp, "tree"), filepath.Join(tmp, "files")
	w := &treeWriter{
		s: objects, commit: rev.Commit,
		maxBytes: c.opts.MaxBytes, maxFiles: c.opts.MaxFiles,
		buf:  make([]byte, 64<<10),
		base: c.baseFor(filepath.Dir(dir), rev.Commit),
	}
	if err := w.writeCommit(ctx, hash, tree); err != nil {
		return err
	}
	if err := writeFileList(list, w.list); err != nil {
		return fmt.Errorf("%w: %v", ErrFetchFailed, err)
	}
	if err := syncFS(tree); err != nil {
		return fmt.Errorf("%w: syncing checkout: %v", ErrFetchFailed, err)
	}
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return fmt.Errorf("%w: %v", ErrFetchFailed, err)
	}
	if err := os.Rename(tree, dir); err != nil {
		// Another process (or an abandoned fetch of ours) finished first: use its checkout.
		if fi, serr := os.Lstat(dir); serr == nil && fi.IsDir() {
			return nil
		}
		return fmt.Errorf("%w: moving checkout into place: %v", ErrFetchFailed, err)
	}
	if err := os.Chmod(dir, 0o555); err != nil {
		return fmt.Errorf("%w: %v", ErrFetchFailed, err)
	}
	// Without its list a checkout is only never shared: nothing to fail for.
	_ = os.Rename(list, dir+filesSuffix)
	return nil
}

// fetchPack lists the refs and fetches exactly one commit (fetchCommit) within the cache's
// caps: MaxBytes, MaxFiles and MemoryBudget.
func (c *Cache) fetchPack(ctx context.Context, r *remote, hash plumbing.Hash, dir string) (storer.EncodedObjectStorer, func(), error) {
	s, done, err := r.session(ctx)
	if err != nil {
		return nil, nil, err
	}
	defer done()
	ar, err := s.AdvertisedReferencesContext(ctx)
	if err != nil {
		return nil, nil, err
	}
	return c.uploadPack(ctx, s, ar, hash, dir, "")
}

// uploadPack is fetchPack on a session whose refs were listed (ar). A filter, when the server
// supports filtering, leaves out what is not needed (trees and blobs, for signatures).
func (c *Cache) uploadPack(ctx context.Context, s transport.UploadPackSession, ar *packp.AdvRefs, hash plumbing.Hash,
	dir string, filter packp.Filter) (storer.EncodedObjectStorer, func(), error) {
	return fetchCommit(ctx, s, ar, hash, dir, filter, c.limits())
}

// limits are the caps of one fetch.
func (c *Cache) limits() fetchLimits {
	return fetchLimits{maxBytes: c.opts.MaxBytes, maxFiles: c.opts.MaxFiles, memoryBudget: c.opts.MemoryBudget}
}

// fetchLimits are the caps a fetch enforces on what the server sends: those of CacheOptions.
type fetchLimits struct {
	maxBytes, maxFiles, memoryBudget int64
}

// defaultFetchLimits are the caps of a fetch without a Cache (OpenBranch).
var defaultFetchLimits = fetchLimits{maxBytes: DefaultMaxBytes, maxFiles: DefaultMaxFiles, memoryBudget: DefaultMemoryBudget}

// fetchCommit asks the server of session s, whose refs were listed (ar), for exactly the
// commit hash with depth 1, and stores the objects of the pack it sends within lim: unpacked in
// memory while they fit the memory budget; beyond, the pack goes on into a pack in dir, read
// back lazily, without fetching it again. Every byte of the pack passes a packGuard first,
// which refuses it as soon as it declares more than a checkout within the caps unpacks to.
func fetchCommit(ctx context.Context, s transport.UploadPackSession, ar *packp.AdvRefs, hash plumbing.Hash,
	dir string, filter packp.Filter, lim fetchLimits) (storer.EncodedObjectStorer, func(), error) {
	if err := checkWantable(ar, hash); err != nil {
		return nil, nil, err
	}
	req, err := newFetchRequest(ar, hash, filter)
	if err != nil {
		return nil, nil, err
	}
	resp, err := s.UploadPack(ctx, req)
	if err != nil {
		if strings.Contains(err.Error(), "not our ref") {
			return nil, nil, fmt.Errorf("%w: the server does not have commit %s (any more)", ErrRefNotFound, hash)
		}
		return nil, nil, err
	}
	defer func() { _ = resp.Close() }()

	var pack io.Reader = resp
	switch {
	case req.Capabilities.Supports(capability.Sideband64k):
		pack = sideband.NewDemuxer(sideband.Sideband64k, resp)
	case req.Capabilities.Supports(capability.Sideband):
		pack = sideband.NewDemuxer(sideband.Sideband, resp)
	}
	return storePack(pack, hash, dir, lim)
}

// checkWantable refuses a commit the server would not send: one that is no tip of a ref, from
// a server that does not allow fetching other commits by SHA.
func checkWantable(ar *packp.AdvRefs, hash plumbing.Hash) error {
	for _, m := range []map[string]plumbing.Hash{ar.References, ar.Peeled} {
		for _, h := range m {
			if h == hash {
				return nil
			}
		}
	}
	if ar.Capabilities.Supports(capability.AllowReachableSHA1InWant) || ar.Capabilities.Supports(capability.AllowTipSHA1InWant) {
		return nil
	}
	return fmt.Errorf("%w: commit %s is not the tip of any ref and the server does not allow fetching other commits by sha",
		ErrRefNotFound, hash)
}

// newFetchRequest wants hash alone, shallow, without progress, filtered with filter when the
// server supports each.
func newFetchRequest(ar *packp.AdvRefs, hash plumbing.Hash, filter packp.Filter) (*packp.UploadPackRequest, error) {
	req := packp.NewUploadPackRequestFromCapabilities(ar.Capabilities)
	req.Wants = []plumbing.Hash{hash}
	if ar.Capabilities.Supports(capability.Shallow) {
		req.Depth = packp.DepthCommits(1)
		if err := req.Capabilities.Set(capability.Shallow); err != nil {
			return nil, err
		}
	}
	if filter != "" && ar.Capabilities.Supports(capability.Filter) {
		req.Filter = filter
		if err := req.Capabilities.Set(capability.Filter); err != nil {
			return nil, err
		}
	}
	if ar.Capabilities.Supports(capability.NoProgress) {
		if err := req.Capabilities.Set(capability.NoProgress); err != nil {
			return nil, err
		}
	}
	return req, nil
}

// storePack reads the pack of commit hash through a packGuard into a memory storage, going on
// into a pack on disk in dir when its objects outgrow the memory budget.
func storePack(pack io.Reader, hash plumbing.Hash, dir string, lim fetchLimits) (storer.EncodedObjectStorer, func(), error) {
	// The pack is compressed and a tree within MaxBytes compresses to about that or less; twice
	// the cap (plus room for tree objects) stops a hostile server from filling the disk.
	lr := &limitedReader{r: pack, n: satAdd(satMul(2, lim.maxBytes), satMul(512, lim.maxFiles), 16<<20)}
	guard := newPackGuard(lr, packLimitsFor(lim.maxBytes, lim.maxFiles, hash.String()), lim.memoryBudget)
	failed := func(err error) error {
		switch {
		case lr.exceeded:
			return &LimitError{Limit: "MaxBytes", Max: lim.maxBytes, Commit: hash.String(),
				Reason: "the server's pack is larger than a checkout within the caps compresses to"}
		case guard.Err() != nil:
			return guard.Err()
		case strings.Contains(err.Error(), "not our ref"):
			return fmt.Errorf("%w: the server does not have commit %s (any more)", ErrRefNotFound, hash)
		}
		return err
	}

	// What go-git reads of the pack is kept on disk too, so that the pack can go on to disk
	// when its objects outgrow the memory budget: the guard stops before the first object that
	// does not fit, and the memory storage stops at any that still would not.
	spool, err := os.Create(filepath.Join(dir, "pack"))
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %v", ErrFetchFailed, err)
	}
	defer func() { _ = spool.Close() }()
	mem := newMemStorage(lim.memoryBudget)
	err = packfile.UpdateObjectStorage(mem, io.TeeReader(guard, spool))
	if err == nil {
		return mem, func() {}, nil
	}
	overBudget := guard.paused || errors.Is(err, errOverBudget)
	if !overBudget || lr.exceeded || guard.Err() != nil {
		return nil, nil, failed(err)
	}
	guard.toDisk()
	if _, err := spool.Seek(0, io.SeekStart); err != nil {
		return nil, nil, fmt.Errorf("%w: %v", ErrFetchFailed, err)
	}
	disk := filesystem.NewStorageWithOptions(osfs.New(filepath.Join(dir, "git")),
		cache.NewObjectLRU(32*cache.MiByte), filesystem.Options{ExclusiveAccess: true, KeepDescriptors: true, LargeObjectThreshold: smallBlob})
	if err := packfile.UpdateObjectStorage(disk, io.MultiReader(spool, guard)); err != nil {
		_ = disk.Close()
		return nil, nil, failed(err)
	}
	return disk, func() { _ = disk.Close() }, nil
}

type limitedReader struct {
	r        io.Reader
	n        int64
	exceeded bool
}

func (l *limitedReader) Read(p []byte) (int, error) {
	if l.n <= 0 {
		l.exceeded = true
		return 0, errors.New("pack larger than allowed")
	}
	if int64(len(p)) > l.n {
		p = p[:l.n]
	}
	n, err := l.r.Read(p)
	l.n -= int64(n)
	return n, err
}

// GC removes the checkouts whose commit keep rejects, except those handed out by Checkout within
// the grace period. It returns the directories removed. Callers keep at least the current and
// the last healthy revision of every SyncTarget.
func (c *Cache) GC(keep func(commit string) bool) ([]string, error) {
	repos, err := os.ReadDir(c.opts.Dir)
	if err != nil {
		return nil, fmt.Errorf("reading cache: %w", err)
	}
	var removed []string
	var errs []error
	now := c.opts.Clock.Now()
	c.mu.Lock()
	for dir, t := range c.used {
		if now.Sub(t) >= c.opts.GCGracePeriod {
			delete(c.used, dir) // includes checkouts that failed and never appeared
		}
	}
	c.mu.Unlock()
	for _, repo := range repos {
		if !repo.IsDir() || repo.Name() == filepath.Base(c.tmp) {
			continue
		}
		repoDir := filepath.Join(c.opts.Dir, repo.Name())
		r, err := c.gcRepo(repoDir, keep, now)
		removed = append(removed, r...)
		errs = append(errs, err)
		if left, err := os.ReadDir(repoDir); err == nil && len(left) == 0 {
			_ = os.Remove(repoDir)
		}
	}
	return removed, errors.Join(errs...)
}

// gcRepo is GC in the directory of one repository.
func (c *Cache) gcRepo(repoDir string, keep func(commit string) bool, now time.Time) ([]string, error) {
	entries, err := os.ReadDir(repoDir)
	if err != nil {
		return nil, err
	}
	var removed []string
	var errs []error
	for _, e := range entries {
		if commit, ok := strings.CutSuffix(e.Name(), filesSuffix); ok && isHex(commit, 40) {
			// A list goes with its checkout; one whose checkout is gone goes too.
			if _, err := os.Lstat(filepath.Join(repoDir, commit)); errors.Is(err, fs.ErrNotExist) {
				_ = os.Remove(filepath.Join(repoDir, e.Name()))
			}
			continue
		}
		if !isHex(e.Name(), 40) || keep(e.Name()) {
			continue
		}
		dir := filepath.Join(repoDir, e.Name())
		ok, err := c.remove(dir, now)
		if err != nil {
			errs = append(errs, err)
		}
		if ok {
			removed = append(removed, dir)
		}
	}
	return removed, errors.Join(errs...)
}

// remove removes the checkout dir unless it was handed out within the grace period. It
// reports whether the checkout is gone.
func (c *Cache) remove(dir string, now time.Time) (bool, error) {
	c.mu.Lock()
	if t, ok := c.used[dir]; ok && now.Sub(t) < c.opts.GCGracePeriod {
		c.mu.Unlock()
		return false, nil
	}
	// Move it out of sight first, under the lock, so Checkout either sees it whole or not;
	// its list first, so that no new checkout starts to share its files.
	_ = os.Remove(dir + filesSuffix)
	trash, err := os.MkdirTemp(c.tmp, "gc-")
	if err == nil {
		_ = os.Chmod(dir, 0o755) // renaming a directory across parents needs write access to it
		err = os.Rename(dir, filepath.Join(trash, "tree"))
	}
	delete(c.used, dir)
	c.mu.Unlock()
	if err != nil {
		return false, err
	}
	return true, removeTree(trash)
}

// removeTree removes a directory tree made read-only by a checkout.
func removeTree(dir string) error {
	if _, err := os.Lstat(dir); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			_ = os.Chmod(p, 0o755)
		}
		return nil
	})
	return os.RemoveAll(dir)
}
