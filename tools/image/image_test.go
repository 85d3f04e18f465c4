package main

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/x509"
	"debug/elf"
	"encoding/pem"
	"errors"
	"io"
	"io/fs"
	"log"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// The tests build the image of the working tree of this repository. They build
// linux/amd64 only unless CONVERGE_IMAGE_TEST_PLATFORMS says otherwise: a second
// platform compiles every package of converge again (minutes on a cold cache), and
// `make image` builds both anyway.

// testOptions are those of every build here: fixed values, as make image passes them.
func testOptions(t *testing.T) Options {
	t.Helper()
	platforms := os.Getenv("CONVERGE_IMAGE_TEST_PLATFORMS")
	if platforms == "" {
		platforms = "linux/amd64"
	}
	ps, err := ParsePlatforms(platforms)
	if err != nil {
		t.Fatal(err)
	}
	return Options{
		Root:            filepath.Join("..", ".."),
		Platforms:       ps,
		Version:         "v9.8.7-3-g0123abc-dirty",
		Revision:        "0123abcdef0123abcdef0123abcdef0123abcdef",
		SourceDateEpoch: "1767225600", // 2026-01-01T00:00:00Z
	}
}

var (
	builtOnce sync.Once
	built     v1.ImageIndex
	buildErr  error
)

