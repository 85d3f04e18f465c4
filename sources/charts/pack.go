package charts

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/converge-gitops/converge/sources"
)

// ArtifactMeta is what a packed artifact's manifest says of where it comes from.
type ArtifactMeta struct {
	// Source is where the configuration comes from, e.g. its Git repository's URL
	// (annotation org.opencontainers.image.source).
	Source string
	// Revision is its revision, e.g. "main@sha1:<commit>" (annotation
	// org.opencontainers.image.revision).
	Revision string
	// Created is when it was made (annotation org.opencontainers.image.created, RFC 3339);
	// none when zero, so that the same content packs to the same digest.
	Created time.Time
	// Annotations are more annotations of the manifest; Source, Revision and Created,
	// when set, win over theirs.
	Annotations map[string]string
}

// PackedArtifact is a configuration artifact made by PackArtifact, ready to push.
type PackedArtifact struct {
	// Manifest is its OCI image manifest, and Digest the manifest's digest.
	Manifest []byte
	Digest   string
	// Config and Layer are its blobs: the config, and the tree as a gzipped tar.
	Config, Layer []byte
	// Files counts the entries of the tree (directories too), Bytes their size.
	Files int
	Bytes int64
}

// artifactConfig is the config blob of an artifact converge packs.
var artifactConfig = []byte("{}")

// PackArtifact packs the tree of dir — a kustomization, plain YAML, a chart directory —
// as a configuration artifact: an OCI image manifest of config ArtifactConfigMediaType
// and one layer of ArtifactLayerMediaType. It is reproducible: the same content and meta
// give the same manifest digest (entries sorted, times, owners and names of owners left
// out, modes 0644 or 0755 for executables and directories, no name nor time in the gzip
// header, no creation time unless meta gives one). .git is left out; a symbolic link is
// packed as the file it leads to when that is a file inside dir, and refused otherwise.
// The artifact must fit what Fetch accepts by default (DefaultFiles, DefaultFileBytes,
// DefaultExtractedBytes, DefaultArchiveBytes): more is refused.
func PackArtifact(dir string, meta ArtifactMeta) (*PackedArtifact, error) {
	root, err := filepath.Abs(dir)
	if err == nil {
		root, err = filepath.EvalSymlinks(root)
	}
	if err != nil {
		return nil, fmt.Errorf("pack %s: %w", dir, err)
	}
	if fi, err := os.Stat(root); err != nil || !fi.IsDir() {
		return nil, fmt.Errorf("pack %s: not a directory", dir)
	}
	p := &packer{root: root, lim: Limits{}.withDefaults()}
	layer, err := p.pack()
	if err != nil {
		return nil, fmt.Errorf("pack %s: %w", dir, err)
	}
	a := &PackedArtifact{Config: artifactConfig, Layer: layer, Files: p.files, Bytes: p.total}
	m := v1.Manifest{
		SchemaVersion: 2,
		MediaType:     types.OCIManifestSchema1,
		Config:        blobDescriptor(ArtifactConfigMediaType, a.Config),
		Layers:        []v1.Descriptor{blobDescriptor(ArtifactLayerMediaType, a.Layer)},
		Annotations:   meta.annotations(),
	}
	if a.Manifest, err = json.Marshal(m); err != nil {
		return nil, err
	}
	a.Digest = sha256Digest(a.Manifest)
	return a, nil
}

// annotations are the manifest's annotations (nil when none).
func (m ArtifactMeta) annotations() map[string]string {
	out := maps.Clone(m.Annotations)
	set := func(k, v string) {
		if v == "" {
			return
		}
		if out == nil {
			out = map[string]string{}
		}
		out[k] = v
	}
	set(AnnotationSource, m.Source)
	set(AnnotationRevision, m.Revision)
	if !m.Created.IsZero() {
		set(AnnotationCreated, m.Created.UTC().Format(time.RFC3339))
	}
	return out
}

func blobDescriptor(mt types.MediaType, data []byte) v1.Descriptor {
	h, _ := v1.NewHash(sha256Digest(data))
	return v1.Descriptor{MediaType: mt, Size: int64(len(data)), Digest: h}
}

