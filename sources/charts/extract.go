package charts

import (
	"archive/tar"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/converge-gitops/converge/internal/category"
	"github.com/converge-gitops/converge/internal/tarpath"
	"github.com/converge-gitops/converge/sources"
)

// ErrBadArchive: a chart archive, or an artifact's, is not safe to extract — an entry
// escapes its directory, is a link or a device, a chart's top directory is not the chart's
// name, or its digest is not the one expected. Archives over a cap match
// sources.ErrLimitExceeded instead. It fails the revision (the version will not mend).
var ErrBadArchive = category.New(category.FailRevision, "", "bad archive")

func badArchive(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrBadArchive}, args...)...)
}

// layout is what extraction checks of an archive, and where its tree is.
type layout struct {
	// what names the content in errors: "chart" or "artifact".
	what string
	// top, when set, is the directory every entry must be under (a chart's name): the
	// tree is that directory.
	top string
	// required, when set, is a file the archive must hold, under top.
	required string
}

// layout is the layout of src's archives: a chart's is its directory holding Chart.yaml,
// an artifact's the whole tree.
func (s Source) layout() layout {
	if s.IsArtifact() {
		return layout{what: "artifact"}
	}
	return layout{what: "chart", top: s.chartName(), required: "Chart.yaml"}
}

// install reads a chart archive, or an artifact's, from body — at most
// Limits.ArchiveBytes of it — checks that its sha256 is wantHex (any when empty), extracts
// it and moves it into the cache as the chart or artifact of digest (the archive's own
// when empty) of src's repository. It returns the tree's directory and the archive's
// sha256. Nothing is left in the cache when it fails; when it succeeds, the cache is
// collected.
func (c *Client) install(body io.Reader, wantHex, digest string, src Source) (string, string, error) {
	lim := c.limits()
	lay := src.layout()
	tmp, err := c.tempDir()
	if err != nil {
		return "", "", err
	}
	defer func() { _ = os.RemoveAll(tmp) }()

	what := "the " + lay.what + " archive"
	archive := capped(body, lim.ArchiveBytes, what)
	h := sha256.New()
	in := io.TeeReader(archive, h)
	if err := extract(in, tmp, lay, lim); err != nil {
		if archive.over {
			return "", "", limitErr(what, lim.ArchiveBytes)
		}
		return "", "", err
	}
	if _, err := io.Copy(io.Discard, in); err != nil && !archive.over {
		return "", "", err
	}
	if archive.over {
		return "", "", limitErr(what, lim.ArchiveBytes)
	}
	got := hex.EncodeToString(h.Sum(nil))
	if wantHex != "" && got != wantHex {
		return "", "", badArchive("the archive's digest is sha256:%s, not the expected sha256:%s", got, wantHex)
	}
	if digest == "" {
		digest = "sha256:" + got
	}
	if err := os.Chmod(tmp, 0o755); err != nil {
		return "", "", err
	}
	entry := c.entryDir(src, digest)
	if err := c.place(tmp, entry, dirSize(tmp)); err != nil {
		return "", "", err
	}
	dir := filepath.Join(entry, lay.top)
	if !lay.holds(dir) {
		return "", "", fmt.Errorf("chart cache: %s holds another %s than %s", filepath.Base(entry), lay.what, lay.top)
	}
	c.collect()
	return dir, got, nil
}

// tempDir makes a directory for a download inside CacheDir (on its filesystem: it is
// renamed into place), making CacheDir when it is missing.
func (c *Client) tempDir() (string, error) {
	if c.CacheDir == "" {
		return "", errors.New("chart cache: no directory set")
	}
	tmp, err := os.MkdirTemp(c.CacheDir, ".tmp-")
	if errors.Is(err, fs.ErrNotExist) {
		if err = os.MkdirAll(c.CacheDir, 0o755); err == nil {
			tmp, err = os.MkdirTemp(c.CacheDir, ".tmp-")
		}
	}
	if err != nil {
		return "", fmt.Errorf("chart cache: %w", err)
	}
	return tmp, nil
}

// isNotEmpty reports whether a rename failed because the destination, a directory put
// there meanwhile by another fetch of the same chart, is not empty.
func isNotEmpty(err error) bool {
	var le *os.LinkError
	return errors.As(err, &le) && strings.Contains(le.Err.Error(), "not empty")
}

// cappedReader reads at most left bytes of r and says when r held more: what it reads
// is named by what, for the error.
type cappedReader struct {
	r    io.Reader
	left int64
	max  int64
	what string
	over bool
}

func capped(r io.Reader, max int64, what string) *cappedReader {
	return &cappedReader{r: r, left: max, max: max, what: what}
}

