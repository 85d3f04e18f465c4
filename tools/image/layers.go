package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"encoding/pem"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"golang.org/x/crypto/x509roots/fallback/bundle"
)

// The nonroot user of the image, as distroless names it.
const (
	passwd = "root:x:0:0:root:/root:/sbin/nologin\n" +
		"nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n"
	group = "root:x:0:\n" +
		"nonroot:x:65532:\n"
)

// entry is a file or directory of a layer.
type entry struct {
	name     string // relative, no leading slash; directories end in "/"
	mode     int64
	uid, gid int
	body     []byte
}

// CARoots returns Mozilla's root certificates as PEM, from the NSS trust store that
// golang.org/x/crypto/x509roots/fallback ships (pinned in go.sum: the same bytes on every
// build machine, unlike the build machine's /etc/ssl/certs). Roots that carry a constraint
// a PEM file cannot express (a distrust-after date) are left out: trusting them without
// it would trust more than Mozilla does.
func CARoots() ([]byte, int) {
	var b bytes.Buffer
	n := 0
	for root := range bundle.Roots() {
		if root.Constraint != nil {
			continue
		}
		_ = pem.Encode(&b, &pem.Block{Type: "CERTIFICATE", Bytes: root.Certificate})
		n++
	}
	return b.Bytes(), n
}

// baseLayer holds what the binary needs around it: the user, the CA roots, /tmp.
func baseLayer(created time.Time) (v1.Layer, error) {
	cas, _ := CARoots()
	return layer(created, []entry{
		{name: "etc/", mode: 0o755},
		{name: "etc/passwd", mode: 0o644, body: []byte(passwd)},
		{name: "etc/group", mode: 0o644, body: []byte(group)},
		{name: "etc/ssl/", mode: 0o755},
		{name: "etc/ssl/certs/", mode: 0o755},
		{name: strings.TrimPrefix(CABundle, "/"), mode: 0o644, body: cas},
		{name: "home/", mode: 0o755},
		{name: "home/nonroot/", mode: 0o700, uid: 65532, gid: 65532},
		{name: "tmp/", mode: 0o1777},
	})
}

// binaryLayer holds the binary at Entrypoint, owned by root: the user cannot change it.
func binaryLayer(path string, created time.Time) (v1.Layer, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return layer(created, []entry{{name: strings.TrimPrefix(Entrypoint, "/"), mode: 0o755, body: b}})
}

// layer is a gzipped tar of entries, reproducible: sorted by name, every time created, no
// user or group names. It is compressed once here; go-containerregistry then reads the
// compressed bytes as they are.
func layer(created time.Time, entries []entry) (v1.Layer, error) {
	b, err := tarGz(created, entries)
	if err != nil {
		return nil, err
	}
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(b)), nil
	}, tarball.WithMediaType(types.OCILayer))
}

func tarGz(created time.Time, entries []entry) ([]byte, error) {
	entries = slices.Clone(entries)
	slices.SortFunc(entries, func(a, b entry) int { return strings.Compare(a.name, b.name) })
	var buf bytes.Buffer
	zw, err := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	if err != nil {
		return nil, err
	}
	tw := tar.NewWriter(zw)
	for _, e := range entries {
		h := &tar.Header{
			Name:    e.name,
			Mode:    e.mode,
			Uid:     e.uid,
			Gid:     e.gid,
			ModTime: created,
			Format:  tar.FormatPAX,
		}
		if strings.HasSuffix(e.name, "/") {
			h.Typeflag = tar.TypeDir
		} else {
			h.Typeflag = tar.TypeReg
			h.Size = int64(len(e.body))
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, fmt.Errorf("writing %s: %w", e.name, err)
		}
		if _, err := tw.Write(e.body); err != nil {
			return nil, fmt.Errorf("writing %s: %w", e.name, err)
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
