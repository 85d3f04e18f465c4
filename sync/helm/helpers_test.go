package helm

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

const chartYAML = "apiVersion: v2\nname: %s\nversion: 0.1.0\n"

// writeChart writes files (path → content) under a new directory and returns it.
func writeChart(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "chart")
	for name, content := range files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func symlink(t *testing.T, target, link string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(link), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
}

// tarEntry is one entry of a test archive; size, when set, is the size the header claims and
// the content is that many zero bytes.
type tarEntry struct {
	name, content, link string
	typ                 byte
	size                int64
}

func writeTgz(t *testing.T, path string, entries []tarEntry) {
	t.Helper()
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	for _, e := range entries {
		hd := &tar.Header{Name: e.name, Mode: 0o644, Typeflag: e.typ, Linkname: e.link, Size: int64(len(e.content))}
		if e.typ == 0 {
			hd.Typeflag = tar.TypeReg
		}
		if e.size > 0 {
			hd.Size = e.size
		}
		if hd.Typeflag != tar.TypeReg {
			hd.Size = 0
		}
		if err := tw.WriteHeader(hd); err != nil {
			t.Fatal(err)
		}
		if e.size > 0 {
			zeros := make([]byte, 1<<20)
			for left := e.size; left > 0; left -= int64(len(zeros)) {
				if _, err := tw.Write(zeros[:min(left, int64(len(zeros)))]); err != nil {
					t.Fatal(err)
				}
			}
		} else if _, err := tw.Write([]byte(e.content)); err != nil && hd.Typeflag == tar.TypeReg {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := gz.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

func mustLoad(t *testing.T, dir string) *Chart {
	t.Helper()
	c, err := LoadChart(dir)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func render(t *testing.T, c *Chart, opts Options) (*Release, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if opts.ReleaseName == "" {
		opts.ReleaseName = "rel"
	}
	if opts.Namespace == "" {
		opts.Namespace = "ns"
	}
	return Render(ctx, c, opts)
}

func configMap(name, data string) string {
	return "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: " + name + "\ndata:\n" + data
}

var unstructuredString = unstructured.NestedString
