package sources

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/format/packfile"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/plumbing/protocol/packp"
	"github.com/go-git/go-git/v5/plumbing/storer"
	"github.com/go-git/go-git/v5/plumbing/transport"
	"github.com/go-git/go-git/v5/storage/memory"
)

// Branch is one branch of a repository opened for writing: read its files, write some, and
// Push makes one commit of them on top of the branch's tip and pushes it. It reaches the
// repository exactly as polls and fetches do — the same URL checks, credentials, TLS
// authorities, SSH host key policy (known_hosts) and deadlines — and what the server sends is
// held to the caps of a checkout (DefaultMaxBytes, DefaultMaxFiles).
//
// Only the tip is fetched (depth 1). Close releases it. A Branch is not safe for concurrent use.
type Branch struct {
	src  Source
	r    *remote
	ref  plumbing.ReferenceName
	tip  plumbing.Hash // zero: the repository is empty and the first commit creates the branch
	root plumbing.Hash // the tip's tree; zero when there is no tip

	fetched      storer.EncodedObjectStorer // the tip's objects
	closeFetched func()
	tmp          string // where a large fetch spills to disk

	staged map[string][]byte // path → content written since OpenBranch
	pushed bool
}

// Commit describes the commit Push makes.
type Commit struct {
	// Message of the commit.
	Message string
	// AuthorName and AuthorEmail are the author's, and the committer's.
	AuthorName, AuthorEmail string
	// When dates the commit (default: now).
	When time.Time
}

// OpenBranch fetches the tip of src.Ref.Branch, the only kind of ref it accepts. An empty
// repository is no error: the first Push creates the branch there. A branch missing from a
// repository that has others is ErrRefNotFound. Errors are those of Resolve.
func OpenBranch(ctx context.Context, src Source) (*Branch, error) {
	red := newRedactor(src.URL, src.Auth)
	if src.Ref.Branch == "" || src.Ref != (Ref{Branch: src.Ref.Branch}) {
		return nil, wrapErr(ctx, "read", src.URL, red, fmt.Errorf("%w: only a branch can be written to", ErrInvalidSource))
	}
	r, err := newRemote(src)
	if err != nil {
		return nil, wrapErr(ctx, "read", src.URL, red, err)
	}
	b := &Branch{src: src, r: r, ref: plumbing.NewBranchReferenceName(src.Ref.Branch), closeFetched: func() {}}
	if err := b.fetchTip(ctx); err != nil {
		b.Close()
		return nil, wrapErr(ctx, "read", src.URL, r.red, err)
	}
	return b, nil
}

// fetchTip lists the refs and fetches the branch's tip, if the repository has any commit.
func (b *Branch) fetchTip(ctx context.Context) error {
	s, done, err := b.r.session(ctx)
	if err != nil {
		return err
	}
	defer done()
	ar, err := s.AdvertisedReferencesContext(ctx)
	if errors.Is(err, transport.ErrEmptyRemoteRepository) {
		return nil
	}
	if err != nil {
		return err
	}
	tip, ok := ar.References[b.ref.String()]
	if !ok {
		return fmt.Errorf("%w: branch %q does not exist: create it first", ErrRefNotFound, b.ref.Short())
	}
	if b.tmp, err = os.MkdirTemp("", "converge-branch-"); err != nil {
		return fmt.Errorf("%w: %v", ErrFetchFailed, err)
	}
	if b.fetched, b.closeFetched, err = fetchCommit(ctx, s, ar, tip, b.tmp, "", defaultFetchLimits); err != nil {
		return err
	}
	commit, err := object.GetCommit(b.fetched, tip)
	if err != nil {
		return fmt.Errorf("%w: reading commit %s: %v", ErrFetchFailed, tip, err)
	}
	b.tip, b.root = tip, commit.TreeHash
	return nil
}

// Close releases what the branch holds.
func (b *Branch) Close() {
	b.closeFetched()
	if b.tmp != "" {
		_ = os.RemoveAll(b.tmp)
	}
}