// testImage is the image of testOptions, built once for all tests of the package.
func testImage(t *testing.T) v1.ImageIndex {
	t.Helper()
	o := testOptions(t)
	builtOnce.Do(func() {
		start := time.Now()
		built, buildErr = Build(context.Background(), o)
		t.Logf("built %v in %s", platformNames(o.Platforms), time.Since(start).Round(time.Second))
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return built
}

// platformImage is the image of p in idx.
func platformImage(t *testing.T, idx v1.ImageIndex, arch string) v1.Image {
	t.Helper()
	m, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range m.Manifests {
		if d.Platform != nil && d.Platform.OS == "linux" && d.Platform.Architecture == arch {
			img, err := idx.Image(d.Digest)
			if err != nil {
				t.Fatal(err)
			}
			return img
		}
	}
	t.Fatalf("no linux/%s image in the index", arch)
	return nil
}

// unpack writes the layers of img, in order, into a new directory and returns it with
// the tar header of each path.
func unpack(t *testing.T, img v1.Image) (string, map[string]*tar.Header) {
	t.Helper()
	root := t.TempDir()
	headers := map[string]*tar.Header{}
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range layers {
		mt, err := l.MediaType()
		if err != nil {
			t.Fatal(err)
		}
		if mt != types.OCILayer {
			t.Errorf("layer media type %s, want %s", mt, types.OCILayer)
		}
		rc, err := l.Uncompressed()
		if err != nil {
			t.Fatal(err)
		}
		tr := tar.NewReader(rc)
		var names []string
		for {
			h, err := tr.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			names = append(names, h.Name)
			headers[strings.TrimSuffix(h.Name, "/")] = h
			p := filepath.Join(root, filepath.FromSlash(h.Name))
			switch h.Typeflag {
			case tar.TypeDir:
				if err := os.MkdirAll(p, 0o755); err != nil {
					t.Fatal(err)
				}
				// The mode as tar has it, sticky bit included (/tmp is 1777).
				if err := os.Chmod(p, h.FileInfo().Mode()&(fs.ModePerm|fs.ModeSticky)); err != nil {
					t.Fatal(err)
				}
			case tar.TypeReg:
				b, err := io.ReadAll(tr)
				if err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(p, b, fs.FileMode(h.Mode).Perm()); err != nil {
					t.Fatal(err)
				}
			default:
				t.Errorf("%s: unexpected tar entry type %c", h.Name, h.Typeflag)
			}
			if os.Geteuid() == 0 {
				if err := os.Lchown(p, h.Uid, h.Gid); err != nil {
					t.Fatal(err)
				}
			}
		}
		_ = rc.Close()
		if !slices.IsSorted(names) {
			t.Errorf("layer entries are not sorted: %q", names)
		}
	}
	return root, headers
}

// TestImage: the image holds the static converge binary as entrypoint, run as nonroot
// 65532, Mozilla's roots at the path Go reads, nothing else (no shell); the binary runs
// from the unpacked root filesystem and reports the stamped version.
func TestImage(t *testing.T) {
	o := testOptions(t)
	idx := testImage(t)
	created := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	wantMeta := map[string]string{
		"org.opencontainers.image.version":  o.Version,
		"org.opencontainers.image.revision": o.Revision,
		"org.opencontainers.image.source":   "https://github.com/converge-gitops/converge",
		"org.opencontainers.image.created":  "2026-01-01T00:00:00Z",
	}
	hasMeta := func(what string, got map[string]string) {
		t.Helper()
		for k, v := range wantMeta {
			if got[k] != v {
				t.Errorf("%s %s = %q, want %q", what, k, got[k], v)
			}
		}
	}

	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if im.MediaType != types.OCIImageIndex {
		t.Errorf("index media type %s", im.MediaType)
	}
	hasMeta("index annotation", im.Annotations)
	var platforms []string
	for _, d := range im.Manifests {
		platforms = append(platforms, d.Platform.String())
	}
	if want := platformNames(o.Platforms); !slices.Equal(platforms, want) {
		t.Errorf("index platforms %q, want %q", platforms, want)
	}

	for _, p := range o.Platforms {
		img := platformImage(t, idx, p.Architecture)
		m, err := img.Manifest()
		if err != nil {
			t.Fatal(err)
		}
		hasMeta("manifest annotation", m.Annotations)
		cf, err := img.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		hasMeta("label", cf.Config.Labels)
		if cf.Architecture != p.Architecture || cf.OS != "linux" {
			t.Errorf("config platform %s/%s, want %s", cf.OS, cf.Architecture, p)
		}
		if cf.Config.User != "65532:65532" {
			t.Errorf("user %q, want 65532:65532", cf.Config.User)
		}
		if !slices.Equal(cf.Config.Entrypoint, []string{"/converge"}) {
			t.Errorf("entrypoint %q, want [/converge]", cf.Config.Entrypoint)
		}
		if !cf.Created.Equal(created) {
			t.Errorf("created %s, want the commit time %s", cf.Created, created)
		}
		for _, h := range cf.History {
			if !h.Created.Equal(created) {
				t.Errorf("history %q created %s, want %s", h.CreatedBy, h.Created, created)
			}
		}

		root, headers := unpack(t, img)
		var paths []string
		for p, h := range headers {
			paths = append(paths, p)
			if !h.ModTime.Equal(created) {
				t.Errorf("%s: mtime %s, want %s", p, h.ModTime, created)
			}
			if h.Uname != "" || h.Gname != "" {
				t.Errorf("%s: owner names %q/%q", p, h.Uname, h.Gname)
			}
			owner := 0
			if p == "home/nonroot" {
				owner = 65532
			}
			if h.Uid != owner || h.Gid != owner {
				t.Errorf("%s: owned by %d:%d, want %d:%d", p, h.Uid, h.Gid, owner, owner)
			}
		}
		// Exactly these files: no shell, no package manager, nothing to exec but converge.
		slices.Sort(paths)
		want := []string{"converge", "etc", "etc/group", "etc/passwd", "etc/ssl", "etc/ssl/certs",
			"etc/ssl/certs/ca-certificates.crt", "home", "home/nonroot", "tmp"}
		if !slices.Equal(paths, want) {
			t.Errorf("image files %q, want %q", paths, want)
		}
		if _, err := os.Stat(filepath.Join(root, "bin", "sh")); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("/bin/sh: %v, want none", err)
		}
		if mode := headers["converge"].Mode; mode != 0o755 {
			t.Errorf("/converge mode %o, want 755 (root's, not writable by the user)", mode)
		}
		if mode := headers["tmp"].Mode; mode != 0o1777 {
			t.Errorf("/tmp mode %o, want 1777", mode)
		}

		// The user the config names exists, as in distroless.
		passwd, err := os.ReadFile(filepath.Join(root, "etc", "passwd"))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(passwd), "\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n") {
			t.Errorf("/etc/passwd has no nonroot 65532:\n%s", passwd)
		}
		group, err := os.ReadFile(filepath.Join(root, "etc", "group"))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(group), "\nnonroot:x:65532:\n") {
			t.Errorf("/etc/group has no nonroot 65532:\n%s", group)
		}

		// The CA bundle: every block a certificate Go parses, all of Mozilla's unconstrained roots.
		pemData, err := os.ReadFile(filepath.Join(root, "etc", "ssl", "certs", "ca-certificates.crt"))
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for rest := pemData; ; n++ {
			var b *pem.Block
			b, rest = pem.Decode(rest)
			if b == nil {
				if len(bytes.TrimSpace(rest)) > 0 {
					t.Errorf("CA bundle: %d bytes that are not PEM", len(rest))
				}
				break
			}
			if _, err := x509.ParseCertificate(b.Bytes); err != nil {
				t.Errorf("CA bundle certificate %d: %v", n, err)
			}
		}
		if _, want := CARoots(); n != want || n < 100 {
			t.Errorf("CA bundle has %d certificates, want the %d of the bundle (and more than 100)", n, want)
		}
		if pool := x509.NewCertPool(); !pool.AppendCertsFromPEM(pemData) {
			t.Error("CA bundle: x509.CertPool takes no certificate")
		}

		// Static: no program interpreter (dynamic loader) to find in the image.
		f, err := elf.Open(filepath.Join(root, "converge"))
		if err != nil {
			t.Fatal(err)
		}
		for _, prog := range f.Progs {
			if prog.Type == elf.PT_INTERP {
				t.Error("/converge is dynamically linked")
			}
		}
		wantMachine := map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}[p.Architecture]
		if f.Machine != wantMachine {
			t.Errorf("/converge is for %s, want %s", f.Machine, wantMachine)
		}
		_ = f.Close()

		if p.Architecture != hostArch() {
			continue
		}
		bin := filepath.Join(root, "converge")
		out, err := exec.Command(bin, "version").CombinedOutput()
		if err != nil {
			t.Fatalf("%s version: %v\n%s", bin, err, out)
		}
		for _, want := range []string{"converge " + o.Version + "\n", "commit:  " + o.Revision + "\n",
			"built:   2026-01-01T00:00:00Z\n", "linux/" + p.Architecture + "\n"} {
			if !strings.Contains(string(out), want) {
				t.Errorf("converge version printed\n%s\nwant %q in it", out, want)
			}
		}
		out, err = exec.Command(bin, "serve", "--help").CombinedOutput()
		if err != nil {
			t.Fatalf("%s serve --help: %v\n%s", bin, err, out)
		}
		for _, want := range []string{"--leader-elect", "--metrics-bind-address", "--cache-dir"} {
			if !strings.Contains(string(out), want) {
				t.Errorf("converge serve --help has no %s:\n%s", want, out)
			}
		}

		// As a container runs it: the image's root as /, user 65532 (needs root to chroot).
		// converge's init needs a /tmp it may write (controller-runtime's envtest, linked
		// in for `converge dev`, creates /tmp/kubebuilder-envtest or panics): the image's
		// /tmp is 1777, as the Deployment's emptyDir is writable.
		if os.Geteuid() != 0 {
			t.Log("not root: converge not run chrooted into the image as 65532")
			continue
		}
		if err := os.Chmod(root, 0o755); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command("/converge", "version")
		cmd.Dir = "/"
		cmd.Env = []string{}
		cmd.SysProcAttr = &syscall.SysProcAttr{Chroot: root, Credential: &syscall.Credential{Uid: 65532, Gid: 65532}}
		out, err = cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("chroot %s /converge version as 65532: %v\n%s", root, err, out)
		}
		if !strings.HasPrefix(string(out), "converge "+o.Version+"\n") {
			t.Errorf("chrooted converge version printed\n%s", out)
		}
	}
}

