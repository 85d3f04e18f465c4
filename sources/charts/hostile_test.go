package charts

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"fmt"
	"strings"
	"testing"

	. "github.com/onsi/gomega"

	"github.com/converge-gitops/converge/sources"
)

// bomb is a gzip stream that decompresses to a tar of one file of 1 GiB of zeros: a
// header, then 1024 gzip members of 1 MiB of zeros each (about 1 MiB compressed).
func bomb(t testing.TB) []byte {
	t.Helper()
	var hdr bytes.Buffer
	tw := tar.NewWriter(&hdr)
	if err := tw.WriteHeader(&tar.Header{Name: "small/Chart.yaml", Typeflag: tar.TypeReg, Mode: 0o644, Size: 1 << 30}); err != nil {
		t.Fatal(err)
	}
	member := func(b []byte) []byte {
		var buf bytes.Buffer
		gz := gzip.NewWriter(&buf)
		_, _ = gz.Write(b)
		_ = gz.Close()
		return buf.Bytes()
	}
	out := member(hdr.Bytes())
	zeros := member(make([]byte, 1<<20))
	for range 1024 {
		out = append(out, zeros...)
	}
	return out
}

// manyFiles is a chart of n empty files.
func manyFiles(t testing.TB, n int) []byte {
	entries := []tarEntry{file("small/Chart.yaml", "name: small\nversion: 1.0.0\n")}
	for i := range n {
		entries = append(entries, file(fmt.Sprintf("small/templates/f%06d.yaml", i), ""))
	}
	return tgz(t, entries...)
}

// TestHostileArchives: each archive is refused with an error that says why, and nothing
// is left in the cache.
func TestHostileArchives(t *testing.T) {
	chartYAML := file("small/Chart.yaml", "name: small\nversion: 1.0.0\n")
	link := func(name, target string, typ byte) tarEntry {
		return tarEntry{hdr: tar.Header{Name: name, Linkname: target, Typeflag: typ, Mode: 0o777}}
	}
	for _, tc := range []struct {
		name    string
		archive []byte
		kind    error
		message string
	}{
		{"dot-dot", tgz(t, chartYAML, file("small/../../etc/passwd", "x")), ErrBadArchive, "leaves the chart's directory"},
		{"absolute", tgz(t, chartYAML, file("/etc/passwd", "x")), ErrBadArchive, "absolute"},
		{"symlink", tgz(t, chartYAML, link("small/templates", "/etc", tar.TypeSymlink)), ErrBadArchive, "is a link"},
		{"hardlink", tgz(t, chartYAML, link("small/values.yaml", "/etc/passwd", tar.TypeLink)), ErrBadArchive, "is a link"},
		{"device", tgz(t, chartYAML, tarEntry{hdr: tar.Header{Name: "small/null", Typeflag: tar.TypeChar, Devmajor: 1, Devminor: 3}}), ErrBadArchive, "not a regular file"},
		{"another top directory", tgz(t, chartYAML, file("other/values.yaml", "x")), ErrBadArchive, "not under the chart's directory small/"},
		{"no Chart.yaml", tgz(t, file("small/values.yaml", "x")), ErrBadArchive, "no small/Chart.yaml"},
		{"twice the same file", tgz(t, chartYAML, chartYAML), ErrBadArchive, "twice"},
		{"not gzip", []byte(strings.Repeat("not a chart ", 100)), ErrBadArchive, "not a gzip archive"},
		{"100k files", manyFiles(t, 100_000), sources.ErrLimitExceeded, "more than 10000 files"},
		{"decompression bomb", bomb(t), sources.ErrLimitExceeded, "larger than the cap"},
		{"archive over its cap", append(packageChart(t, "small", small("1.0.0")), make([]byte, DefaultArchiveBytes)...), sources.ErrLimitExceeded, "the chart archive is larger than the cap of 16777216 bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			repo := newHelmRepo(t, false)
			repo.add(repoChart{name: "small", version: "1.0.0", archive: tc.archive})
			c := newClient(t)
			src := Source{Repository: repo.srv.URL, Name: "small"}
			_, err := c.Fetch(t.Context(), src, mustResolve(t, c, src))
			g.Expect(err).To(MatchError(tc.kind))
			g.Expect(err).To(MatchError(ContainSubstring(tc.message)))
			g.Expect(cacheEntries(t, c.CacheDir)).To(BeEmpty())
		})
	}
}

// TestDigestMismatch: an archive that is not the one the index names is refused.
func TestDigestMismatch(t *testing.T) {
	g := NewWithT(t)
	repo := newHelmRepo(t, false)
	repo.add(repoChart{name: "small", version: "1.0.0", archive: packageChart(t, "small", small("1.0.0")), digest: sha([]byte("another archive"))})
	c := newClient(t)
	src := Source{Repository: repo.srv.URL, Name: "small"}
	_, err := c.Fetch(t.Context(), src, mustResolve(t, c, src))
	g.Expect(err).To(MatchError(ErrBadArchive))
	g.Expect(err).To(MatchError(ContainSubstring("not the expected sha256:" + sha([]byte("another archive")))))
	g.Expect(cacheEntries(t, c.CacheDir)).To(BeEmpty())
}

// TestIndexOverItsCap: an index.yaml larger than its cap is refused while read.
func TestIndexOverItsCap(t *testing.T) {
	g := NewWithT(t)
	repo := newHelmRepo(t, false)
	repo.index = []byte("apiVersion: v1\nentries: {}\n# " + strings.Repeat("x", 2<<20) + "\n")
	c := &Client{CacheDir: t.TempDir(), Limits: Limits{IndexBytes: 1 << 20}}
	_, err := c.Resolve(t.Context(), Source{Repository: repo.srv.URL, Name: "small"})
	g.Expect(err).To(MatchError(sources.ErrLimitExceeded))
	g.Expect(err).To(MatchError(ContainSubstring("index.yaml is larger than the cap of 1048576 bytes")))
}

// TestExtractedSizeCaps: the files of a chart are capped one by one and together.
func TestExtractedSizeCaps(t *testing.T) {
	g := NewWithT(t)
	big := strings.Repeat("a", 3000)
	for lim, message := range map[Limits]string{
		{FileBytes: 2000}:      "small/values.yaml is larger than the cap of 2000 bytes for one file",
		{ExtractedBytes: 5000}: "the extracted chart is larger than the cap of 5000 bytes",
	} {
		archive := tgz(t, file("small/Chart.yaml", "name: small\nversion: 1.0.0\n"), file("small/values.yaml", big), file("small/more.yaml", big))
		repo := newHelmRepo(t, false)
		repo.add(repoChart{name: "small", version: "1.0.0", archive: archive})
		c := &Client{CacheDir: t.TempDir(), Limits: lim}
		src := Source{Repository: repo.srv.URL, Name: "small"}
		_, err := c.Fetch(t.Context(), src, mustResolve(t, c, src))
		g.Expect(err).To(MatchError(sources.ErrLimitExceeded))
		g.Expect(err).To(MatchError(ContainSubstring(message)))
		g.Expect(cacheEntries(t, c.CacheDir)).To(BeEmpty())
	}
}