// ReadFile returns the content of the file at name (slash-separated, relative to the
// repository's root), as last written or else as on the branch. It fails with fs.ErrNotExist
// when there is none, and with another error when name is a directory, symlink or submodule.
func (b *Branch) ReadFile(name string) ([]byte, error) {
	if err := checkPath("read", name); err != nil {
		return nil, err
	}
	if data, ok := b.staged[name]; ok {
		return bytes.Clone(data), nil
	}
	if b.root.IsZero() {
		return nil, &fs.PathError{Op: "read", Path: name, Err: fs.ErrNotExist}
	}
	tree, err := object.GetTree(b.fetched, b.root)
	if err != nil {
		return nil, fmt.Errorf("reading the tree of %s: %w", b.tip, err)
	}
	e, err := tree.FindEntry(name)
	if err != nil {
		return nil, &fs.PathError{Op: "read", Path: name, Err: fs.ErrNotExist}
	}
	if e.Mode != filemode.Regular && e.Mode != filemode.Executable {
		return nil, &fs.PathError{Op: "read", Path: name, Err: fmt.Errorf("not a regular file (mode %s)", e.Mode)}
	}
	blob, err := object.GetBlob(b.fetched, e.Hash)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", name, err)
	}
	rd, err := blob.Reader()
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", name, err)
	}
	defer func() { _ = rd.Close() }()
	return io.ReadAll(rd)
}

// WriteFile sets the content of the file at name (slash-separated, relative to the
// repository's root) for the next Push; the directories on its way are created. It refuses a
// name that is not clean or that git refuses (.git, ..).
func (b *Branch) WriteFile(name string, data []byte) error {
	if b.pushed {
		return errors.New("the branch was pushed already: open it again")
	}
	if err := checkPath("write", name); err != nil {
		return err
	}
	if b.staged == nil {
		b.staged = map[string][]byte{}
	}
	b.staged[name] = bytes.Clone(data)
	return nil
}

// checkPath accepts a clean relative slash-separated path whose every element git accepts.
func checkPath(op, name string) error {
	for _, elem := range strings.Split(name, "/") {
		if !safeName(elem) {
			return &fs.PathError{Op: op, Path: name, Err: fs.ErrInvalid}
		}
	}
	return nil
}

// Push makes one commit of the files written on top of the tip and pushes it to the branch,
// unless the branch moved since it was opened (then nothing changes and Push fails: open it
// again). It returns the commit pushed, or "" when the files written are already there as
// written: no commit is made then. A Branch is pushed at most once. Errors are those of Resolve.
func (b *Branch) Push(ctx context.Context, c Commit) (string, error) {
	if b.pushed {
		return "", errors.New("the branch was pushed already: open it again")
	}
	if len(b.staged) == 0 {
		return "", nil
	}
	out := memory.NewStorage() // the new objects, and only them: what is pushed
	w := treeBuilder{read: b.fetched, write: out}
	root, err := w.tree(b.root, b.staged)
	if err != nil {
		return "", wrapErr(ctx, "commit to", b.src.URL, b.r.red, err)
	}
	if root == b.root {
		return "", nil
	}
	if c.When.IsZero() {
		c.When = time.Now()
	}
	sig := object.Signature{Name: c.AuthorName, Email: c.AuthorEmail, When: c.When}
	commit := &object.Commit{Author: sig, Committer: sig, Message: c.Message, TreeHash: root}
	if !b.tip.IsZero() {
		commit.ParentHashes = []plumbing.Hash{b.tip}
	}
	hash, err := w.put(commit)
	if err != nil {
		return "", wrapErr(ctx, "commit to", b.src.URL, b.r.red, err)
	}
	if err := b.send(ctx, out, hash); err != nil {
		return "", wrapErr(ctx, "push to", b.src.URL, b.r.red, err)
	}
	b.pushed, b.tip, b.root = true, hash, root
	return hash.String(), nil
}

// send pushes the objects of out and moves the branch from its tip to commit.
func (b *Branch) send(ctx context.Context, out *memory.Storage, commit plumbing.Hash) error {
	s, done, err := b.r.pushSession(ctx)
	if err != nil {
		return err
	}
	defer done()
	ar, err := s.AdvertisedReferencesContext(ctx)
	if err != nil {
		return err
	}
	if now := ar.References[b.ref.String()]; now != b.tip {
		return fmt.Errorf("%w: branch %q moved since it was read (to %s): run again", ErrFetchFailed, b.ref.Short(), now)
	}
	hashes := make([]plumbing.Hash, 0, len(out.Objects))
	for h := range out.Objects {
		hashes = append(hashes, h)
	}
	var pack bytes.Buffer
	if _, err := packfile.NewEncoder(&pack, out, false).Encode(hashes, 0); err != nil {
		return fmt.Errorf("%w: writing the pack: %v", ErrFetchFailed, err)
	}
	req := packp.NewReferenceUpdateRequestFromCapabilities(ar.Capabilities)
	req.Commands = []*packp.Command{{Name: b.ref, Old: b.tip, New: commit}}
	req.Packfile = io.NopCloser(&pack)
	report, err := s.ReceivePack(ctx, req)
	if err != nil {
		return err
	}
	if report != nil {
		if err := report.Error(); err != nil {
			return fmt.Errorf("%w: the server refused the push: %v", ErrFetchFailed, err)
		}
	}
	return nil
}

