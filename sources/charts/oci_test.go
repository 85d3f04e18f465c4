package charts

import (
	"encoding/base64"
	"encoding/json"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"
	. "github.com/onsi/gomega"

	"github.com/converge-gitops/converge/sources"
)

// ociRegistry is an in-process OCI registry: open to push, and, behind basic auth, to read.
type ociRegistry struct {
	open, authed *httptest.Server
}

const regUser, regPass = "puller", "reg1stry-pass"

func newOCIRegistry(t testing.TB) *ociRegistry {
	h := registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	authed := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if u, p, ok := r.BasicAuth(); !ok || u != regUser || p != regPass {
			w.Header().Set("WWW-Authenticate", `Basic realm="registry"`)
			http.Error(w, `{"errors":[{"code":"UNAUTHORIZED","message":"authentication required"}]}`, http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	})
	reg := &ociRegistry{open: httptest.NewServer(h), authed: httptest.NewServer(authed)}
	t.Cleanup(reg.open.Close)
	t.Cleanup(reg.authed.Close)
	return reg
}

func hostOf(s *httptest.Server) string { return strings.TrimPrefix(s.URL, "http://") }

// push pushes a chart as `helm push` does — config of Helm's media type, the archive as
// the chart layer, the provenance (when given) as its layer — under the tag of version
// ("+" written "_"), and returns the manifest's digest.
func (reg *ociRegistry) push(t testing.TB, chart, version string, archive, prov []byte) string {
	t.Helper()
	cfg, _ := json.Marshal(map[string]string{"apiVersion": "v2", "name": chart, "version": version})
	layers := []blob{{archive, ChartLayerMediaType, nil}}
	if prov != nil {
		layers = append(layers, blob{prov, ProvLayerMediaType, nil})
	}
	return putImage(t, reg.repo(t, "charts/"+chart), strings.ReplaceAll(version, "+", "_"), blob{cfg, ConfigMediaType, nil}, layers, nil)
}

// repo is the repository of path in the registry (pushed to without credentials).
func (reg *ociRegistry) repo(t testing.TB, path string) name.Repository {
	t.Helper()
	repo, err := name.NewRepository(hostOf(reg.open) + "/" + path)
	if err != nil {
		t.Fatal(err)
	}
	return repo
}

// blob is a blob of a test image: its content, media type and descriptor annotations.
type blob struct {
	data        []byte
	mt          types.MediaType
	annotations map[string]string
}

// writeBlob uploads b to repo and returns its descriptor.
func writeBlob(t testing.TB, repo name.Repository, b blob) v1.Descriptor {
	t.Helper()
	l := static.NewLayer(b.data, b.mt)
	if err := remote.WriteLayer(repo, l); err != nil {
		t.Fatal(err)
	}
	d, _ := l.Digest()
	return v1.Descriptor{MediaType: b.mt, Size: int64(len(b.data)), Digest: d, Annotations: b.annotations}
}

// putImage uploads the blobs and puts an OCI manifest of config and layers with
// annotations under tag (by its digest only when tag is ""), and returns its digest.
func putImage(t testing.TB, repo name.Repository, tag string, config blob, layers []blob, annotations map[string]string) string {
	t.Helper()
	m := v1.Manifest{SchemaVersion: 2, MediaType: types.OCIManifestSchema1, Config: writeBlob(t, repo, config), Annotations: annotations}
	for _, l := range layers {
		m.Layers = append(m.Layers, writeBlob(t, repo, l))
	}
	body, _ := json.Marshal(m)
	return putRaw(t, repo, tag, body, types.OCIManifestSchema1)
}

// putRaw puts a manifest as it is under tag (by its digest only when tag is "") and
// returns its digest.
func putRaw(t testing.TB, repo name.Repository, tag string, body []byte, mt types.MediaType) string {
	t.Helper()
	digest := "sha256:" + sha(body)
	var ref name.Reference = repo.Digest(digest)
	if tag != "" {
		ref = repo.Tag(tag)
	}
	if err := remote.Put(ref, rawManifest{body: body, mt: mt}); err != nil {
		t.Fatal(err)
	}
	return digest
}

// TestOCIVersionsRangesAndDigest: a chart pushed as Helm pushes it is found by version,
// by range (tags with "_" for "+") and by digest, and fetched.
func TestOCIVersionsRangesAndDigest(t *testing.T) {
	g := NewWithT(t)
	reg := newOCIRegistry(t)
	digests := map[string]string{}
	for _, v := range []string{"6.4.0", "6.5.0", "6.6.0+build.7", "7.0.0"} {
		digests[v] = reg.push(t, "podinfo", v, podinfo(t, v), nil)
	}
	c := newClient(t)
	src := Source{Repository: "oci://" + hostOf(reg.open) + "/charts", Name: "podinfo"}
	for version, want := range map[string]string{"6.5.0": "6.5.0", "~6": "6.6.0+build.7", "<6.5": "6.4.0", "": "7.0.0", "6.6.0+build.7": "6.6.0+build.7"} {
		src.Version = version
		r, err := c.Resolve(t.Context(), src)
		g.Expect(err).NotTo(HaveOccurred(), version)
		g.Expect(r.Version).To(Equal(want), version)
		g.Expect(r.Digest).To(Equal(digests[want]), version)
	}

	src.Version = ""
	src.Digest = digests["6.4.0"]
	r, err := c.Resolve(t.Context(), src)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(r).To(Equal(Resolved{Version: "6.4.0", Digest: digests["6.4.0"], URL: hostOf(reg.open) + "/charts/podinfo@" + digests["6.4.0"]}))

	parsed, err := ParseRevision(r.String())
	g.Expect(err).NotTo(HaveOccurred())
	dir, err := c.Fetch(t.Context(), src, parsed)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(os.ReadFile(filepath.Join(dir, "Chart.yaml"))).To(ContainSubstring("version: 6.4.0"))
	g.Expect(filepath.Join(dir, "values.yaml")).To(BeARegularFile())

	src.Digest, src.Version = "", ">=8"
	_, err = c.Resolve(t.Context(), src)
	g.Expect(err).To(MatchError(sources.ErrRefNotFound))
	src.Version = "9.9.9"
	_, err = c.Resolve(t.Context(), src)
	g.Expect(err).To(MatchError(sources.ErrRefNotFound))
}

