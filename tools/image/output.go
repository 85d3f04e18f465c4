package main

import (
	"archive/tar"
	"context"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// Tag is the image tag of a version: the version with every character a tag may not hold
// ("+" of semver build metadata) replaced by "-" (the same rule as `converge install`).
func Tag(version string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '_', r == '.', r == '-':
			return r
		}
		return '-'
	}, version)
}

// Reference is the tag the image is written and pushed as: image as given when it has a
// tag, else image:Tag(version). A digest cannot be a destination.
func Reference(image, version string) (name.Tag, error) {
	if strings.Contains(image, "@") {
		return name.Tag{}, fmt.Errorf("invalid image %q: give a tag, not a digest", image)
	}
	if i := strings.LastIndex(image, ":"); i <= strings.LastIndex(image, "/") {
		image += ":" + Tag(version)
	}
	t, err := name.NewTag(image, name.StrictValidation)
	if err != nil {
		return name.Tag{}, fmt.Errorf("invalid image %q: %w", image, err)
	}
	return t, nil
}

// WriteOutputs writes idx to dir/oci as an OCI image layout whose index.json names the
// image index (ref's tag), to dir/converge.oci.tar as an OCI archive of that layout
// (`docker load`, `ctr image import`, `skopeo copy oci-archive:`), and its digest to
// dir/digest. What was there before is replaced.
func WriteOutputs(dir string, ref name.Tag, idx v1.ImageIndex, mtime time.Time) error {
	ociDir := filepath.Join(dir, "oci")
	archive := filepath.Join(dir, "converge.oci.tar")
	for _, p := range []string{ociDir, archive, filepath.Join(dir, "digest"), filepath.Join(dir, "pushed")} {
		if err := os.RemoveAll(p); err != nil {
			return err
		}
	}
	p, err := layout.Write(ociDir, empty.Index)
	if err != nil {
		return fmt.Errorf("writing the OCI layout: %w", err)
	}
	err = p.AppendIndex(idx, layout.WithAnnotations(map[string]string{
		"org.opencontainers.image.ref.name": ref.TagStr(),
		"io.containerd.image.name":          ref.Name(),
	}))
	if err != nil {
		return fmt.Errorf("writing the OCI layout: %w", err)
	}
	if err := tarDir(ociDir, archive, mtime); err != nil {
		return fmt.Errorf("writing the OCI archive: %w", err)
	}
	d, err := idx.Digest()
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "digest"), []byte(d.String()+"\n"), 0o644)
}

// tarDir writes the files under dir to a tar file, reproducibly: in lexical order, each
// with mtime and root's ownership.
func tarDir(dir, file string, mtime time.Time) (err error) {
	f, err := os.Create(file)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}()
	tw := tar.NewWriter(f)
	err = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || path == dir {
			return err
		}
		rel, err := filepath.Rel(dir, path)
		if err != nil {
			return err
		}
		h := &tar.Header{Name: filepath.ToSlash(rel), ModTime: mtime, Format: tar.FormatPAX}
		if d.IsDir() {
			h.Name += "/"
			h.Typeflag, h.Mode = tar.TypeDir, 0o755
			return tw.WriteHeader(h)
		}
		if !d.Type().IsRegular() {
			return fmt.Errorf("%s is not a regular file", path)
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		h.Typeflag, h.Mode, h.Size = tar.TypeReg, 0o644, info.Size()
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		r, err := os.Open(path)
		if err != nil {
			return err
		}
		defer func() { _ = r.Close() }()
		_, err = io.Copy(tw, r)
		return err
	})
	if err != nil {
		return err
	}
	return tw.Close()
}

// Push writes idx, its images and their blobs to the registry of ref (credentials from
// the docker config, as docker and crane find them) and returns "name:tag@digest".
func Push(ctx context.Context, ref name.Tag, idx v1.ImageIndex) (string, error) {
	if err := remote.WriteIndex(ref, idx, remote.WithContext(ctx), remote.WithAuthFromKeychain(authn.DefaultKeychain)); err != nil {
		return "", fmt.Errorf("pushing %s: %w", ref, err)
	}
	d, err := idx.Digest()
	if err != nil {
		return "", err
	}
	return ref.String() + "@" + d.String(), nil
}