// treeBuilder writes trees: it reads the existing ones from read and stores new objects in write.
type treeBuilder struct {
	read  storer.EncodedObjectStorer
	write storer.EncodedObjectStorer
}

// tree returns the tree base (zero: an empty one) with files (paths relative to it) written
// over it. Replacing a directory by a file or a file by a directory is refused: what was there
// may be someone else's.
func (w treeBuilder) tree(base plumbing.Hash, files map[string][]byte) (plumbing.Hash, error) {
	entries := map[string]object.TreeEntry{}
	if !base.IsZero() {
		t, err := object.GetTree(w.read, base)
		if err != nil {
			return plumbing.ZeroHash, fmt.Errorf("%w: reading tree %s: %v", ErrFetchFailed, base, err)
		}
		for _, e := range t.Entries {
			entries[e.Name] = e
		}
	}
	subdirs := map[string]map[string][]byte{}
	for name, data := range files {
		dir, rest, nested := strings.Cut(name, "/")
		if nested {
			if subdirs[dir] == nil {
				subdirs[dir] = map[string][]byte{}
			}
			subdirs[dir][rest] = data
			continue
		}
		if err := w.setBlob(entries, name, data); err != nil {
			return plumbing.ZeroHash, err
		}
	}
	for dir, files := range subdirs {
		old, exists := entries[dir]
		if exists && old.Mode != filemode.Dir {
			return plumbing.ZeroHash, fmt.Errorf("%w: %q is a file (mode %s), not a directory", ErrInvalidSource, dir, old.Mode)
		}
		h, err := w.tree(old.Hash, files) // old.Hash is zero for a new directory
		if err != nil {
			return plumbing.ZeroHash, err
		}
		entries[dir] = object.TreeEntry{Name: dir, Mode: filemode.Dir, Hash: h}
	}
	return w.put(sortedTree(entries))
}

// setBlob stores data and sets it as the regular file name among entries, keeping an
// executable bit it had.
func (w treeBuilder) setBlob(entries map[string]object.TreeEntry, name string, data []byte) error {
	mode := filemode.Regular
	if old, ok := entries[name]; ok {
		switch old.Mode {
		case filemode.Regular:
		case filemode.Executable:
			mode = old.Mode
		default:
			return fmt.Errorf("%w: %q is not a regular file (mode %s)", ErrInvalidSource, name, old.Mode)
		}
	}
	obj := w.write.NewEncodedObject()
	obj.SetType(plumbing.BlobObject)
	obj.SetSize(int64(len(data)))
	wr, err := obj.Writer()
	if err == nil {
		_, err = wr.Write(data)
		err = errors.Join(err, wr.Close())
	}
	if err != nil {
		return err
	}
	h, err := w.write.SetEncodedObject(obj)
	if err != nil {
		return err
	}
	entries[name] = object.TreeEntry{Name: name, Mode: mode, Hash: h}
	return nil
}

// sortedTree is the tree of entries in git's order: by name, a directory's name read as if it
// ended with a slash.
func sortedTree(entries map[string]object.TreeEntry) *object.Tree {
	t := &object.Tree{Entries: make([]object.TreeEntry, 0, len(entries))}
	for _, e := range entries {
		t.Entries = append(t.Entries, e)
	}
	key := func(e object.TreeEntry) string {
		if e.Mode == filemode.Dir {
			return e.Name + "/"
		}
		return e.Name
	}
	sort.Slice(t.Entries, func(i, j int) bool { return key(t.Entries[i]) < key(t.Entries[j]) })
	return t
}

// put encodes o into write and returns its hash.
func (w treeBuilder) put(o interface {
	Encode(plumbing.EncodedObject) error
}) (plumbing.Hash, error) {
	obj := w.write.NewEncodedObject()
	if err := o.Encode(obj); err != nil {
		return plumbing.ZeroHash, err
	}
	return w.write.SetEncodedObject(obj)
}
