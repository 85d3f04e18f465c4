// Package charttest serves Helm charts for tests: charts packaged as `helm package` does,
// an HTTP chart repository (index.yaml) and an in-process OCI registry, both on loopback.
package charttest

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"sync"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/converge-gitops/converge/sources/charts"
)

// Package is the archive `helm package` makes of a chart's files (paths relative to the
// chart): every file under name/.
func Package(name string, files map[string]string) ([]byte, error) {
	paths := make([]string, 0, len(files))
	for p := range files {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	for _, p := range paths {
		body := []byte(files[p])
		hdr := &tar.Header{Name: name + "/" + p, Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(body))}
		if err := tw.WriteHeader(hdr); err != nil {
			return nil, err
		}
		if _, err := tw.Write(body); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	if err := gz.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// Chart is a small chart named name at version: a ConfigMap holding .Values.message (default
// "hello") and the chart's version.
func Chart(name, version string) map[string]string {
	return map[string]string{
		"Chart.yaml":  fmt.Sprintf("apiVersion: v2\nname: %s\nversion: %s\n", name, version),
		"values.yaml": "message: hello\n",
		"templates/configmap.yaml": `apiVersion: v1
kind: ConfigMap
metadata:
  name: {{ .Release.Name }}
data:
  message: {{ .Values.message | quote }}
  version: {{ .Chart.Version | quote }}
`,
	}
}

func digest(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

type version struct {
	name, version string
	archive       []byte
}

// HTTPRepo is an HTTP chart repository serving index.yaml and the archives under charts/.
type HTTPRepo struct {
	srv      *httptest.Server
	mu       sync.Mutex
	versions []version
}

// NewHTTPRepo starts a repository; Close stops it.
func NewHTTPRepo() *HTTPRepo {
	r := &HTTPRepo{}
	r.srv = httptest.NewServer(http.HandlerFunc(r.serve))
	return r
}

// URL is the repository's URL, for spec.chart.repository.
func (r *HTTPRepo) URL() string { return r.srv.URL }

// Close stops the server.
func (r *HTTPRepo) Close() { r.srv.Close() }

// Add publishes an archive of chart name at ver.
func (r *HTTPRepo) Add(name, ver string, archive []byte) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.versions = append(r.versions, version{name, ver, archive})
}

func (r *HTTPRepo) serve(w http.ResponseWriter, req *http.Request) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if req.URL.Path == "/index.yaml" {
		var b strings.Builder
		b.WriteString("apiVersion: v1\nentries:\n")
		byName := map[string][]version{}
		for _, v := range r.versions {
			byName[v.name] = append(byName[v.name], v)
		}
		for n, list := range byName {
			fmt.Fprintf(&b, "  %s:\n", n)
			for _, v := range list {
				fmt.Fprintf(&b, "  - name: %s\n    version: %s\n    urls: [charts/%s-%s.tgz]\n    digest: %s\n",
					v.name, v.version, v.name, v.version, digest(v.archive))
			}
		}
		_, _ = io.WriteString(w, b.String())
		return
	}
	for _, v := range r.versions {
		if req.URL.Path == "/charts/"+v.name+"-"+v.version+".tgz" {
			_, _ = w.Write(v.archive)
			return
		}
	}
	http.NotFound(w, req)
}

// OCIRegistry is an in-process OCI registry on loopback.
type OCIRegistry struct {
	srv *httptest.Server
}

// NewOCIRegistry starts a registry; Close stops it.
func NewOCIRegistry() *OCIRegistry {
	return &OCIRegistry{srv: httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))}
}

// Close stops the registry.
func (o *OCIRegistry) Close() { o.srv.Close() }

// Repository is the oci:// URL charts are pushed under, for spec.chart.repository.
func (o *OCIRegistry) Repository() string {
	return "oci://" + strings.TrimPrefix(o.srv.URL, "http://") + "/charts"
}

// rawManifest is a manifest put as it is.
type rawManifest struct{ body []byte }

func (m rawManifest) RawManifest() ([]byte, error)        { return m.body, nil }
func (m rawManifest) MediaType() (types.MediaType, error) { return types.OCIManifestSchema1, nil }

// Push pushes an archive of chart at ver as `helm push` does (Helm's config media type, the
// archive as the chart layer, the tag with "_" for "+") and returns the manifest digest.
func (o *OCIRegistry) Push(chart, ver string, archive []byte) (string, error) {
	repo, err := name.NewRepository(strings.TrimPrefix(o.srv.URL, "http://") + "/charts/" + chart)
	if err != nil {
		return "", err
	}
	cfg, err := json.Marshal(map[string]string{"apiVersion": "v2", "name": chart, "version": ver})
	if err != nil {
		return "", err
	}
	m := v1.Manifest{SchemaVersion: 2, MediaType: types.OCIManifestSchema1}
	for i, b := range []struct {
		data []byte
		mt   types.MediaType
	}{{cfg, charts.ConfigMediaType}, {archive, charts.ChartLayerMediaType}} {
		l := static.NewLayer(b.data, b.mt)
		if err := remote.WriteLayer(repo, l); err != nil {
			return "", err
		}
		d, _ := l.Digest()
		desc := v1.Descriptor{MediaType: b.mt, Size: int64(len(b.data)), Digest: d}
		if i == 0 {
			m.Config = desc
		} else {
			m.Layers = append(m.Layers, desc)
		}
	}
	body, err := json.Marshal(m)
	if err != nil {
		return "", err
	}
	if err := remote.Put(repo.Tag(strings.ReplaceAll(ver, "+", "_")), rawManifest{body: body}); err != nil {
		return "", err
	}
	return "sha256:" + digest(body), nil
}