// TestOCICredentials: basic auth from username/password and from a .dockerconfigjson
// entry of the registry's host; none, or another host's entry, is refused.
func TestOCICredentials(t *testing.T) {
	g := NewWithT(t)
	reg := newOCIRegistry(t)
	digest := reg.push(t, "small", "1.0.0", packageChart(t, "small", small("1.0.0")), nil)
	dockerConfig := func(host string) []byte {
		b, _ := json.Marshal(map[string]any{"auths": map[string]any{host: map[string]string{
			"auth": base64.StdEncoding.EncodeToString([]byte(regUser + ":" + regPass))}}})
		return b
	}
	src := Source{Repository: "oci://" + hostOf(reg.authed) + "/charts", Name: "small", Version: "1.0.0"}
	for name, creds := range map[string]Credentials{
		"basic":             {Username: regUser, Password: regPass},
		"dockerconfigjson":  {DockerConfigJSON: dockerConfig(hostOf(reg.authed))},
		"dockerconfig+http": {DockerConfigJSON: dockerConfig("http://" + hostOf(reg.authed) + "/v1/")},
	} {
		src.Credentials = creds
		c := newClient(t)
		r, err := c.Resolve(t.Context(), src)
		g.Expect(err).NotTo(HaveOccurred(), name)
		g.Expect(r.Digest).To(Equal(digest), name)
		_, err = c.Fetch(t.Context(), src, r)
		g.Expect(err).NotTo(HaveOccurred(), name)
	}
	for name, creds := range map[string]Credentials{
		"none":         {},
		"wrong":        {Username: regUser, Password: "wr0ng-pass"},
		"another host": {DockerConfigJSON: dockerConfig("registry.example")},
	} {
		src.Credentials = creds
		_, err := newClient(t).Resolve(t.Context(), src)
		g.Expect(err).To(MatchError(sources.ErrAuthFailed), name)
		g.Expect(err.Error()).NotTo(ContainSubstring("wr0ng-pass"))
	}
}

// TestOCIPlainHTTPOnlyToLoopback: a registry not on a loopback address is not reached
// over plain HTTP.
func TestOCIPlainHTTPOnlyToLoopback(t *testing.T) {
	g := NewWithT(t)
	tr := &guardedTransport{next: http.DefaultTransport, max: 1 << 20}
	req, _ := http.NewRequest(http.MethodGet, "http://10.1.2.3:5000/v2/", nil)
	_, err := tr.RoundTrip(req)
	g.Expect(err).To(MatchError(ContainSubstring("plain http to 10.1.2.3:5000 refused")))
	g.Expect(isLoopback("127.0.0.1:5000")).To(BeTrue())
	g.Expect(isLoopback("[::1]:5000")).To(BeTrue())
	g.Expect(isLoopback("localhost:5000")).To(BeTrue())
	g.Expect(isLoopback("192.168.1.1:5000")).To(BeFalse())
}

// TestOCINotAChart: a manifest whose config is not Helm's is refused.
func TestOCINotAChart(t *testing.T) {
	g := NewWithT(t)
	reg := newOCIRegistry(t)
	repo, _ := name.NewRepository(hostOf(reg.open) + "/charts/image")
	cfg := static.NewLayer([]byte(`{}`), types.OCIConfigJSON)
	g.Expect(remote.WriteLayer(repo, cfg)).To(Succeed())
	d, _ := cfg.Digest()
	body, _ := json.Marshal(v1.Manifest{SchemaVersion: 2, MediaType: types.OCIManifestSchema1,
		Config: v1.Descriptor{MediaType: types.OCIConfigJSON, Size: 2, Digest: d}})
	g.Expect(remote.Put(repo.Tag("1.0.0"), rawManifest{body: body, mt: types.OCIManifestSchema1})).To(Succeed())
	c := newClient(t)
	src := Source{Repository: "oci://" + hostOf(reg.open) + "/charts", Name: "image", Version: "1.0.0"}
	r, err := c.Resolve(t.Context(), src)
	g.Expect(err).NotTo(HaveOccurred())
	_, err = c.Fetch(t.Context(), src, r)
	g.Expect(err).To(MatchError(ContainSubstring("is not a Helm chart")))
	g.Expect(cacheEntries(t, c.CacheDir)).To(BeEmpty())
}
