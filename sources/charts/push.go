package charts

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// ParseArtifactReference reads "oci://host[:port]/path/repo[:tag|@sha256:<hex>]" as the
// source of an artifact: its repository, and its tag or digest.
func ParseArtifactReference(ref string) (Source, error) {
	rest, ok := strings.CutPrefix(ref, "oci://")
	if !ok {
		return Source{}, invalid("%q is not an oci://host/path/repo[:tag] reference", ref)
	}
	src := Source{Kind: KindArtifact}
	if i := strings.LastIndex(rest, "@"); i >= 0 {
		rest, src.Digest = rest[:i], rest[i+1:]
	} else if i := strings.LastIndex(rest, ":"); i > strings.LastIndex(rest, "/") {
		rest, src.Tag = rest[:i], rest[i+1:]
	}
	src.Repository = "oci://" + rest
	if err := checkSource(src); err != nil {
		return Source{}, err
	}
	return src, nil
}

// rawManifest is a manifest to put as it is.
type rawManifest struct {
	body []byte
	mt   types.MediaType
}

func (m rawManifest) RawManifest() ([]byte, error)        { return m.body, nil }
func (m rawManifest) MediaType() (types.MediaType, error) { return m.mt, nil }

// PushArtifact pushes a to the repository of dst under its tag (DefaultArtifactTag when
// it names none) and returns what the tag names now.
func (c *Client) PushArtifact(ctx context.Context, dst Source, a *PackedArtifact) (Resolved, error) {
	op := "push the artifact to"
	tag, err := pushedTag(dst)
	if err != nil {
		return Resolved{}, wrap(ctx, op, dst, err)
	}
	repo, opts, err := c.ociSession(ctx, dst)
	if err != nil {
		return Resolved{}, wrap(ctx, op, dst, err)
	}
	for _, b := range []struct {
		data []byte
		mt   types.MediaType
	}{{a.Config, ArtifactConfigMediaType}, {a.Layer, ArtifactLayerMediaType}} {
		if err := remote.WriteLayer(repo, static.NewLayer(b.data, b.mt), opts...); err != nil {
			return Resolved{}, wrap(ctx, op, dst, err)
		}
	}
	if err := remote.Put(repo.Tag(tag), rawManifest{body: a.Manifest, mt: types.OCIManifestSchema1}, opts...); err != nil {
		return Resolved{}, wrap(ctx, op, dst, err)
	}
	return Resolved{Version: tag, Digest: a.Digest, URL: repo.Digest(a.Digest).Name()}, nil
}

// pushedTag is the tag a push or a tagging writes: dst's, which must be a tag, not a
// version range nor a digest.
func pushedTag(dst Source) (string, error) {
	dst.Tag = strings.TrimSpace(dst.Tag)
	if dst.Tag == "" {
		dst.Tag = DefaultArtifactTag
	}
	switch {
	case !dst.IsArtifact():
		return "", invalid("only an artifact is pushed or tagged")
	case dst.Version != "" || dst.Digest != "":
		return "", invalid("push or tag to a tag, not to a version range or a digest")
	}
	return dst.Tag, checkSource(dst)
}

// TagArtifact tags the manifest src resolves to (its tag, version range or digest) as tag,
// in the same repository, and returns what tag names now.
func (c *Client) TagArtifact(ctx context.Context, src Source, tag string) (Resolved, error) {
	op := "tag the artifact"
	dst := src
	dst.Tag, dst.Version, dst.Digest = tag, "", ""
	if _, err := pushedTag(dst); err != nil {
		return Resolved{}, wrap(ctx, op, src, err)
	}
	r, err := c.Resolve(ctx, src)
	if err != nil {
		return Resolved{}, err
	}
	repo, opts, err := c.ociSession(ctx, src)
	if err != nil {
		return Resolved{}, wrap(ctx, op, src, err)
	}
	desc, err := remote.Get(repo.Digest(r.Digest), opts...)
	if err == nil && len(desc.Manifest) > manifestBytes {
		err = limitErr("the manifest "+r.Digest, manifestBytes)
	}
	if err == nil {
		err = remote.Put(repo.Tag(tag), rawManifest{body: desc.Manifest, mt: desc.MediaType}, opts...)
	}
	if err != nil {
		return Resolved{}, wrap(ctx, op, src, err)
	}
	return Resolved{Version: tag, Digest: r.Digest, URL: repo.Digest(r.Digest).Name()}, nil
}

// ArtifactTag is a tag of an artifact repository, as ListArtifacts finds it.
type ArtifactTag struct {
	Tag    string `json:"tag"`
	Digest string `json:"digest"`
	// MediaType is the manifest's.
	MediaType string `json:"mediaType"`
	// Source, Revision and Created are the manifest's annotations of those names
	// (org.opencontainers.image.*); empty when it has none.
	Source   string `json:"source,omitempty"`
	Revision string `json:"revision,omitempty"`
	Created  string `json:"created,omitempty"`
}

// maxListedArtifacts caps the tags ListArtifacts reads.
const maxListedArtifacts = 200

// cosignTag is a tag cosign writes next to what it signs: signatures, attestations,
// SBOMs, and the referrers of registries without the referrers API.
var cosignTag = regexp.MustCompile(`^sha256-[0-9a-f]{64}(\.(sig|att|sbom))?$`)

// ListArtifacts lists the tags of src's repository in name order — those cosign writes
// left out, at most 200 — with the digest and annotations of what each names.
func (c *Client) ListArtifacts(ctx context.Context, src Source) ([]ArtifactTag, error) {
	op := "list the artifacts of"
	if !src.IsArtifact() {
		return nil, wrap(ctx, op, src, invalid("only an artifact repository is listed"))
	}
	if err := checkSource(src); err != nil {
		return nil, wrap(ctx, op, src, err)
	}
	repo, opts, err := c.ociSession(ctx, src)
	if err != nil {
		return nil, wrap(ctx, op, src, err)
	}
	tags, err := remote.List(repo, opts...)
	if err != nil {
		return nil, wrap(ctx, op, src, err)
	}
	tags = slices.DeleteFunc(tags, cosignTag.MatchString)
	slices.Sort(tags)
	out := make([]ArtifactTag, 0, min(len(tags), maxListedArtifacts))
	for _, tag := range tags[:min(len(tags), maxListedArtifacts)] {
		desc, err := remote.Get(repo.Tag(tag), opts...)
		if err == nil && len(desc.Manifest) > manifestBytes {
			err = limitErr("the manifest of "+tag, manifestBytes)
		}
		if err != nil {
			return nil, wrap(ctx, op, src, fmt.Errorf("tag %s: %w", tag, err))
		}
		t := ArtifactTag{Tag: tag, Digest: desc.Digest.String(), MediaType: string(desc.MediaType)}
		if m, err := v1.ParseManifest(strings.NewReader(string(desc.Manifest))); err == nil && !desc.MediaType.IsIndex() {
			t.Source, t.Revision, t.Created = m.Annotations[AnnotationSource], m.Annotations[AnnotationRevision], m.Annotations[AnnotationCreated]
		}
		out = append(out, t)
	}
	return out, nil
}
