package render

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"sigs.k8s.io/kustomize/kyaml/filesys"
)

// mountPoint is where the checkout appears to kustomize. Kustomize only ever sees
// paths under it, so no host path of the shared checkout cache leaks into its
// errors, and anything it asks for outside it is refused. It is a directory below
// "/" on purpose: `../../outside` from a top-level folder cleans to "/outside",
// which is outside the mount point, rather than being clamped back into the repo.
const mountPoint = "/converge-checkout"

// maxSymlinkHops bounds symlink expansions while resolving one path (Linux uses 40).
const maxSymlinkHops = 40

// confinedFS is a read-only view of one checkout tree. Every path is resolved
// component by component with Lstat/Readlink through an os.Root, so no absolute
// path, `..` or symlink (absolute or relative, however chained) reaches a file
// outside the root: such paths are errors, not clamped. Symlinks that stay inside
// the root are followed. The os.Root then opens the resolved, symlink-free path,
// which the kernel confines to the root again.
//
// It enforces the file caps of Limits on everything read, caches what it read for
// the duration of one render, and implements kustomize's filesys.FileSystem over the
// virtual mountPoint. Once the render's context is done every call fails, so that
// kustomize, which takes no context, stops at its next file system call.
type confinedFS struct {
	ctx    context.Context
	root   *os.Root
	limits Limits
	// guardYAML checks the YAML of everything read for anchor bombs and deep nesting
	// before kustomize (whose parser expands aliases by copying) gets to see it.
	guardYAML bool
	// readHook, when set (tests only), runs before every file read.
	readHook func(ctx context.Context, rel string)
	// keys decrypt SOPS-encrypted files as they are read (sops.go); nil, such a file
	// fails the render. decrypted holds the plaintext of every value decrypted, for
	// redaction.
	keys      *Keys
	decrypted []string

	mu    sync.Mutex
	cache map[string][]byte
	// shown are the values of a chart rendered with HelmOptions.ShowValues.
	shown *ChartValues
	// plugins maps a directory listed under generators, transformers or validators
	// to the plugin configs it builds, built and checked by the preflight. Kustomize
	// reads such an entry as a file first: it gets these bytes, and never builds the
	// directory itself (see renderKustomize).
	plugins  map[string][]byte
	files    int   // distinct files read
	entries  int   // directory entries visited by the plain-YAML walk
	total    int64 // bytes read
	firstErr error // first policy violation (escape, loop, cap) raised on kustomize's behalf
}

var _ filesys.FileSystem = (*confinedFS)(nil)

func newConfinedFS(ctx context.Context, root *os.Root, limits Limits) *confinedFS {
	return &confinedFS{ctx: ctx, root: root, limits: limits, cache: map[string][]byte{}, plugins: map[string][]byte{}}
}

// alive fails once the render's context is done.
func (c *confinedFS) alive() error {
	return c.ctx.Err()
}

// resolved is a path relative to the root with every symlink expanded.
type resolved struct {
	rel  string // "." for the root itself; slash-separated otherwise
	info fs.FileInfo
}

// splitRel splits a slash path into its non-empty components.
func splitRel(p string) []string {
	var out []string
	for _, c := range strings.Split(filepath.ToSlash(p), "/") {
		if c != "" && c != "." {
			out = append(out, c)
		}
	}
	return out
}

// resolve expands rel, a path relative to the root, into the symlink-free path of
// the object it names. It fails with ErrOutsideRoot when rel or any symlink on the
// way leaves the root (absolute symlink targets always do), with ErrSymlinkLoop
// after maxSymlinkHops expansions, and with ErrNotFound when something is missing.
func (c *confinedFS) resolve(rel string) (resolved, error) {
	if err := c.alive(); err != nil {
		return resolved{}, err
	}
	if filepath.IsAbs(rel) {
		return resolved{}, classErr(ErrOutsideRoot, "%s is an absolute path", rel)
	}
	w := &resolution{rel: rel, todo: splitRel(rel)}
	for len(w.todo) > 0 {
		if err := c.resolveStep(w); err != nil {
			return resolved{}, err
		}
	}
	p := "."
	if len(w.done) > 0 {
		p = path.Join(w.done...)
	}
	if w.info == nil {
		fi, err := c.root.Stat(p)
		if err != nil {
			return resolved{}, fmt.Errorf("%w: %s: %s", ErrNotFound, p, errText(err))
		}
		w.info = fi
	}
	return resolved{rel: p, info: w.info}, nil
}