// hostArch is the GOARCH the test binary runs on: the image's binary of that
// architecture runs here.
func hostArch() string {
	out, err := exec.Command("go", "env", "GOHOSTARCH").Output()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(out))
}

// TestReproducible: a second build of the same tree and options gives the same digest,
// the same OCI layout and the same archive, byte for byte.
func TestReproducible(t *testing.T) {
	first := testImage(t)
	start := time.Now()
	second, err := Build(context.Background(), testOptions(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("rebuilt in %s", time.Since(start).Round(time.Second))
	d1, err := first.Digest()
	if err != nil {
		t.Fatal(err)
	}
	d2, err := second.Digest()
	if err != nil {
		t.Fatal(err)
	}
	if d1 != d2 {
		t.Fatalf("two builds gave %s and %s", d1, d2)
	}
	t.Logf("digest %s, both times", d1)

	ref, err := Reference(DefaultRepository, testOptions(t).Version)
	if err != nil {
		t.Fatal(err)
	}
	created := time.Unix(1767225600, 0)
	a, b := t.TempDir(), t.TempDir()
	if err := WriteOutputs(a, ref, first, created); err != nil {
		t.Fatal(err)
	}
	if err := WriteOutputs(b, ref, second, created); err != nil {
		t.Fatal(err)
	}
	ta, err := os.ReadFile(filepath.Join(a, "converge.oci.tar"))
	if err != nil {
		t.Fatal(err)
	}
	tb, err := os.ReadFile(filepath.Join(b, "converge.oci.tar"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(ta, tb) {
		t.Error("the two OCI archives differ")
	}
	t.Logf("OCI archive: %d bytes", len(ta))
	digest, err := os.ReadFile(filepath.Join(a, "digest"))
	if err != nil {
		t.Fatal(err)
	}
	if string(digest) != d1.String()+"\n" {
		t.Errorf("digest file %q, want %s", digest, d1)
	}

	// The layout names the index by its tag, and reads back as the same index.
	p, err := layout.FromPath(filepath.Join(a, "oci"))
	if err != nil {
		t.Fatal(err)
	}
	top, err := p.ImageIndex()
	if err != nil {
		t.Fatal(err)
	}
	tm, err := top.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(tm.Manifests) != 1 || tm.Manifests[0].Digest != d1 ||
		tm.Manifests[0].Annotations["org.opencontainers.image.ref.name"] != Tag(testOptions(t).Version) {
		t.Errorf("index.json names %+v, want the index %s tagged %s", tm.Manifests, d1, Tag(testOptions(t).Version))
	}
}

// TestPush: -push writes the index, its images and blobs to a registry (an in-process one
// on loopback here), from which it reads back by tag with the same digest and layers.
func TestPush(t *testing.T) {
	idx := testImage(t)
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	t.Cleanup(srv.Close)
	ref, err := Reference(strings.TrimPrefix(srv.URL, "http://")+"/converge-gitops/converge", "v9.8.7+meta")
	if err != nil {
		t.Fatal(err)
	}
	if ref.TagStr() != "v9.8.7-meta" {
		t.Errorf("tag %s, want v9.8.7-meta", ref.TagStr())
	}
	pushed, err := Push(context.Background(), ref, idx)
	if err != nil {
		t.Fatal(err)
	}
	d, err := idx.Digest()
	if err != nil {
		t.Fatal(err)
	}
	if pushed != ref.String()+"@"+d.String() {
		t.Errorf("Push returned %q, want %s@%s", pushed, ref, d)
	}

	got, err := remote.Index(ref)
	if err != nil {
		t.Fatal(err)
	}
	gd, err := got.Digest()
	if err != nil {
		t.Fatal(err)
	}
	if gd != d {
		t.Fatalf("the registry has %s, want %s", gd, d)
	}
	// By digest too, as a pinned Deployment pulls it.
	byDigest, err := name.NewDigest(ref.Context().String() + "@" + d.String())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := remote.Index(byDigest); err != nil {
		t.Errorf("pulling %s: %v", byDigest, err)
	}
	want := platformImage(t, idx, "amd64")
	img, err := remote.Image(ref, remote.WithPlatform(v1.Platform{OS: "linux", Architecture: "amd64"}))
	if err != nil {
		t.Fatal(err)
	}
	wl, err := want.Layers()
	if err != nil {
		t.Fatal(err)
	}
	gl, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	if len(gl) != len(wl) {
		t.Fatalf("pulled %d layers, want %d", len(gl), len(wl))
	}
	for i := range gl {
		a, _ := wl[i].Digest()
		b, err := gl[i].Digest()
		if err != nil || a != b {
			t.Errorf("layer %d: pulled %s (%v), want %s", i, b, err, a)
		}
		rc, err := gl[i].Compressed() // the blob itself, verified against its digest while read
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.Copy(io.Discard, rc); err != nil {
			t.Errorf("layer %d: %v", i, err)
		}
		_ = rc.Close()
	}
}

// TestOptionsBadInput: what cannot be stamped or pushed fails before anything is built.
func TestOptionsBadInput(t *testing.T) {
	for _, tc := range []struct {
		name string
		o    Options
		want string
	}{
		{name: "version with a space", o: Options{Version: "v1 -X main.commit=evil", Revision: "abc", SourceDateEpoch: "1"},
			want: `invalid version "v1 -X main.commit=evil"`},
		{name: "revision with a quote", o: Options{Version: "v1", Revision: "abc'", SourceDateEpoch: "1"},
			want: `invalid revision "abc'"`},
		{name: "epoch not a number", o: Options{Version: "v1", Revision: "abc", SourceDateEpoch: "yesterday"},
			want: `invalid SOURCE_DATE_EPOCH "yesterday"`},
		{name: "no platform", o: Options{Version: "v1", Revision: "abc", SourceDateEpoch: "1"},
			want: "no platform to build"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.o.Complete(context.Background())
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Complete: %v, want %q", err, tc.want)
			}
		})
	}
	for _, bad := range []string{"windows/amd64", "linux/arm/v7", "linux", ""} {
		if _, err := ParsePlatforms(bad); err == nil {
			t.Errorf("ParsePlatforms(%q) succeeded", bad)
		}
	}
	for _, bad := range []string{"ghcr.io/x/converge@sha256:0123", "Bad Name"} {
		if _, err := Reference(bad, "v1"); err == nil {
			t.Errorf("Reference(%q) succeeded", bad)
		}
	}
	for image, want := range map[string]string{
		"ghcr.io/converge-gitops/converge":     "ghcr.io/converge-gitops/converge:v1.2.3-meta",
		"localhost:5000/converge":              "localhost:5000/converge:v1.2.3-meta",
		"localhost:5000/converge:edge":         "localhost:5000/converge:edge",
		"registry.example.com/a/converge:rc-1": "registry.example.com/a/converge:rc-1",
	} {
		ref, err := Reference(image, "v1.2.3+meta")
		if err != nil || ref.String() != want {
			t.Errorf("Reference(%q) = %v, %v; want %s", image, ref, err, want)
		}
	}
}
