package helm

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"helm.sh/helm/v4/pkg/chart/loader/archive"
	chartv2 "helm.sh/helm/v4/pkg/chart/v2"
	"helm.sh/helm/v4/pkg/ignore"
)

// Bounds of a chart read by LoadChart. They count the chart and all its subcharts together,
// vendored archives counted both packed and unpacked.
const (
	MaxChartBytes    = 64 << 20 // total bytes read
	MaxChartFiles    = 10000    // files read
	MaxChartFileSize = 16 << 20 // one file, or one file of an archive, unpacked
	maxArchiveDepth  = 4        // archives inside archives (charts/a.tgz holding charts/b.tgz ...)
)

// ErrChartRefused marks a chart LoadChart refuses: a symlink leaving the chart, a path leaving
// it, an irregular file, a bound exceeded, a missing dependency, an unsupported chart.
var ErrChartRefused = errors.New("chart refused")

// Chart is a chart loaded by LoadChart. It is never modified after loading: Render works on
// a copy, so one Chart may be rendered by many goroutines at once.
type Chart struct {
	chart  *chartv2.Chart
	digest string
}

// Name is the chart's name from Chart.yaml.
func (c *Chart) Name() string { return c.chart.Metadata.Name }

// Version is the chart's version from Chart.yaml.
func (c *Chart) Version() string { return c.chart.Metadata.Version }

// AppVersion is the chart's appVersion from Chart.yaml.
func (c *Chart) AppVersion() string { return c.chart.Metadata.AppVersion }

// Digest is a sha256 of the chart's files (names and contents, vendored archives as they are
// on disk), stable across loads of the same files.
func (c *Chart) Digest() string { return c.digest }

func refused(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrChartRefused, fmt.Sprintf(format, args...))
}

// budget counts what a load has read so far.
type budget struct {
	bytes int64
	files int
}

func (b *budget) take(name string, size int64) error {
	b.files++
	if b.files > MaxChartFiles {
		return refused("more than %d files", MaxChartFiles)
	}
	if size > MaxChartFileSize {
		return refused("%s: larger than %d bytes", name, MaxChartFileSize)
	}
	b.bytes += size
	if b.bytes > MaxChartBytes {
		return refused("larger than %d bytes in all", MaxChartBytes)
	}
	return nil
}

// LoadChart reads the chart whose Chart.yaml is in dir. Files are read by this package, never
// by Helm's directory loader: .helmignore is honoured as Helm does; a symlink is followed only
// when it names a regular file inside dir, any other symlink (to a directory, or leaving dir)
// is refused; irregular files are refused; size and count are bounded (MaxChartBytes,
// MaxChartFiles, MaxChartFileSize). Vendored subcharts under charts/ (directories and .tgz
// archives) are loaded with the same bounds; a dependency of Chart.yaml or Chart.lock missing
// from charts/ is an error naming it. Nothing is fetched.
func LoadChart(dir string) (*Chart, error) {
	root, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return nil, fmt.Errorf("chart directory: %w", err)
	}
	root, err = filepath.Abs(root)
	if err != nil {
		return nil, fmt.Errorf("chart directory: %w", err)
	}
	if _, err := os.Stat(filepath.Join(root, "Chart.yaml")); err != nil {
		return nil, fmt.Errorf("no chart in %s: %w", dir, err)
	}
	fsroot, err := os.OpenRoot(root)
	if err != nil {
		return nil, fmt.Errorf("chart directory: %w", err)
	}
	defer func() { _ = fsroot.Close() }()
	r := &dirReader{root: root, fsroot: fsroot, budget: &budget{}}
	if err := r.readAll(); err != nil {
		return nil, err
	}
	ch, err := assemble(r.files, r.budget, 0)
	if err != nil {
		return nil, err
	}
	if err := checkDependencies(ch); err != nil {
		return nil, err
	}
	return &Chart{chart: ch, digest: digest(r.files)}, nil
}

// dirReader reads a chart directory into memory. Files are opened through fsroot, which
// cannot leave the directory even if an entry is swapped for a symlink while it is read.
type dirReader struct {
	root   string
	fsroot *os.Root
	rules  *ignore.Rules
	budget *budget
	files  []*archive.BufferedFile
}

func (r *dirReader) readAll() error {
	rules := ignore.Empty()
	if fi, err := r.fsroot.Lstat(ignore.HelmIgnore); err == nil {
		if !fi.Mode().IsRegular() {
			return refused("%s: not a regular file", ignore.HelmIgnore)
		}
		b, err := r.readFile(ignore.HelmIgnore, fi.Size())
		if err != nil {
			return err
		}
		if rules, err = ignore.Parse(bytes.NewReader(b)); err != nil {
			return fmt.Errorf("%s: %w", ignore.HelmIgnore, err)
		}
	}
	rules.AddDefaults()
	r.rules = rules
	return filepath.WalkDir(r.root, r.visit)
}