// resolution is a path being resolved: the components left to walk and those walked.
type resolution struct {
	rel        string   // the path asked for, for errors
	todo, done []string // components left, and the symlink-free components walked
	hops       int      // symlinks expanded so far
	via        string   // the last symlink expanded, to explain an escape
	info       fs.FileInfo
}

// resolveStep walks the next component of w: up for "..", through a symlink by queueing
// its target, or down into an entry of the directory walked so far.
func (c *confinedFS) resolveStep(w *resolution) error {
	comp := w.todo[0]
	w.todo = w.todo[1:]
	if comp == ".." {
		if len(w.done) == 0 {
			if w.via != "" {
				return classErr(ErrOutsideRoot, "%s: symlink %s", w.rel, w.via)
			}
			return classErr(ErrOutsideRoot, "%s", w.rel)
		}
		w.done, w.info = w.done[:len(w.done)-1], nil
		return nil
	}
	cur := path.Join(append(w.done, comp)...)
	fi, err := c.root.Lstat(cur)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return classErr(ErrNotFound, "%s", cur)
		}
		return fmt.Errorf("%w: %s: %s", ErrNotFound, cur, errText(err))
	}
	if fi.Mode()&fs.ModeSymlink != 0 {
		return c.followSymlink(w, cur)
	}
	if !fi.IsDir() && len(w.todo) > 0 {
		return classErr(ErrNotFound, "%s: not a directory", cur)
	}
	w.done, w.info = append(w.done, comp), fi
	return nil
}

// followSymlink queues the target of symlink cur in place of it.
func (c *confinedFS) followSymlink(w *resolution, cur string) error {
	w.hops++
	if w.hops > maxSymlinkHops {
		return classErr(ErrSymlinkLoop, "too many levels of symbolic links resolving %s", w.rel)
	}
	target, err := c.root.Readlink(cur)
	if err != nil {
		return fmt.Errorf("%w: %s: %s", ErrNotFound, cur, errText(err))
	}
	w.via = cur + " -> " + target
	if filepath.IsAbs(target) {
		return classErr(ErrOutsideRoot, "symlink %s points to an absolute path", w.via)
	}
	w.todo = append(splitRel(target), w.todo...)
	return nil
}

// errText is err's message without the host path an *fs.PathError carries.
func errText(err error) string {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err.Error()
	}
	return err.Error()
}

