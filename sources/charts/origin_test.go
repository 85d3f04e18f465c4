package charts

import (
	"strings"
	"testing"

	. "github.com/onsi/gomega"
)

// TestArtifactOrigin: where an artifact says it comes from is read from its manifest —
// by the Client that fetched it without another request, by another Client once — with
// credentials taken out of the URL, control characters dropped and each field capped; an
// artifact that names nothing has no origin.
func TestArtifactOrigin(t *testing.T) {
	g := NewWithT(t)
	reg := newOCIRegistry(t)
	src := artifactSource(reg, "team/config")
	dir := t.TempDir()
	writeTree(t, dir, config)
	c := &Client{CacheDir: t.TempDir(), AllowLoopback: true}
	long := strings.Repeat("x", 2000)
	named := pushDir(t, c, src, "named", dir, ArtifactMeta{Source: "https://robot:t0ken-s3cret@git.example.com/shop.git",
		Revision: "main@sha1:abc\x1b[31m\n" + long})
	anonymous := pushDir(t, c, src, "anonymous", dir, ArtifactMeta{Annotations: map[string]string{"x": "y"}})

	fetcher := &Client{CacheDir: t.TempDir(), AllowLoopback: true}
	_, err := fetcher.Fetch(t.Context(), src, named)
	g.Expect(err).NotTo(HaveOccurred())
	o, ok, err := fetcher.ArtifactOrigin(t.Context(), src, named)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(ok).To(BeTrue())
	g.Expect(o.Source).To(Equal("https://git.example.com/shop.git"))
	g.Expect(o.Source + o.Revision).NotTo(ContainSubstring("t0ken-s3cret"))
	g.Expect(o.Revision).To(HavePrefix("main@sha1:abc[31m" + "x"))
	g.Expect(len(o.Revision)).To(Equal(maxOriginField))

	other := &Client{CacheDir: t.TempDir(), AllowLoopback: true}
	o2, ok, err := other.ArtifactOrigin(t.Context(), src, named)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(ok).To(BeTrue())
	g.Expect(o2).To(Equal(o), "read from the manifest by a Client that did not fetch it")

	_, ok, err = other.ArtifactOrigin(t.Context(), src, anonymous)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(ok).To(BeFalse())
}
