package charts

import (
	"context"
	"net/url"
	"regexp"
	"slices"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Media types of a configuration artifact: converge's own (`converge push artifact`),
// Flux's (`flux push artifact`), and those of `oras push` of a tar.gz file.
const (
	ArtifactConfigMediaType = "application/vnd.converge.artifact.config.v1+json"
	ArtifactLayerMediaType  = "application/vnd.converge.artifact.content.v1.tar+gzip"
	FluxConfigMediaType     = "application/vnd.cncf.flux.config.v1+json"
	FluxLayerMediaType      = "application/vnd.cncf.flux.content.v1.tar+gzip"
	// OCIEmptyConfigMediaType is the config of an artifact that has none (OCI 1.1), as
	// oras pushes it; OrasConfigMediaType is what older oras versions push.
	OCIEmptyConfigMediaType = "application/vnd.oci.empty.v1+json"
	OrasConfigMediaType     = "application/vnd.unknown.config.v1+json"
	// OCILayerMediaType is a gzipped tar layer, as `oras push` of a .tar.gz file types it.
	OCILayerMediaType = "application/vnd.oci.image.layer.v1.tar+gzip"
)

// Annotations of an artifact's manifest (OCI image spec).
const (
	AnnotationSource   = "org.opencontainers.image.source"
	AnnotationRevision = "org.opencontainers.image.revision"
	AnnotationCreated  = "org.opencontainers.image.created"
)

// Artifact versions.
const (
	// DefaultArtifactTag is the tag an artifact follows when it names no tag, version
	// range or digest.
	DefaultArtifactTag = "latest"
	// digestVersion is the version of an artifact pinned by digest.
	digestVersion = "digest"
)

var (
	artifactConfigTypes = []types.MediaType{ArtifactConfigMediaType, FluxConfigMediaType, OCIEmptyConfigMediaType, OrasConfigMediaType}
	artifactLayerTypes  = []types.MediaType{ArtifactLayerMediaType, FluxLayerMediaType, OCILayerMediaType}
	// tagPattern is an OCI tag.
	tagPattern = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9._-]{0,127}$`)
)

// checkArtifactSource refuses an artifact source that cannot work as written.
func checkArtifactSource(src Source) error {
	u, _ := url.Parse(src.Repository)
	n := 0
	for _, v := range []string{src.Tag, src.Version, src.Digest} {
		if v != "" {
			n++
		}
	}
	switch {
	case !src.IsOCI():
		return invalid("an artifact is in an oci:// repository")
	case strings.Trim(u.Path, "/") == "":
		return invalid("the repository names no repository of the registry: oci://host/path/repo")
	case src.Name != "":
		return invalid("an artifact has no chart name: its repository is the whole oci://host/path/repo")
	case n > 1:
		return invalid("follow an artifact by one of a tag, a version range or a digest")
	case src.Tag != "" && !tagPattern.MatchString(src.Tag):
		return invalid("%q is not an OCI tag", src.Tag)
	case src.Keyring != nil:
		return invalid("an artifact has no provenance file: trust it with cosign keys")
	}
	_, err := ociRepo(src)
	return err
}

// resolveArtifact finds the manifest of the artifact's tag, of the newest tag its version
// range allows, or of the digest pinned.
func (c *Client) resolveArtifact(ctx context.Context, src Source) (Resolved, error) {
	repo, opts, err := c.ociSession(ctx, src)
	if err != nil {
		return Resolved{}, err
	}
	var ref name.Reference
	version := src.Tag
	switch {
	case src.Digest != "":
		ref, version = repo.Digest(src.Digest), digestVersion
	case src.Version != "":
		tags, err := remote.List(repo, opts...)
		if err != nil {
			return Resolved{}, err
		}
		i, err := newest(len(tags), func(i int) string { return tags[i] }, src.Version)
		if err != nil {
			return Resolved{}, err
		}
		version = tags[i]
	case version == "":
		version = DefaultArtifactTag
	}
	if ref == nil {
		ref = repo.Tag(version)
	}
	desc, err := remote.Head(ref, opts...)
	if err != nil {
		return Resolved{}, err
	}
	if desc.MediaType.IsIndex() {
		return Resolved{}, invalid("%s is an image index (%s), not an artifact: an artifact is one manifest", ref.Identifier(), desc.MediaType)
	}
	return Resolved{Version: version, Digest: desc.Digest.String(), URL: repo.Digest(desc.Digest.String()).Name()}, nil
}

// artifactVersions lists the tags of the artifact its source allows, newest first: the
// tags its version range allows, its tag when the repository has it, or "digest".
func (c *Client) artifactVersions(ctx context.Context, src Source) ([]string, error) {
	if src.Digest != "" {
		return []string{digestVersion}, nil
	}
	tags, err := c.ociTags(ctx, src)
	if err != nil {
		return nil, err
	}
	if src.Version == "" {
		tag := src.Tag
		if tag == "" {
			tag = DefaultArtifactTag
		}
		if slices.Contains(tags, tag) {
			return []string{tag}, nil
		}
		return []string{}, nil
	}
	in, err := inRange(len(tags), func(i int) string { return tags[i] }, src.Version)
	if err != nil {
		return nil, err
	}
	out := make([]string, 0, min(len(in), maxVersions))
	for _, i := range in[:min(len(in), maxVersions)] {
		out = append(out, tags[i])
	}
	return out, nil
}

// fetchArtifact downloads the layer of the artifact r.Digest names into the cache.
func (c *Client) fetchArtifact(ctx context.Context, src Source, r Resolved) (string, error) {
	repo, opts, err := c.ociSession(ctx, src)
	if err != nil {
		return "", err
	}
	m, _, err := getManifest(repo.Digest(r.Digest), opts)
	if err != nil {
		return "", err
	}
	c.remember(src, r.Digest, m)
	l, err := artifactLayer(r.Digest, m, src.LayerMediaType)
	if err != nil {
		return "", err
	}
	return c.installLayer(repo, l, r.Digest, src, opts)
}

// artifactLayer checks that m, the manifest of digest, is a configuration artifact's and
// returns its layer: the one layer of mediaType, or without it the one layer of a type
// read by default.
func artifactLayer(digest string, m *v1.Manifest, mediaType string) (v1.Descriptor, error) {
	switch {
	case m.Config.MediaType == ConfigMediaType:
		return v1.Descriptor{}, invalid("%s is a Helm chart (config %s): follow it as a chart, not as an artifact", digest, ConfigMediaType)
	case !slices.Contains(artifactConfigTypes, m.Config.MediaType):
		return v1.Descriptor{}, invalid("%s is not a configuration artifact: its config is of media type %q; accepted: %s",
			digest, m.Config.MediaType, typeList(artifactConfigTypes))
	}
	accepted := artifactLayerTypes
	if mediaType != "" {
		accepted = []types.MediaType{types.MediaType(mediaType)}
	}
	var found, all []v1.Descriptor
	for _, l := range m.Layers {
		all = append(all, l)
		if slices.Contains(accepted, l.MediaType) {
			found = append(found, l)
		}
	}
	switch {
	case len(found) == 0:
		return v1.Descriptor{}, invalid("the artifact %s has no layer of %s (its layers: %s)", digest, typeList(accepted), layerList(all))
	case len(found) > 1 && mediaType == "":
		return v1.Descriptor{}, invalid("the artifact %s has %d layers that could hold its tree (%s): choose one by its layer media type",
			digest, len(found), layerList(found))
	case len(found) > 1:
		return v1.Descriptor{}, invalid("the artifact %s has %d layers of %s: which one holds the tree is not said", digest, len(found), mediaType)
	}
	return found[0], nil
}

// typeList lists media types for errors.
func typeList(list []types.MediaType) string {
	out := make([]string, len(list))
	for i, t := range list {
		out[i] = string(t)
	}
	return strings.Join(out, ", ")
}

// layerList lists the media types of layers for errors, at most 8.
func layerList(layers []v1.Descriptor) string {
	if len(layers) == 0 {
		return "none"
	}
	var out []string
	for i, l := range layers {
		if i == 8 {
			out = append(out, "…")
			break
		}
		out = append(out, excerpt(string(l.MediaType), 100))
	}
	return strings.Join(out, ", ")
}
