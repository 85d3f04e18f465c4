package charts

import (
	"context"
	"strings"
	"unicode"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/converge-gitops/converge/sources"
)

// Origin is where an artifact says it comes from: the annotations
// org.opencontainers.image.source and org.opencontainers.image.revision of its
// manifest (as converge push artifact and flux push artifact write them), credentials
// removed from the URL, each made one printable line of at most maxOriginField bytes.
// Both are the pusher's words: shown, never trusted.
type Origin struct {
	Source, Revision string
}

// maxOriginField bounds each field of an Origin.
const maxOriginField = 512

// maxOrigins bounds the origins a Client remembers.
const maxOrigins = 4096

// originOf reads the origin of a manifest; ok is false when it names none.
func originOf(m *v1.Manifest) (Origin, bool) {
	o := Origin{Source: sources.RedactURL(oneLine(m.Annotations[AnnotationSource])), Revision: oneLine(m.Annotations[AnnotationRevision])}
	return o, o != Origin{}
}

// oneLine keeps the printable characters of s, at most maxOriginField bytes.
func oneLine(s string) string {
	s = strings.Map(func(r rune) rune {
		if unicode.IsPrint(r) {
			return r
		}
		return -1
	}, strings.TrimSpace(s))
	if len(s) > maxOriginField {
		s = strings.ToValidUTF8(s[:maxOriginField], "")
	}
	return s
}

// remember keeps the origin of the artifact of digest in src's repository.
func (c *Client) remember(src Source, digest string, m *v1.Manifest) {
	o, ok := originOf(m)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.origins == nil || len(c.origins) >= maxOrigins {
		c.origins = map[string]originSeen{}
	}
	c.origins[originKey(src, digest)] = originSeen{origin: o, ok: ok}
}

// originKey keys the origin of digest as read with src's credentials: another tenant's
// SyncTarget learns it only by reading the manifest itself.
func originKey(src Source, digest string) string {
	return src.Repository + "\x00" + src.Credentials.digest() + "\x00" + digest
}

type originSeen struct {
	origin Origin
	ok     bool
}

// ArtifactOrigin is where the artifact r of src says it comes from (see Origin); ok is
// false when its manifest names nothing. It is read from the manifest when this Client
// fetched the artifact; otherwise (its tree was in the cache of an earlier process) the
// manifest is read once.
func (c *Client) ArtifactOrigin(ctx context.Context, src Source, r Resolved) (Origin, bool, error) {
	c.mu.Lock()
	seen, known := c.origins[originKey(src, r.Digest)]
	c.mu.Unlock()
	if known {
		return seen.origin, seen.ok, nil
	}
	if !src.IsArtifact() {
		return Origin{}, false, nil
	}
	repo, opts, err := c.ociSession(ctx, src)
	if err != nil {
		return Origin{}, false, wrap(ctx, src.op("read", "of"), src, err)
	}
	m, _, err := getManifest(repo.Digest(r.Digest), opts)
	if err != nil {
		return Origin{}, false, wrap(ctx, src.op("read", "of"), src, err)
	}
	c.remember(src, r.Digest, m)
	o, ok := originOf(m)
	return o, ok, nil
}