// readFile returns the content of the resolved regular file r, counting it against
// the caps once (later reads come from the cache). display names it in errors.
func (c *confinedFS) readFile(r resolved, display string) ([]byte, error) {
	if err := c.alive(); err != nil {
		return nil, err
	}
	if c.readHook != nil {
		c.readHook(c.ctx, r.rel)
		if err := c.alive(); err != nil {
			return nil, err
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if b, ok := c.cache[r.rel]; ok {
		return b, nil
	}
	if !r.info.Mode().IsRegular() {
		// Devices and FIFOs could block or never end; directories are not files.
		return nil, &Error{File: display, Err: classErr(ErrInvalidDocument, "not a regular file")}
	}
	if err := c.checkSize(r.info.Size(), 1); err != nil {
		return nil, &Error{File: display, Err: err}
	}
	b, err := c.readBounded(r, display)
	if err != nil {
		return nil, err
	}
	if c.guardYAML {
		if err := guardYAML(b, c.limits); err != nil {
			return nil, &Error{File: display, Err: err}
		}
	}
	b, plain, err := decryptSOPS(r.rel, b, c.keys, c.limits)
	if err != nil {
		return nil, &Error{File: display, Err: err}
	}
	c.decrypted = append(c.decrypted, plain...)
	c.files++
	c.total += int64(len(b))
	c.cache[r.rel] = b
	return b, nil
}

// checkSize fails when one more file (newFiles 1) or one more read of a file already
// counted (0) of size bytes would pass the caps; a size below 0 is not known yet.
func (c *confinedFS) checkSize(size int64, newFiles int) error {
	switch {
	case size > c.limits.MaxFileSize:
		return classErr(ErrLimitExceeded, "%d bytes, more than the %d-byte file size limit", size, c.limits.MaxFileSize)
	case c.files+newFiles > c.limits.MaxFiles:
		return classErr(ErrLimitExceeded, "more than %d files", c.limits.MaxFiles)
	case c.total+size > c.limits.MaxTotalBytes:
		return classErr(ErrLimitExceeded, "more than %d bytes in total", c.limits.MaxTotalBytes)
	}
	return nil
}

// readBounded reads the regular file r, never more than the caps allow, whatever its size
// said before the read.
func (c *confinedFS) readBounded(r resolved, display string) ([]byte, error) {
	fail := func(err error) error { return &Error{File: display, Err: err} }
	f, err := c.root.Open(r.rel)
	if err != nil {
		return nil, fail(classErr(ErrNotFound, "%s", errText(err)))
	}
	defer func() { _ = f.Close() }()
	if r.info.Size() < 0 { // known from a directory listing only: stat the open file
		fi, err := f.Stat()
		if err != nil {
			return nil, fail(classErr(ErrNotFound, "%s", errText(err)))
		}
		if !fi.Mode().IsRegular() {
			return nil, fail(classErr(ErrInvalidDocument, "not a regular file"))
		}
		if err := c.checkSize(fi.Size(), 0); err != nil {
			return nil, fail(err)
		}
	}
	// The checkout is read-only, but never trust a size taken before the read.
	b, err := io.ReadAll(io.LimitReader(f, c.limits.MaxFileSize+1))
	if err != nil {
		return nil, fail(fmt.Errorf("read: %s", errText(err)))
	}
	if int64(len(b)) > c.limits.MaxFileSize {
		return nil, fail(classErr(ErrLimitExceeded, "more than the %d-byte file size limit", c.limits.MaxFileSize))
	}
	if err := c.checkSize(int64(len(b)), 0); err != nil {
		return nil, fail(err)
	}
	return b, nil
}

// countEntry charges one directory entry visited by the plain-YAML walk to MaxFiles.
func (c *confinedFS) countEntry() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.entries+1 > c.limits.MaxFiles {
		return classErr(ErrLimitExceeded, "more than %d files", c.limits.MaxFiles)
	}
	c.entries++
	return nil
}

// readDir lists the resolved directory r, sorted by name.
func (c *confinedFS) readDir(r resolved) ([]fs.DirEntry, error) {
	if err := c.alive(); err != nil {
		return nil, err
	}
	f, err := c.root.Open(r.rel)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %s", ErrNotFound, r.rel, errText(err))
	}
	defer func() { _ = f.Close() }()
	// Read at most one entry past the cap: a directory of a million files is an error,
	// found without listing it all.
	entries, err := f.ReadDir(c.limits.MaxFiles + 1)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("read directory %s: %s", r.rel, errText(err))
	}
	if len(entries) > c.limits.MaxFiles {
		return nil, classErr(ErrLimitExceeded, "%s has more than %d entries", r.rel, c.limits.MaxFiles)
	}
	sort.Slice(entries, func(i, j int) bool { return entries[i].Name() < entries[j].Name() })
	return entries, nil
}

// --- filesys.FileSystem over mountPoint, for kustomize ---

// toRel maps a kustomize path to a path relative to the root.
func toRel(p string) (string, error) {
	if !filepath.IsAbs(p) {
		p = filepath.Join(mountPoint, p)
	}
	p = filepath.Clean(p)
	if p == mountPoint {
		return ".", nil
	}
	if !strings.HasPrefix(p, mountPoint+"/") {
		return "", classErr(ErrOutsideRoot, "%s", p)
	}
	return p[len(mountPoint)+1:], nil
}

// toVirtual maps a path relative to the root to kustomize's view of it.
func toVirtual(rel string) string {
	if rel == "." || rel == "" {
		return mountPoint
	}
	return mountPoint + "/" + rel
}

