package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// DefaultRepository is where converge's images are published; `converge install` of a
// stamped binary deploys DefaultRepository:<its version>.
const DefaultRepository = "ghcr.io/converge-gitops/converge"

// Source is the repository the image is built from (org.opencontainers.image.source).
const Source = "https://github.com/converge-gitops/converge"

// The layout of the image.
const (
	// Entrypoint is the binary's path in the image.
	Entrypoint = "/converge"
	// User is the image's user: nonroot, 65532, as distroless and the Deployment have it.
	User = "65532:65532"
	// CABundle is where Go's crypto/x509 looks first on Linux.
	CABundle = "/etc/ssl/certs/ca-certificates.crt"
)

// Options say what to build.
type Options struct {
	// Root is the converge repository (its go.mod is that of the binary).
	Root string
	// Platforms to build, each linux/amd64 or linux/arm64 (any GOOS/GOARCH Go can
	// cross-compile to with CGO_ENABLED=0 works).
	Platforms []v1.Platform
	// Version, Revision and SourceDateEpoch are stamped into the binary (`converge
	// version`), the labels and the annotations; Complete fills those left empty from git.
	Version, Revision, SourceDateEpoch string
	// Log receives a line per step; nil discards them.
	Log io.Writer
}

// versionRE is what may be stamped: git describe output, semver, a commit.
var versionRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._+-]{0,127}$`)

// Complete fills Version (git describe --tags --always --dirty, else "dev"), Revision
// (git rev-parse HEAD) and SourceDateEpoch (the commit time) from the repository at Root,
// and checks them.
func (o *Options) Complete(ctx context.Context) error {
	if o.Version == "" {
		o.Version = "dev"
		if v, err := o.git(ctx, "describe", "--tags", "--always", "--dirty"); err == nil && v != "" {
			o.Version = v
		}
	}
	if o.Revision == "" {
		v, err := o.git(ctx, "rev-parse", "HEAD")
		if err != nil {
			return fmt.Errorf("finding the commit (set -revision): %w", err)
		}
		o.Revision = v
	}
	if o.SourceDateEpoch == "" {
		v, err := o.git(ctx, "log", "-1", "--format=%ct")
		if err != nil {
			return fmt.Errorf("finding the commit time (set SOURCE_DATE_EPOCH): %w", err)
		}
		o.SourceDateEpoch = v
	}
	if !versionRE.MatchString(o.Version) {
		return fmt.Errorf("invalid version %q: letters, digits and ._+- only", o.Version)
	}
	if !versionRE.MatchString(o.Revision) {
		return fmt.Errorf("invalid revision %q", o.Revision)
	}
	if _, err := o.created(); err != nil {
		return err
	}
	if len(o.Platforms) == 0 {
		return fmt.Errorf("no platform to build")
	}
	return nil
}

func (o *Options) git(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "git", args...)
	cmd.Dir = o.Root
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("git %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return strings.TrimSpace(string(out)), nil
}

// created is the time of everything in the image: SOURCE_DATE_EPOCH.
func (o *Options) created() (time.Time, error) {
	sec, err := strconv.ParseInt(o.SourceDateEpoch, 10, 64)
	if err != nil || sec < 0 {
		return time.Time{}, fmt.Errorf("invalid SOURCE_DATE_EPOCH %q: want seconds since 1970", o.SourceDateEpoch)
	}
	return time.Unix(sec, 0).UTC(), nil
}

func (o *Options) logf(format string, args ...any) {
	if o.Log != nil {
		_, _ = fmt.Fprintf(o.Log, format+"\n", args...)
	}
}

// LDFlags are the linker flags of the image's binary: no symbol table or DWARF, no build
// id (it hashes inputs that differ between machines), and the version stamped as `make
// build` stamps it.
func LDFlags(version, revision string, date time.Time) string {
	return fmt.Sprintf("-s -w -buildid= -X main.version=%s -X main.commit=%s -X main.date=%s",
		version, revision, date.UTC().Format(time.RFC3339))
}

// ParsePlatforms parses "linux/amd64,linux/arm64".
func ParsePlatforms(s string) ([]v1.Platform, error) {
	var ps []v1.Platform
	for f := range strings.SplitSeq(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		p, err := v1.ParsePlatform(f)
		if err != nil {
			return nil, fmt.Errorf("invalid platform %q: %w", f, err)
		}
		if p.OS != "linux" || p.Architecture == "" || p.Variant != "" || p.OSVersion != "" {
			return nil, fmt.Errorf("invalid platform %q: want linux/ARCH", f)
		}
		ps = append(ps, *p)
	}
	if len(ps) == 0 {
		return nil, fmt.Errorf("no platform in %q", s)
	}
	return ps, nil
}

