package sources

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/plumbing/storer"
)

const (
	// writers create files in parallel: file creation is syscall latency, not CPU.
	writers = 4
	// maxSymlinkTarget bounds what a symlink blob may hold; the kernel refuses longer targets anyway.
	maxSymlinkTarget = 4096
	// smallBlob is the largest blob read into memory and handed to a writer; larger ones are
	// streamed to disk by the tree walk itself, so memory stays bounded by queue × smallBlob.
	smallBlob = 1 << 20
	queue     = 64
)

// treeWriter writes the tree of a commit to disk: regular files read-only (0444, or 0555 when
// executable), directories read-only once filled, symlinks as symlinks (never followed while
// writing), submodules as empty directories. It refuses entry names that could escape the
// directory and stops at the caps.
//
// One goroutine walks the trees and reads the blobs (the object storage is not safe for
// concurrent use); a few others create the files, each taking whole directories, since files
// created in one directory at once contend for its lock in the kernel.
type treeWriter struct {
	s        storer.EncodedObjectStorer
	commit   string
	maxBytes int64
	maxFiles int64
	bytes    int64
	files    int64
	buf      []byte
	dirs     []string
	jobs     []chan writeJob
	next     int // the writer the next directory goes to

	base *base    // an earlier checkout of the repository whose files may be linked; nil: none
	list fileList // the regular files written or linked, for the list beside the checkout
}

type writeJob struct {
	path    string
	data    []byte
	perm    os.FileMode
	symlink bool
}

func (w *treeWriter) writeCommit(ctx context.Context, hash plumbing.Hash, dir string) error {
	c, err := object.GetCommit(w.s, hash)
	if err != nil {
		return fmt.Errorf("%w: reading commit %s: %v", ErrFetchFailed, hash, err)
	}
	if err := os.Mkdir(dir, 0o755); err != nil {
		return fmt.Errorf("%w: %v", ErrFetchFailed, err)
	}

	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var wg sync.WaitGroup
	for range writers {
		jobs := make(chan writeJob, queue/writers)
		w.jobs = append(w.jobs, jobs)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range jobs {
				if ctx.Err() != nil {
					continue // drain
				}
				if err := j.write(); err != nil {
					cancel(err)
				}
			}
		}()
	}
	w.list = fileList{}
	err = w.writeTree(ctx, c.TreeHash, dir, "")
	for _, jobs := range w.jobs {
		close(jobs)
	}
	wg.Wait()
	if err == nil {
		err = context.Cause(ctx)
	}
	if err != nil {
		return err
	}
	// Children first, so that each directory is still writable while its children are changed.
	for i := len(w.dirs) - 1; i >= 0; i-- {
		if err := os.Chmod(w.dirs[i], 0o555); err != nil {
			return fmt.Errorf("%w: %v", ErrFetchFailed, err)
		}
	}
	// The checkout's own time is the commit's (see Cache.CommitTime).
	if err := os.Chtimes(dir, c.Committer.When, c.Committer.When); err != nil {
		return fmt.Errorf("%w: %v", ErrFetchFailed, err)
	}
	return nil
}

