package charts

import (
	"testing"

	. "github.com/onsi/gomega"
)

// TestVersionsInRange lists, newest first, the versions a SyncTarget's range allows, from
// an HTTP repository's index and from an OCI repository's tags ("_" read as "+").
func TestVersionsInRange(t *testing.T) {
	g := NewWithT(t)
	repo := newHelmRepo(t, false)
	for _, v := range []string{"6.4.0", "6.10.1", "6.5.0", "7.0.0-rc.1", "7.1.0"} {
		repo.add(repoChart{name: "podinfo", version: v, archive: podinfo(t, v)})
	}
	reg := newOCIRegistry(t)
	for _, v := range []string{"6.4.0", "6.6.0+build.7", "7.0.0"} {
		reg.push(t, "podinfo", v, podinfo(t, v), nil)
	}
	c := newClient(t)
	for _, tc := range []struct {
		src  Source
		want []string
	}{
		{Source{Repository: repo.srv.URL, Name: "podinfo", Version: "~6"}, []string{"6.10.1", "6.5.0", "6.4.0"}},
		{Source{Repository: repo.srv.URL, Name: "podinfo"}, []string{"7.1.0", "6.10.1", "6.5.0", "6.4.0"}},
		{Source{Repository: repo.srv.URL, Name: "podinfo", Version: "6.5.0"}, []string{"6.5.0"}},
		{Source{Repository: repo.srv.URL, Name: "podinfo", Version: ">=8"}, []string{}},
		{Source{Repository: "oci://" + hostOf(reg.open) + "/charts", Name: "podinfo", Version: "^6"}, []string{"6.6.0+build.7", "6.4.0"}},
	} {
		got, err := c.Versions(t.Context(), tc.src)
		g.Expect(err).NotTo(HaveOccurred(), tc.src.Version)
		g.Expect(got).To(Equal(tc.want), tc.src.Version)
	}
	_, err := c.Versions(t.Context(), Source{Repository: repo.srv.URL, Name: "podinfo", Version: "not a range"})
	g.Expect(err).To(MatchError(ContainSubstring(`version "not a range" is neither a version nor a semver range`)))
}