func (r *dirReader) visit(p string, d fs.DirEntry, err error) error {
	if err != nil {
		return err
	}
	if p == r.root {
		return nil
	}
	rel, err := filepath.Rel(r.root, p)
	if err != nil {
		return err
	}
	name := filepath.ToSlash(rel)
	fi, err := r.stat(p, name, d)
	if err != nil {
		return err
	}
	if fi.IsDir() {
		if r.rules.Ignore(name, fi) {
			return filepath.SkipDir
		}
		return nil
	}
	if r.rules.Ignore(name, fi) {
		return nil
	}
	if !fi.Mode().IsRegular() {
		return refused("%s: not a regular file", name)
	}
	return r.read(name, fi)
}

// stat returns the entry's own info, or for a symlink the info of the regular file it names
// inside the chart; any other symlink is refused.
func (r *dirReader) stat(p, name string, d fs.DirEntry) (fs.FileInfo, error) {
	if d.Type()&fs.ModeSymlink == 0 {
		return d.Info()
	}
	target, err := filepath.EvalSymlinks(p)
	if err != nil {
		return nil, refused("%s: symlink: %v", name, err)
	}
	if rel, err := filepath.Rel(r.root, target); err != nil || !filepath.IsLocal(rel) {
		return nil, refused("%s: symlink leaves the chart", name)
	}
	fi, err := os.Stat(target)
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, refused("%s: symlink to a directory or irregular file", name)
	}
	return fi, nil
}

func (r *dirReader) read(name string, fi fs.FileInfo) error {
	if err := r.budget.take(name, fi.Size()); err != nil {
		return err
	}
	b, err := r.readFile(name, fi.Size())
	if err != nil {
		return err
	}
	b = bytes.TrimPrefix(b, []byte{0xEF, 0xBB, 0xBF})
	r.files = append(r.files, &archive.BufferedFile{Name: name, ModTime: fi.ModTime(), Data: b})
	return nil
}

// readFile reads a regular file of the chart, of the size it was seen with.
func (r *dirReader) readFile(name string, size int64) ([]byte, error) {
	if size > MaxChartFileSize {
		return nil, refused("%s: larger than %d bytes", name, MaxChartFileSize)
	}
	f, err := r.fsroot.Open(filepath.FromSlash(name))
	if err != nil {
		return nil, refused("%s: %v", name, err)
	}
	defer func() { _ = f.Close() }()
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		return nil, refused("%s: not a regular file", name)
	}
	b, err := io.ReadAll(io.LimitReader(f, size+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) != size {
		return nil, refused("%s: changed while read", name)
	}
	return b, nil
}

func digest(files []*archive.BufferedFile) string {
	sorted := append([]*archive.BufferedFile(nil), files...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Name < sorted[j].Name })
	h := sha256.New()
	var n [8]byte
	for _, f := range sorted {
		binary.BigEndian.PutUint64(n[:], uint64(len(f.Name)))
		h.Write(n[:])
		h.Write([]byte(f.Name))
		binary.BigEndian.PutUint64(n[:], uint64(len(f.Data)))
		h.Write(n[:])
		h.Write(f.Data)
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil))
}

// checkDependencies refuses a chart whose Chart.yaml or Chart.lock names a dependency that is
// not vendored under charts/, at any depth.
func checkDependencies(c *chartv2.Chart) error {
	have := map[string]bool{}
	for _, d := range c.Dependencies() {
		have[d.Name()] = true
		if err := checkDependencies(d); err != nil {
			return err
		}
	}
	var names []string
	for _, d := range c.Metadata.Dependencies {
		names = append(names, d.Name)
	}
	if c.Lock != nil {
		for _, d := range c.Lock.Dependencies {
			names = append(names, d.Name)
		}
	}
	for _, n := range names {
		if !have[n] {
			return refused("chart %s: dependency %q is not vendored under charts/ (run helm dependency build before committing; nothing is downloaded at render time)", c.Name(), n)
		}
	}
	return nil
}

// isChartsEntry splits a path under charts/ into the subchart's entry name and the rest.
func isChartsEntry(name string) (entry, rest string, ok bool) {
	after, found := strings.CutPrefix(name, "charts/")
	if !found {
		return "", "", false
	}
	entry, rest, _ = strings.Cut(after, "/")
	return entry, rest, true
}
