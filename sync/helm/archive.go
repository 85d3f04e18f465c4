package helm

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"path"
	"sort"
	"strings"

	"helm.sh/helm/v4/pkg/chart/loader/archive"
	chartv2 "helm.sh/helm/v4/pkg/chart/v2"
	chartloader "helm.sh/helm/v4/pkg/chart/v2/loader"

	"github.com/converge-gitops/converge/internal/tarpath"
)

// assemble builds a chart from its files: its own files go to Helm's loader, each vendored
// subchart under charts/ (a directory or a .tgz archive) is assembled here, so that archives
// are unpacked with this package's bounds, not Helm's.
func assemble(files []*archive.BufferedFile, b *budget, depth int) (*chartv2.Chart, error) {
	var own []*archive.BufferedFile
	dirs := map[string][]*archive.BufferedFile{}
	var archives []*archive.BufferedFile
	for _, f := range files {
		entry, rest, ok := isChartsEntry(f.Name)
		switch {
		case !ok || path.Ext(f.Name) == ".prov":
			own = append(own, f)
		case strings.IndexAny(entry, "_.") == 0:
			continue // ignored by Helm too
		case rest == "" && path.Ext(entry) == ".tgz":
			archives = append(archives, f)
		case rest == "":
			return nil, refused("%s: neither a chart directory nor a .tgz archive", f.Name)
		default:
			dirs[entry] = append(dirs[entry], &archive.BufferedFile{Name: rest, ModTime: f.ModTime, Data: f.Data})
		}
	}
	c, err := chartloader.LoadFiles(own)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrChartRefused, err)
	}
	subs, err := subcharts(dirs, archives, b, depth)
	if err != nil {
		return nil, fmt.Errorf("chart %s: %w", c.Name(), err)
	}
	c.AddDependency(subs...)
	return c, nil
}

func subcharts(dirs map[string][]*archive.BufferedFile, archives []*archive.BufferedFile, b *budget, depth int) ([]*chartv2.Chart, error) {
	names := make([]string, 0, len(dirs))
	for n := range dirs {
		names = append(names, n)
	}
	sort.Strings(names)
	var out []*chartv2.Chart
	for _, n := range names {
		sc, err := assemble(dirs[n], b, depth)
		if err != nil {
			return nil, fmt.Errorf("subchart charts/%s: %w", n, err)
		}
		out = append(out, sc)
	}
	for _, a := range archives {
		sc, err := loadArchive(a, b, depth+1)
		if err != nil {
			return nil, fmt.Errorf("subchart %s: %w", a.Name, err)
		}
		out = append(out, sc)
	}
	return out, nil
}

func loadArchive(a *archive.BufferedFile, b *budget, depth int) (*chartv2.Chart, error) {
	if depth > maxArchiveDepth {
		return nil, refused("archives nested more than %d deep", maxArchiveDepth)
	}
	files, err := unpack(a.Data, b)
	if err != nil {
		return nil, err
	}
	return assemble(files, b, depth)
}

// errStreamTooLarge ends reading an archive whose unpacked stream (file data, headers and
// skipped entries together) exceeds the chart's byte bound.
var errStreamTooLarge = refused("archive unpacks to more than %d bytes", MaxChartBytes)

type boundedReader struct {
	r    io.Reader
	left int64
}

func (l *boundedReader) Read(p []byte) (int, error) {
	if l.left <= 0 {
		return 0, errStreamTooLarge
	}
	if int64(len(p)) > l.left {
		p = p[:l.left]
	}
	n, err := l.r.Read(p)
	l.left -= int64(n)
	return n, err
}

// unpack reads a chart archive (gzipped tar, one top directory) into memory. Only regular
// files and directories are accepted; names must stay inside the archive's top directory;
// sizes count against the chart's budget before anything is inflated.
func unpack(data []byte, b *budget) ([]*archive.BufferedFile, error) {
	gz, err := gzip.NewReader(bytes.NewReader(data))
	if err != nil {
		return nil, refused("not a gzipped archive: %v", err)
	}
	defer func() { _ = gz.Close() }()
	tr := tar.NewReader(&boundedReader{r: gz, left: MaxChartBytes})
	var files []*archive.BufferedFile
	for {
		hd, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, wrapArchiveErr(err)
		}
		f, err := unpackEntry(tr, hd, b)
		if err != nil {
			return nil, err
		}
		if f != nil {
			files = append(files, f)
		}
	}
	if len(files) == 0 {
		return nil, refused("empty archive")
	}
	return files, nil
}

func wrapArchiveErr(err error) error {
	if errors.Is(err, ErrChartRefused) {
		return err
	}
	return refused("bad archive: %v", err)
}

func unpackEntry(tr *tar.Reader, hd *tar.Header, b *budget) (*archive.BufferedFile, error) {
	switch hd.Typeflag {
	case tar.TypeDir, tar.TypeXGlobalHeader, tar.TypeXHeader:
		return nil, nil
	case tar.TypeReg:
	default:
		return nil, refused("%s: not a regular file (type %q)", hd.Name, hd.Typeflag)
	}
	name, err := entryName(hd.Name)
	if err != nil {
		return nil, err
	}
	if err := b.take(name, hd.Size); err != nil {
		return nil, err
	}
	data, err := io.ReadAll(io.LimitReader(tr, hd.Size))
	if err != nil {
		return nil, wrapArchiveErr(err)
	}
	if int64(len(data)) != hd.Size {
		return nil, refused("%s: truncated", name)
	}
	data = bytes.TrimPrefix(data, []byte{0xEF, 0xBB, 0xBF})
	return &archive.BufferedFile{Name: name, ModTime: hd.ModTime, Data: data}, nil
}

// entryName checks an entry's name (package tarpath) and drops the archive's top
// directory, which every entry must be inside.
func entryName(raw string) (string, error) {
	clean, err := tarpath.Clean(raw)
	if err != nil {
		return "", refused("%v", err)
	}
	top, rest, ok := strings.Cut(clean, "/")
	if !ok || top == "." || rest == "" {
		return "", refused("%q: not inside the archive's top directory", raw)
	}
	return rest, nil
}