func (c *cappedReader) Read(p []byte) (int, error) {
	if c.over {
		return 0, limitErr(c.what, c.max)
	}
	if int64(len(p)) > c.left+1 {
		p = p[:c.left+1]
	}
	n, err := c.r.Read(p)
	c.left -= int64(n)
	if c.left < 0 {
		c.over = true
		return n + int(c.left), limitErr(c.what, c.max)
	}
	return n, err
}

// holds reports whether dir, the tree of an archive of this layout, is there whole: a
// directory holding the required file.
func (l layout) holds(dir string) bool {
	fi, err := os.Stat(filepath.Join(dir, l.required))
	if l.required == "" {
		return err == nil && fi.IsDir()
	}
	return err == nil
}

// extractor writes the entries of one archive under root.
type extractor struct {
	root  string
	lay   layout
	lim   Limits
	files int
	total int64
}

// extract reads the gzipped tar in and writes its regular files and directories under
// root. It refuses absolute paths, "..", links, devices, entries outside the layout's top
// directory, an archive without its required file, and archives over lim — the bytes
// decompressed are counted as they are read, so a decompression bomb stops at the cap.
func extract(in io.Reader, root string, lay layout, lim Limits) error {
	gz, err := gzip.NewReader(in)
	if err != nil {
		return badArchive("not a gzip archive: %v", err)
	}
	// tar headers and padding count too: what is decompressed is bounded, whatever the
	// headers say.
	extracted := "the extracted " + lay.what
	raw := capped(gz, lim.ExtractedBytes+int64(lim.Files+2)*1024, extracted)
	x := &extractor{root: root, lay: lay, lim: lim}
	tr := tar.NewReader(raw)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			if raw.over {
				return limitErr(extracted, lim.ExtractedBytes)
			}
			return badArchive("reading the tar archive: %v", err)
		}
		if err := x.entry(hdr, tr); err != nil {
			if raw.over {
				return limitErr(extracted, lim.ExtractedBytes)
			}
			return err
		}
	}
	if lay.required != "" {
		if _, err := os.Stat(filepath.Join(root, lay.top, lay.required)); err != nil {
			return badArchive("no %s in the archive", path.Join(lay.top, lay.required))
		}
	}
	return nil
}

// entry writes one entry of the archive.
func (x *extractor) entry(hdr *tar.Header, r io.Reader) error {
	if hdr.Typeflag == tar.TypeXGlobalHeader {
		return nil // metadata of the archive (git archive writes one), no file
	}
	name, err := x.path(hdr.Name)
	if err != nil {
		return err
	}
	x.files++
	if x.files > x.lim.Files {
		return fmt.Errorf("%w: the %s has more than %d files", sources.ErrLimitExceeded, x.lay.what, x.lim.Files)
	}
	dst := filepath.Join(x.root, filepath.FromSlash(name))
	switch hdr.Typeflag {
	case tar.TypeDir:
		return os.MkdirAll(dst, 0o755)
	case tar.TypeReg, tar.TypeRegA: //nolint:staticcheck // old archives write TypeRegA
		return x.file(dst, name, hdr.Size, r)
	case tar.TypeSymlink, tar.TypeLink:
		return badArchive("%s is a link: links are refused", name)
	}
	return badArchive("%s is not a regular file or a directory (type %q)", name, hdr.Typeflag)
}

// path checks an entry's name (package tarpath) and that it is under the layout's top
// directory, and returns it cleaned.
func (x *extractor) path(raw string) (string, error) {
	name, err := tarpath.Clean(raw)
	if err != nil {
		return "", badArchive("%v", err)
	}
	if top := x.lay.top; top != "" && name != top && !strings.HasPrefix(name, top+"/") {
		return "", badArchive("entry %q is not under the %s's directory %s/", raw, x.lay.what, top)
	}
	return name, nil
}

// file writes a regular file of size bytes, read-only.
func (x *extractor) file(dst, name string, size int64, r io.Reader) error {
	switch {
	case size > x.lim.FileBytes:
		return fmt.Errorf("%w: %s is larger than the cap of %d bytes for one file", sources.ErrLimitExceeded, name, x.lim.FileBytes)
	case x.total+size > x.lim.ExtractedBytes:
		return limitErr("the extracted "+x.lay.what, x.lim.ExtractedBytes)
	}
	x.total += size
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return badArchive("%s: %v", name, err)
	}
	f, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o444)
	if err != nil {
		if errors.Is(err, fs.ErrExist) {
			return badArchive("%s is in the archive twice", name)
		}
		return badArchive("%s: %v", name, err)
	}
	n, err := io.Copy(f, io.LimitReader(r, size))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil && n != size {
		err = io.ErrUnexpectedEOF
	}
	if err != nil {
		return badArchive("%s: %v", name, err)
	}
	return nil
}