func sha256Digest(data []byte) string {
	sum := sha256.Sum256(data)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// packer writes the tree under root as a gzipped tar, within lim.
type packer struct {
	root  string
	lim   Limits
	tw    *tar.Writer
	files int
	total int64
}

// pack returns the tree as a gzipped tar.
func (p *packer) pack() ([]byte, error) {
	var buf bytes.Buffer
	gz, _ := gzip.NewWriterLevel(&buf, gzip.BestCompression) // a valid level: no error
	p.tw = tar.NewWriter(gz)
	if err := filepath.WalkDir(p.root, p.entry); err != nil {
		return nil, err
	}
	if err := p.tw.Close(); err != nil {
		return nil, err
	}
	if err := gz.Close(); err != nil {
		return nil, err
	}
	if int64(buf.Len()) > p.lim.ArchiveBytes {
		return nil, fmt.Errorf("%w: the archive would be %d bytes, more than the %d an artifact is fetched with",
			sources.ErrLimitExceeded, buf.Len(), p.lim.ArchiveBytes)
	}
	return buf.Bytes(), nil
}

// entry writes one entry of the walk (entries come sorted by name).
func (p *packer) entry(path string, d fs.DirEntry, err error) error {
	if err != nil {
		return err
	}
	rel, err := filepath.Rel(p.root, path)
	if err != nil || rel == "." {
		return err
	}
	name := filepath.ToSlash(rel)
	if d.Name() == ".git" {
		if d.IsDir() {
			return filepath.SkipDir
		}
		return nil // the .git file of a worktree or submodule
	}
	if p.files++; p.files > p.lim.Files {
		return fmt.Errorf("%w: more than %d files and directories: an artifact of them would not be fetched", sources.ErrLimitExceeded, p.lim.Files)
	}
	switch {
	case d.Type()&fs.ModeSymlink != 0:
		return p.link(path, name)
	case d.IsDir():
		return p.tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: name + "/", Mode: 0o755, ModTime: time.Unix(0, 0)})
	case d.Type().IsRegular():
		fi, err := d.Info()
		if err != nil {
			return err
		}
		return p.file(path, name, fi)
	}
	return fmt.Errorf("%s is not a regular file, a directory or a link (%s)", name, d.Type())
}

// link packs a symbolic link as the file it leads to, which must be inside the tree.
func (p *packer) link(path, name string) error {
	target, err := filepath.EvalSymlinks(path)
	if err != nil {
		return fmt.Errorf("%s is a link that leads nowhere: %w", name, err)
	}
	rel, err := filepath.Rel(p.root, target)
	if err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
		return fmt.Errorf("%s is a link that leaves the directory", name)
	}
	fi, err := os.Stat(target)
	if err != nil {
		return err
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("%s is a link to a directory or a special file: only links to files are packed (as the file)", name)
	}
	return p.file(target, name, fi)
}

// file writes a regular file, 0755 when it is executable, 0644 otherwise.
func (p *packer) file(path, name string, fi fs.FileInfo) error {
	size := fi.Size()
	switch {
	case size > p.lim.FileBytes:
		return fmt.Errorf("%w: %s is %d bytes, more than the %d a file of an artifact is fetched with", sources.ErrLimitExceeded, name, size, p.lim.FileBytes)
	case p.total+size > p.lim.ExtractedBytes:
		return fmt.Errorf("%w: the files are more than the %d bytes an artifact is fetched with", sources.ErrLimitExceeded, p.lim.ExtractedBytes)
	}
	p.total += size
	mode := int64(0o644)
	if fi.Mode()&0o111 != 0 {
		mode = 0o755
	}
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer func() { _ = f.Close() }()
	if err := p.tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: mode, Size: size, ModTime: time.Unix(0, 0)}); err != nil {
		return err
	}
	n, err := io.Copy(p.tw, io.LimitReader(f, size))
	if err == nil && n != size {
		err = fmt.Errorf("%s changed while packed", name)
	}
	return err
}