func (w *treeWriter) writeTree(ctx context.Context, hash plumbing.Hash, dir, rel string) error {
	if err := ctx.Err(); err != nil {
		return context.Cause(ctx)
	}
	t, err := object.GetTree(w.s, hash)
	if err != nil {
		return fmt.Errorf("%w: reading tree %s: %v", ErrFetchFailed, hash, err)
	}
	jobs := w.jobs[w.next]
	w.next = (w.next + 1) % len(w.jobs)
	for _, e := range t.Entries {
		if !safeName(e.Name) {
			return fmt.Errorf("%w: commit %s has an entry named %q, which cannot be checked out safely", ErrFetchFailed, w.commit, e.Name)
		}
		p := filepath.Join(dir, e.Name)
		r := e.Name
		if rel != "" {
			r = rel + "/" + e.Name
		}
		switch e.Mode {
		case filemode.Dir:
			if err := os.Mkdir(p, 0o755); err != nil {
				return fmt.Errorf("%w: %v", ErrFetchFailed, err)
			}
			if err := w.writeTree(ctx, e.Hash, p, r); err != nil {
				return err
			}
			w.dirs = append(w.dirs, p)
		case filemode.Regular, filemode.Deprecated:
			err = w.file(ctx, jobs, p, r, e.Hash, 0o444)
		case filemode.Executable:
			err = w.file(ctx, jobs, p, r, e.Hash, 0o555)
		case filemode.Symlink:
			err = w.symlink(ctx, jobs, p, e.Hash)
		case filemode.Submodule:
			err = os.Mkdir(p, 0o555)
		default:
			err = fmt.Errorf("%w: commit %s has %q with unsupported mode %s", ErrFetchFailed, w.commit, e.Name, e.Mode)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// safeName refuses names git itself refuses to check out, and anything with a separator.
func safeName(name string) bool {
	return name != "" && name != "." && name != ".." && !strings.ContainsAny(name, "/\\\x00") &&
		!strings.EqualFold(name, ".git")
}

// count adds one file of size bytes, enforcing the caps.
func (w *treeWriter) count(size int64) error {
	w.files++
	if w.files > w.maxFiles {
		return &LimitError{Limit: "MaxFiles", Max: w.maxFiles, Commit: w.commit}
	}
	w.bytes += size
	if w.bytes > w.maxBytes {
		return &LimitError{Limit: "MaxBytes", Max: w.maxBytes, Commit: w.commit}
	}
	return nil
}

// blob opens a blob after checking the caps.
func (w *treeWriter) blob(hash plumbing.Hash) (io.ReadCloser, int64, error) {
	obj, err := w.s.EncodedObject(plumbing.BlobObject, hash)
	if err != nil {
		return nil, 0, fmt.Errorf("%w: reading blob %s: %v", ErrFetchFailed, hash, err)
	}
	if err := w.count(obj.Size()); err != nil {
		return nil, 0, err
	}
	r, err := obj.Reader()
	if err != nil {
		return nil, 0, fmt.Errorf("%w: reading blob %s: %v", ErrFetchFailed, hash, err)
	}
	return r, obj.Size(), nil
}

// file writes the blob hash at p (rel in the checkout), or links it from the base when the
// base holds that very blob there.
func (w *treeWriter) file(ctx context.Context, jobs chan<- writeJob, p, rel string, hash plumbing.Hash, perm os.FileMode) error {
	if e, ok := w.base.lookup(rel); ok && e.hash == hash && e.perm == perm && w.base.link(p, rel, e) {
		w.list[rel] = e
		return w.count(e.size)
	}
	r, size, err := w.blob(hash)
	if err != nil {
		return err
	}
	defer func() { _ = r.Close() }()
	w.list[rel] = fileEntry{hash: hash, size: size, perm: perm}
	if size > smallBlob {
		return writeFile(p, r, size, perm, w.buf)
	}
	data := make([]byte, size)
	if _, err := io.ReadFull(r, data); err != nil {
		return fmt.Errorf("%w: reading blob %s: %v", ErrFetchFailed, hash, err)
	}
	return send(ctx, jobs, writeJob{path: p, data: data, perm: perm})
}

func (w *treeWriter) symlink(ctx context.Context, jobs chan<- writeJob, p string, hash plumbing.Hash) error {
	r, size, err := w.blob(hash)
	if err != nil {
		return err
	}
	defer func() { _ = r.Close() }()
	if size == 0 || size > maxSymlinkTarget {
		return fmt.Errorf("%w: symlink %s has a target of %d bytes", ErrFetchFailed, filepath.Base(p), size)
	}
	target, err := io.ReadAll(io.LimitReader(r, maxSymlinkTarget))
	if err != nil {
		return fmt.Errorf("%w: reading blob %s: %v", ErrFetchFailed, hash, err)
	}
	if strings.IndexByte(string(target), 0) >= 0 {
		return fmt.Errorf("%w: symlink %s has a target with a NUL byte", ErrFetchFailed, filepath.Base(p))
	}
	return send(ctx, jobs, writeJob{path: p, data: target, symlink: true})
}

func send(ctx context.Context, jobs chan<- writeJob, j writeJob) error {
	select {
	case jobs <- j:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

func (j writeJob) write() error {
	if j.symlink {
		if err := os.Symlink(string(j.data), j.path); err != nil {
			return fmt.Errorf("%w: %v", ErrFetchFailed, err)
		}
		return nil
	}
	// O_EXCL|O_NOFOLLOW: never write through a symlink or over an entry written before.
	f, err := os.OpenFile(j.path, os.O_WRONLY|os.O_CREATE|os.O_EXCL|oNoFollow, j.perm)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrFetchFailed, err)
	}
	_, err = f.Write(j.data)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("%w: writing %s: %v", ErrFetchFailed, filepath.Base(j.path), err)
	}
	return nil
}

// writeFile streams a large blob to a new read-only file.
func writeFile(p string, r io.Reader, size int64, perm os.FileMode, buf []byte) error {
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL|oNoFollow, perm)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrFetchFailed, err)
	}
	n, err := io.CopyBuffer(f, io.LimitReader(r, size+1), buf)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil && n != size {
		err = errors.New("blob size does not match its header")
	}
	if err != nil {
		return fmt.Errorf("%w: writing %s: %v", ErrFetchFailed, filepath.Base(p), err)
	}
	return nil
}