func platformNames(ps []v1.Platform) []string {
	names := make([]string, len(ps))
	for i, p := range ps {
		names[i] = p.String()
	}
	return names
}

// Build compiles converge for each platform and returns the image index of the images.
// The index, each image manifest and each config carry the OCI annotations (labels in the
// config) version, revision, source and created.
func Build(ctx context.Context, o Options) (v1.ImageIndex, error) {
	created, err := o.created()
	if err != nil {
		return nil, err
	}
	meta := map[string]string{
		"org.opencontainers.image.title":       "converge",
		"org.opencontainers.image.description": "converge keeps a Kubernetes cluster converged on a Git repository",
		"org.opencontainers.image.source":      Source,
		"org.opencontainers.image.url":         Source,
		"org.opencontainers.image.version":     o.Version,
		"org.opencontainers.image.revision":    o.Revision,
		"org.opencontainers.image.created":     created.Format(time.RFC3339),
	}
	base, err := baseLayer(created)
	if err != nil {
		return nil, err
	}
	tmp, err := os.MkdirTemp("", "converge-image-")
	if err != nil {
		return nil, err
	}
	defer func() { _ = os.RemoveAll(tmp) }()

	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	for _, p := range o.Platforms {
		start := time.Now()
		bin := filepath.Join(tmp, p.OS+"-"+p.Architecture, "converge")
		if err := o.compile(ctx, p, bin, created); err != nil {
			return nil, err
		}
		app, err := binaryLayer(bin, created)
		if err != nil {
			return nil, err
		}
		img, err := image(p, created, meta, base, app)
		if err != nil {
			return nil, fmt.Errorf("assembling the %s image: %w", p, err)
		}
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{
			Add:        img,
			Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: p.OS, Architecture: p.Architecture}},
		})
		d, err := img.Digest()
		if err != nil {
			return nil, err
		}
		size, err := compressedSize(img)
		if err != nil {
			return nil, err
		}
		o.logf("built %s image %s (%.1f MB compressed) in %s", p, d, float64(size)/1e6, time.Since(start).Round(100*time.Millisecond))
	}
	annotated, ok := mutate.Annotations(idx, meta).(v1.ImageIndex)
	if !ok {
		return nil, fmt.Errorf("annotating the image index: not an index")
	}
	return annotated, nil
}

// compressedSize is what pulling img transfers: the sum of its layers.
func compressedSize(img v1.Image) (int64, error) {
	m, err := img.Manifest()
	if err != nil {
		return 0, err
	}
	var n int64
	for _, l := range m.Layers {
		n += l.Size
	}
	return n, nil
}

// compile builds a static converge for p into out.
func (o *Options) compile(ctx context.Context, p v1.Platform, out string, created time.Time) error {
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-buildvcs=false",
		"-ldflags", LDFlags(o.Version, o.Revision, created), "-o", out, "./cmd/converge")
	cmd.Dir = o.Root
	// The baseline of each architecture, whatever the build machine's environment says:
	// the image runs on any amd64 or arm64 node.
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS="+p.OS, "GOARCH="+p.Architecture,
		"GOAMD64=v1", "GOARM64=v8.0")
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stderr, &stderr
	o.logf("go build %s (%s)", p, o.Version)
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("building converge for %s: %w\n%s", p, err, stderr.String())
	}
	return nil
}

// image is one platform's image: the base layer, then the binary.
func image(p v1.Platform, created time.Time, meta map[string]string, layers ...v1.Layer) (v1.Image, error) {
	labels := make(map[string]string, len(meta))
	for k, v := range meta {
		labels[k] = v
	}
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	img, err := mutate.ConfigFile(img, &v1.ConfigFile{
		Architecture: p.Architecture,
		OS:           p.OS,
		Created:      v1.Time{Time: created},
		Config: v1.Config{
			Entrypoint: []string{Entrypoint},
			Cmd:        []string{"serve"},
			User:       User,
			WorkingDir: "/",
			Labels:     labels,
		},
		RootFS: v1.RootFS{Type: "layers"},
	})
	if err != nil {
		return nil, err
	}
	history := []string{
		"base: /etc/passwd, /etc/group (nonroot 65532), " + CABundle + " (Mozilla's roots), /tmp",
		"converge " + meta["org.opencontainers.image.version"] + " at " + Entrypoint,
	}
	for i, l := range layers {
		img, err = mutate.Append(img, mutate.Addendum{
			Layer:     l,
			History:   v1.History{Created: v1.Time{Time: created}, CreatedBy: history[i], Comment: "converge tools/image"},
			MediaType: types.OCILayer,
		})
		if err != nil {
			return nil, err
		}
	}
	annotated, ok := mutate.Annotations(img, meta).(v1.Image)
	if !ok {
		return nil, fmt.Errorf("annotating the image: not an image")
	}
	return annotated, nil
}
