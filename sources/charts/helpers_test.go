package charts

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/ProtonMail/go-crypto/openpgp"
	"github.com/ProtonMail/go-crypto/openpgp/armor"
	"github.com/ProtonMail/go-crypto/openpgp/clearsign"

	"github.com/converge-gitops/converge/internal/testcharts"
)

// tarEntry is one entry of a test archive.
type tarEntry struct {
	hdr  tar.Header
	body []byte
}

func file(name, body string) tarEntry {
	return tarEntry{hdr: tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(body))}, body: []byte(body)}
}

// tgz writes entries as a gzipped tar.
func tgz(t testing.TB, entries ...tarEntry) []byte {
	t.Helper()
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	for _, e := range entries {
		hdr := e.hdr
		if err := tw.WriteHeader(&hdr); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write(e.body); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := gz.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

var versionLine = regexp.MustCompile(`(?m)^version: .*$`)

// chartFiles are the files of a chart as fsys holds them, Chart.yaml's version replaced.
func chartFiles(t testing.TB, fsys fs.FS, version string) map[string][]byte {
	t.Helper()
	files := map[string][]byte{}
	err := fs.WalkDir(fsys, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(fsys, p)
		if p == "Chart.yaml" {
			b = versionLine.ReplaceAll(b, []byte("version: "+version))
		}
		files[p] = b
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// packageChart is the archive `helm package` would make of files: every file under
// name/.
func packageChart(t testing.TB, name string, files map[string][]byte) []byte {
	t.Helper()
	paths := make([]string, 0, len(files))
	for p := range files {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	entries := make([]tarEntry, 0, len(paths))
	for _, p := range paths {
		entries = append(entries, file(name+"/"+p, string(files[p])))
	}
	return tgz(t, entries...)
}

// podinfo is the real podinfo chart packaged at version.
func podinfo(t testing.TB, version string) []byte {
	t.Helper()
	return packageChart(t, "podinfo", chartFiles(t, testcharts.FS(testcharts.Podinfo), version))
}

func sha(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// repoChart is one version of a chart in a helmRepo.
type repoChart struct {
	name, version string
	url           string // as the index gives it; default charts/<name>-<version>.tgz
	digest        string // as the index gives it; default the archive's; "-" for none
	archive       []byte
	prov          []byte
}

// helmRepo is an HTTP chart repository: index.yaml and archives, with optional auth.
type helmRepo struct {
	srv      *httptest.Server
	mu       sync.Mutex
	charts   []repoChart
	index    []byte // when set, served instead of the generated index
	auth     func(*http.Request) bool
	requests atomic.Int64
	indexGET atomic.Int64 // index answers with a body
}

func newHelmRepo(t testing.TB, tlsServer bool) *helmRepo {
	t.Helper()
	r := &helmRepo{}
	h := http.HandlerFunc(r.serve)
	if tlsServer {
		r.srv = httptest.NewTLSServer(h)
	} else {
		r.srv = httptest.NewServer(h)
	}
	t.Cleanup(r.srv.Close)
	return r
}

func (r *helmRepo) add(c repoChart) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.charts = append(r.charts, c)
}

func (r *helmRepo) serve(w http.ResponseWriter, req *http.Request) {
	r.requests.Add(1)
	if r.auth != nil && !r.auth(req) {
		w.Header().Set("WWW-Authenticate", `Basic realm="charts"`)
		http.Error(w, "unauthorized", http.StatusUnauthorized)
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if req.URL.Path == "/index.yaml" {
		body := r.index
		if body == nil {
			body = r.indexYAML()
		}
		etag := `"` + sha(body) + `"`
		w.Header().Set("ETag", etag)
		if req.Header.Get("If-None-Match") == etag {
			w.WriteHeader(http.StatusNotModified)
			return
		}
		r.indexGET.Add(1)
		_, _ = w.Write(body)
		return
	}
	for _, c := range r.charts {
		if req.URL.Path == "/charts/"+c.name+"-"+c.version+".tgz" {
			_, _ = w.Write(c.archive)
			return
		}
		if req.URL.Path == "/charts/"+c.name+"-"+c.version+".tgz.prov" && c.prov != nil {
			_, _ = w.Write(c.prov)
			return
		}
	}
	http.NotFound(w, req)
}

func (r *helmRepo) indexYAML() []byte {
	var b strings.Builder
	b.WriteString("apiVersion: v1\nentries:\n")
	byName := map[string][]repoChart{}
	for _, c := range r.charts {
		byName[c.name] = append(byName[c.name], c)
	}
	for name, list := range byName {
		fmt.Fprintf(&b, "  %s:\n", name)
		for _, c := range list {
			u := c.url
			if u == "" {
				u = "charts/" + c.name + "-" + c.version + ".tgz"
			}
			fmt.Fprintf(&b, "  - name: %s\n    version: %s\n    urls:\n    - %s\n", c.name, c.version, u)
			switch c.digest {
			case "":
				fmt.Fprintf(&b, "    digest: %s\n", sha(c.archive))
			case "-":
			default:
				fmt.Fprintf(&b, "    digest: %s\n", c.digest)
			}
		}
	}
	return []byte(b.String())
}

// signer is an OpenPGP key made for a test.
type signer struct {
	entity *openpgp.Entity
	public []byte // ASCII-armored
}

func newSigner(t testing.TB, name string) *signer {
	t.Helper()
	e, err := openpgp.NewEntity(name, "", strings.ToLower(strings.ReplaceAll(name, " ", "."))+"@example.com", nil)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	w, err := armor.Encode(&buf, openpgp.PublicKeyType, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Serialize(w); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return &signer{entity: e, public: buf.Bytes()}
}

// prov writes the provenance file `helm package --sign` makes: Chart.yaml, "...", the
// archive's sum, clearsigned.
func (s *signer) prov(t testing.TB, chartYAML []byte, filename string, archive []byte) []byte {
	t.Helper()
	var msg bytes.Buffer
	msg.Write(bytes.TrimRight(chartYAML, "\n"))
	fmt.Fprintf(&msg, "\n\n...\nfiles:\n  %s: sha256:%s\n", filename, sha(archive))
	var out bytes.Buffer
	w, err := clearsign.Encode(&out, s.entity.PrivateKey, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write(msg.Bytes()); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return out.Bytes()
}

// small is a small chart's files at version.
func small(version string) map[string][]byte {
	return map[string][]byte{
		"Chart.yaml":               []byte("apiVersion: v2\nname: small\nversion: " + version + "\n"),
		"values.yaml":              []byte("greeting: hello\n"),
		"templates/configmap.yaml": []byte("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: small\ndata:\n  greeting: {{ .Values.greeting }}\n"),
	}
}

// cacheEntries lists what dir holds.
func cacheEntries(t testing.TB, dir string) []string {
	t.Helper()
	list, err := os.ReadDir(dir)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	names := make([]string, 0, len(list))
	for _, e := range list {
		names = append(names, e.Name())
	}
	return names
}