// note records the first policy violation met on kustomize's behalf, so that the
// render reports it instead of whatever kustomize wraps it in.
func (c *confinedFS) note(err error) error {
	if slices.ContainsFunc([]error{ErrOutsideRoot, ErrSymlinkLoop, ErrLimitExceeded, ErrPluginDisabled, ErrDecryption, ErrCiphertext},
		func(class error) bool { return errors.Is(err, class) }) {
		c.mu.Lock()
		if c.firstErr == nil {
			c.firstErr = err
		}
		c.mu.Unlock()
	}
	return err
}

func (c *confinedFS) policyErr() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.firstErr
}

func (c *confinedFS) resolveVirtual(p string) (resolved, error) {
	rel, err := toRel(p)
	if err != nil {
		return resolved{}, c.note(err)
	}
	r, err := c.resolve(rel)
	if err != nil {
		return resolved{}, c.note(err)
	}
	return r, nil
}

var errReadOnly = errors.New("the checkout is read-only")

// Create refuses: the checkout is read-only.
func (c *confinedFS) Create(string) (filesys.File, error) { return nil, errReadOnly }

// Mkdir refuses: the checkout is read-only.
func (c *confinedFS) Mkdir(string) error { return errReadOnly }

// MkdirAll refuses: the checkout is read-only.
func (c *confinedFS) MkdirAll(string) error { return errReadOnly }

// RemoveAll refuses: the checkout is read-only.
func (c *confinedFS) RemoveAll(string) error { return errReadOnly }

// WriteFile refuses: the checkout is read-only.
func (c *confinedFS) WriteFile(string, []byte) error { return errReadOnly }

// Open returns a read-only in-memory copy of a file, read under the caps.
func (c *confinedFS) Open(p string) (filesys.File, error) {
	b, err := c.ReadFile(p)
	if err != nil {
		return nil, err
	}
	r, err := c.resolveVirtual(p)
	if err != nil {
		return nil, err
	}
	return &memFile{Reader: bytes.NewReader(b), info: r.info}, nil
}

// IsDir reports whether p resolves, inside the root, to a directory.
func (c *confinedFS) IsDir(p string) bool {
	r, err := c.resolveVirtual(p)
	return err == nil && r.info.IsDir()
}

// ReadDir lists the names in directory p.
func (c *confinedFS) ReadDir(p string) ([]string, error) {
	r, err := c.resolveVirtual(p)
	if err != nil {
		return nil, err
	}
	entries, err := c.readDir(r)
	if err != nil {
		return nil, c.note(err)
	}
	names := make([]string, len(entries))
	for i, e := range entries {
		names[i] = e.Name()
	}
	return names, nil
}

// CleanedAbs splits p, with every symlink resolved, into its directory and file name
// (an empty name when p is a directory). Kustomize relies on the result being free
// of symlinks to detect cycles between kustomizations.
func (c *confinedFS) CleanedAbs(p string) (filesys.ConfirmedDir, string, error) {
	r, err := c.resolveVirtual(p)
	if err != nil {
		return "", "", err
	}
	if r.info.IsDir() {
		return filesys.ConfirmedDir(toVirtual(r.rel)), "", nil
	}
	return filesys.ConfirmedDir(toVirtual(path.Dir(r.rel))), path.Base(r.rel), nil
}

// Exists reports whether p resolves inside the root.
func (c *confinedFS) Exists(p string) bool {
	_, err := c.resolveVirtual(p)
	return err == nil
}

// Glob matches pattern against the entries of one directory; only the last path
// element may hold wildcards. Kustomize's build does not glob; this is for completeness.
func (c *confinedFS) Glob(pattern string) ([]string, error) {
	dir, base := filepath.Split(pattern)
	if strings.ContainsAny(dir, "*?[") {
		return nil, fmt.Errorf("glob %q: wildcards are only supported in the last path element", pattern)
	}
	names, err := c.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, n := range names {
		ok, err := filepath.Match(base, n)
		if err != nil {
			return nil, err
		}
		if ok && (strings.HasPrefix(base, ".") || !strings.HasPrefix(n, ".")) {
			out = append(out, filepath.Join(dir, n))
		}
	}
	return out, nil
}

