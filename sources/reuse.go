package sources

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/go-git/go-git/v5/plumbing"
)

// A checkout shares the unchanged files of an earlier checkout of the same repository: a
// commit that changes one file of a thousand writes one file and hard-links the others. Each
// checkout has a list of the regular files it holds, beside it (<commit>.files), which says
// what each path of it contains; only the paths listed there are ever linked, so a link never
// goes through a symlink or into a path of the earlier checkout that was not a regular file
// written by the cache itself. Files are read-only and never modified in place, so sharing
// their inodes shares nothing that can change.

// filesSuffix names the list of files of a checkout: <commit>.files beside <commit>/.
const filesSuffix = ".files"

// maxFilesList bounds the list read back; one of a checkout within the caps is far smaller.
const maxFilesList = 64 << 20

// fileEntry is what a checkout holds at one path: the blob, its size and permissions.
type fileEntry struct {
	hash plumbing.Hash
	size int64
	perm os.FileMode
}

// fileList is the regular files of a checkout by slash-separated path.
type fileList map[string]fileEntry

// writeFileList writes the list: one record a file, "perm size hash path" ended by a NUL, as
// paths may hold any byte but NUL and '/'-separated safe names.
func writeFileList(path string, files fileList) error {
	var b bytes.Buffer
	for p, e := range files {
		fmt.Fprintf(&b, "%o %d %s %s\x00", e.perm, e.size, e.hash, p)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL|oNoFollow, 0o444)
	if err != nil {
		return err
	}
	_, err = f.Write(b.Bytes())
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// readFileList reads a list written by writeFileList. Anything malformed makes the whole list
// unusable: the checkout is then written without sharing.
func readFileList(path string) (fileList, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|oNoFollow, 0)
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }()
	r := bufio.NewReader(io.LimitReader(f, maxFilesList))
	files := fileList{}
	for {
		rec, err := r.ReadString(0)
		if err == io.EOF && rec == "" {
			return files, nil
		}
		if err != nil {
			return nil, fmt.Errorf("%s: truncated", path)
		}
		fields := strings.SplitN(strings.TrimSuffix(rec, "\x00"), " ", 4)
		if len(fields) != 4 {
			return nil, fmt.Errorf("%s: malformed record", path)
		}
		perm, perr := strconv.ParseUint(fields[0], 8, 32)
		size, serr := strconv.ParseInt(fields[1], 10, 64)
		if perr != nil || serr != nil || size < 0 || (perm != 0o444 && perm != 0o555) ||
			!isHex(fields[2], 40) || !safePath(fields[3]) {
			return nil, fmt.Errorf("%s: malformed record", path)
		}
		files[fields[3]] = fileEntry{hash: plumbing.NewHash(fields[2]), size: size, perm: os.FileMode(perm)}
	}
}

// safePath reports whether every element of a slash-separated path is a safe entry name.
func safePath(p string) bool {
	for name := range strings.SplitSeq(p, "/") {
		if !safeName(name) {
			return false
		}
	}
	return true
}

// base is an earlier checkout whose files a new one may link.
type base struct {
	dir   string
	files fileList
}

// lookup is what the base holds at rel (nothing for no base).
func (b *base) lookup(rel string) (fileEntry, bool) {
	if b == nil {
		return fileEntry{}, false
	}
	e, ok := b.files[rel]
	return e, ok
}

// link makes p the file the base holds at rel, e by its list, and reports whether it did.
// The new entry is checked once more after the link (a regular file of e's size and
// permissions); anything else is undone and the caller writes the file itself.
func (b *base) link(p, rel string, e fileEntry) bool {
	if err := os.Link(filepath.Join(b.dir, filepath.FromSlash(rel)), p); err != nil {
		return false
	}
	fi, err := os.Lstat(p)
	if err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm() != e.perm || fi.Size() != e.size {
		_ = os.Remove(p)
		return false
	}
	return true
}

// baseFor picks the checkout a new one of the same repository shares files with: the one
// handed out last, else (a restarted daemon) any with a list of files. It is marked used,
// so that GC leaves it alone while the new checkout links to it; a GC that takes it
// meanwhile only makes the links fail, and the files are written. Nil when there is none.
func (c *Cache) baseFor(repoDir, commit string) *base {
	try := func(dir string) *base {
		if fi, err := os.Lstat(dir); err != nil || !fi.IsDir() {
			return nil
		}
		files, err := readFileList(dir + filesSuffix)
		if err != nil {
			return nil
		}
		c.mu.Lock()
		c.used[dir] = c.opts.Clock.Now()
		c.mu.Unlock()
		return &base{dir: dir, files: files}
	}
	self := filepath.Join(repoDir, commit)
	c.mu.Lock()
	var newest string
	for dir, t := range c.used {
		if filepath.Dir(dir) == repoDir && dir != self && (newest == "" || t.After(c.used[newest])) {
			newest = dir
		}
	}
	c.mu.Unlock()
	if newest != "" {
		if b := try(newest); b != nil {
			return b
		}
	}
	entries, err := os.ReadDir(repoDir)
	if err != nil {
		return nil
	}
	for _, e := range entries {
		if dir := filepath.Join(repoDir, e.Name()); e.IsDir() && isHex(e.Name(), 40) && dir != self && dir != newest {
			if b := try(dir); b != nil {
				return b
			}
		}
	}
	return nil
}
