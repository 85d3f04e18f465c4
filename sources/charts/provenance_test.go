package charts

import (
	"os"
	"testing"

	. "github.com/onsi/gomega"

	"github.com/converge-gitops/converge/sources"
)

// TestProvenanceOverHTTP: a .prov signed by a trusted key and naming the archive verifies;
// a key not trusted, an archive the .prov does not name, or no .prov is refused as an
// unsigned commit is (sources.ErrVerificationFailed).
func TestProvenanceOverHTTP(t *testing.T) {
	g := NewWithT(t)
	trusted, stranger := newSigner(t, "Chart Signer"), newSigner(t, "Someone Else")
	files := small("1.0.0")
	archive := packageChart(t, "small", files)
	tampered := packageChart(t, "small", map[string][]byte{"Chart.yaml": files["Chart.yaml"], "values.yaml": []byte("greeting: pwned\n")})
	repo := newHelmRepo(t, false)
	repo.add(repoChart{name: "small", version: "1.0.0", archive: archive, prov: trusted.prov(t, files["Chart.yaml"], "small-1.0.0.tgz", archive)})
	repo.add(repoChart{name: "small", version: "1.1.0", archive: archive, prov: stranger.prov(t, []byte("name: small\nversion: 1.1.0\n"), "small-1.1.0.tgz", archive)})
	repo.add(repoChart{name: "small", version: "1.2.0", archive: tampered, prov: trusted.prov(t, []byte("name: small\nversion: 1.2.0\n"), "small-1.2.0.tgz", archive)})
	repo.add(repoChart{name: "small", version: "1.3.0", archive: archive})
	c := newClient(t)
	src := Source{Repository: repo.srv.URL, Name: "small", Version: "1.0.0", Keyring: trusted.public}

	r := mustResolve(t, c, src)
	s, err := c.VerifySigner(t.Context(), src, r)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(s.Identity).To(ContainSubstring("Chart Signer"))
	g.Expect(s.Key).To(HavePrefix("OpenPGP key "))
	before := repo.requests.Load()
	g.Expect(c.Verify(t.Context(), src, r)).To(Succeed())
	g.Expect(repo.requests.Load()).To(Equal(before), "a verified chart is not verified again")

	for version, reason := range map[string]string{
		"1.1.0": "signed by a key that is not trusted",
		"1.2.0": "does not match its provenance file",
		"1.3.0": "has no provenance file (small-1.3.0.tgz.prov)",
	} {
		src.Version = version
		err := c.Verify(t.Context(), src, mustResolve(t, c, src))
		g.Expect(err).To(MatchError(sources.ErrVerificationFailed), version)
		g.Expect(err).To(MatchError(ContainSubstring(reason)), version)
	}

	// Both keys trusted (the values of a Secret concatenated): the stranger's chart verifies.
	src.Version = "1.1.0"
	src.Keyring = append(append([]byte{}, trusted.public...), stranger.public...)
	g.Expect(c.Verify(t.Context(), src, mustResolve(t, c, src))).To(Succeed())

	src.Keyring = []byte("no key here")
	g.Expect(c.Verify(t.Context(), src, mustResolve(t, c, src))).To(MatchError(sources.ErrInvalidSource))
}

// TestProvenanceHelmWrote: the .prov `helm package --sign` wrote (Helm's own test data)
// verifies with Helm's test key.
func TestProvenanceHelmWrote(t *testing.T) {
	g := NewWithT(t)
	archive, err := os.ReadFile("testdata/helm/hashtest-1.2.3.tgz")
	g.Expect(err).NotTo(HaveOccurred())
	prov, err := os.ReadFile("testdata/helm/hashtest-1.2.3.tgz.prov")
	g.Expect(err).NotTo(HaveOccurred())
	key, err := os.ReadFile("testdata/helm/helm-test-key.asc")
	g.Expect(err).NotTo(HaveOccurred())
	repo := newHelmRepo(t, false)
	repo.add(repoChart{name: "hashtest", version: "1.2.3", archive: archive, prov: prov})
	c := newClient(t)
	src := Source{Repository: repo.srv.URL, Name: "hashtest", Version: "1.2.3", Keyring: key}
	r := mustResolve(t, c, src)
	s, err := c.VerifySigner(t.Context(), src, r)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(s.Identity).To(ContainSubstring("helm-testing@helm.sh"))
	_, err = c.Fetch(t.Context(), src, r)
	g.Expect(err).NotTo(HaveOccurred())
}

// TestProvenanceOverOCI: the provenance layer Helm pushes verifies against the chart
// layer; a chart pushed without one is refused.
func TestProvenanceOverOCI(t *testing.T) {
	g := NewWithT(t)
	trusted := newSigner(t, "Chart Signer")
	reg := newOCIRegistry(t)
	files := small("1.0.0")
	archive := packageChart(t, "small", files)
	reg.push(t, "small", "1.0.0", archive, trusted.prov(t, files["Chart.yaml"], "small-1.0.0.tgz", archive))
	reg.push(t, "small", "1.1.0", packageChart(t, "small", small("1.1.0")), nil)
	files = small("1.2.0")
	reg.push(t, "small", "1.2.0", packageChart(t, "small", files), trusted.prov(t, files["Chart.yaml"], "small-1.2.0.tgz", archive))
	c := newClient(t)
	src := Source{Repository: "oci://" + hostOf(reg.open) + "/charts", Name: "small", Version: "1.0.0", Keyring: trusted.public}
	g.Expect(c.Verify(t.Context(), src, mustResolve(t, c, src))).To(Succeed())

	src.Version = "1.1.0"
	err := c.Verify(t.Context(), src, mustResolve(t, c, src))
	g.Expect(err).To(MatchError(sources.ErrVerificationFailed))
	g.Expect(err).To(MatchError(ContainSubstring("has no provenance layer")))

	src.Version = "1.2.0"
	err = c.Verify(t.Context(), src, mustResolve(t, c, src))
	g.Expect(err).To(MatchError(sources.ErrVerificationFailed))
	g.Expect(err).To(MatchError(ContainSubstring("does not match its provenance file")))
}