// ReadFile returns the content of file p, read under the caps. A directory the
// preflight built as plugin configs reads as those configs.
func (c *confinedFS) ReadFile(p string) ([]byte, error) {
	r, err := c.resolveVirtual(p)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	b, built := c.plugins[r.rel]
	_, sealed := c.plugins[path.Dir(r.rel)]
	c.mu.Unlock()
	if r.info.IsDir() && built {
		return bytes.Clone(b), nil
	}
	if sealed && slices.Contains(kustomizationFileNames, path.Base(r.rel)) {
		// Only the preflight builds a plugin directory; should kustomize try, it
		// would find no kustomization.
		return nil, c.note(classErr(ErrPluginDisabled, "%s: the kustomization of a generators, transformers or validators directory is read by the preflight only", r.rel))
	}
	b, err = c.readFile(r, r.rel)
	if err != nil {
		return nil, c.note(err)
	}
	return bytes.Clone(b), nil
}

// Walk walks the tree at p in lexical order without following symlinked
// directories, like filepath.Walk.
func (c *confinedFS) Walk(p string, fn filepath.WalkFunc) error {
	r, err := c.resolveVirtual(p)
	if err != nil {
		return fn(p, nil, err)
	}
	return c.walk(filepath.Clean(p), r, fn)
}

func (c *confinedFS) walk(vp string, r resolved, fn filepath.WalkFunc) error {
	if err := fn(vp, r.info, nil); err != nil {
		if errors.Is(err, filepath.SkipDir) && r.info.IsDir() {
			return nil
		}
		return err
	}
	if !r.info.IsDir() {
		return nil
	}
	entries, err := c.readDir(r)
	if err != nil {
		return fn(vp, r.info, c.note(err))
	}
	for _, e := range entries {
		if err := c.alive(); err != nil {
			return err
		}
		childRel := path.Join(r.rel, e.Name())
		if r.rel == "." {
			childRel = e.Name()
		}
		info, err := c.root.Lstat(childRel)
		if err != nil {
			if err := fn(filepath.Join(vp, e.Name()), nil, err); err != nil && !errors.Is(err, filepath.SkipDir) {
				return err
			}
			continue
		}
		if err := c.walk(filepath.Join(vp, e.Name()), resolved{rel: childRel, info: info}, fn); err != nil {
			if errors.Is(err, filepath.SkipDir) {
				continue
			}
			return err
		}
	}
	return nil
}

// memFile is a read-only filesys.File over bytes already read.
type memFile struct {
	*bytes.Reader
	info fs.FileInfo
}

func (f *memFile) Write([]byte) (int, error)  { return 0, errReadOnly }
func (f *memFile) Close() error               { return nil }
func (f *memFile) Stat() (os.FileInfo, error) { return f.info, nil }

// secretValues returns the data and stringData values (and, for data, their
// base64-decoded text) of every Secret in the files read so far, and every value
// decrypted from a SOPS file, for redaction.
func (c *confinedFS) secretValues() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := append([]string(nil), c.decrypted...)
	for rel, b := range c.cache {
		if !bytes.Contains(b, []byte("Secret")) {
			continue
		}
		docs, err := decodeDocuments(rel, b, c.limits, c.limits.MaxDocuments)
		if err != nil {
			continue
		}
		for _, d := range docs {
			m, ok := d.value.(map[string]any)
			if !ok || m["kind"] != "Secret" {
				continue
			}
			for _, field := range []string{"data", "stringData"} {
				values, _ := m[field].(map[string]any)
				for _, v := range values {
					s, ok := v.(string)
					if !ok {
						continue
					}
					out = append(out, s)
					if field == "data" {
						if dec, err := base64.StdEncoding.DecodeString(s); err == nil {
							out = append(out, string(dec))
						}
					}
				}
			}
		}
	}
	return out
}

// typeOnly is the FileInfo of a directory entry whose type bits come from the
// listing and whose size is not known yet (-1): readFile stats the open file
// instead, sparing a path walk per file.
type typeOnly struct {
	name string
	mode fs.FileMode
}

func (t typeOnly) Name() string       { return t.name }
func (t typeOnly) Size() int64        { return -1 }
func (t typeOnly) Mode() fs.FileMode  { return t.mode }
func (t typeOnly) ModTime() time.Time { return time.Time{} }
func (t typeOnly) IsDir() bool        { return t.mode.IsDir() }
func (t typeOnly) Sys() any           { return nil }
