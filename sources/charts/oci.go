package charts

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/Masterminds/semver/v3"
	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/converge-gitops/converge/sources"
)

// Media types of a Helm chart in an OCI registry, as `helm push` writes them.
const (
	ConfigMediaType     = "application/vnd.cncf.helm.config.v1+json"
	ChartLayerMediaType = "application/vnd.cncf.helm.chart.content.v1.tar+gzip"
	ProvLayerMediaType  = "application/vnd.cncf.helm.chart.provenance.v1.prov"
	// legacyChartLayerMediaType is what Helm 3.0 to 3.6 pushed.
	legacyChartLayerMediaType = "application/tar+gzip"
)

// ociRepo is the repository <repository>/<name> of an oci:// chart source, the repository
// itself of an artifact.
func ociRepo(src Source) (name.Repository, error) {
	ref := strings.TrimSuffix(strings.TrimPrefix(src.Repository, "oci://"), "/")
	if !src.IsArtifact() {
		ref += "/" + src.Name
	}
	repo, err := name.NewRepository(ref)
	if err != nil {
		return name.Repository{}, invalid("%s is not an OCI repository name", ref)
	}
	return repo, nil
}

// ociSession is src's OCI repository with the options of every call to it (ociOptions).
func (c *Client) ociSession(ctx context.Context, src Source) (name.Repository, []remote.Option, error) {
	repo, err := ociRepo(src)
	if err != nil {
		return name.Repository{}, nil, err
	}
	opts, err := c.ociOptions(ctx, src, repo)
	if err != nil {
		return name.Repository{}, nil, err
	}
	return repo, opts, nil
}

// ociOptions are the options of every registry call: the source's credentials (to its
// registry only), its CA, answers bounded, and plain HTTP only to a loopback address.
func (c *Client) ociOptions(ctx context.Context, src Source, repo name.Repository) ([]remote.Option, error) {
	rt, err := c.transport(src.Credentials.CA)
	if err != nil {
		return nil, err
	}
	max := max(c.limits().IndexBytes, c.limits().ArchiveBytes) + 1
	rt = &guardedTransport{next: rt, max: max}
	kc := &keychain{creds: src.Credentials, registry: repo.RegistryStr()}
	return []remote.Option{remote.WithContext(ctx), remote.WithTransport(rt), remote.WithAuthFromKeychain(kc),
		remote.WithUserAgent("converge")}, nil
}

// guardedTransport refuses plain HTTP to anything but a loopback address (a registry in
// a test, or a port-forward), bounds every answer's body to max bytes, and keeps of an
// error answer only the registry's errors, cut short (errorBody): go-containerregistry
// quotes the whole body of an error answer in its errors.
type guardedTransport struct {
	next http.RoundTripper
	max  int64
}

func (t *guardedTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.URL.Scheme != "https" && !isLoopback(req.URL.Host) {
		return nil, fmt.Errorf("%w: plain http to %s refused: only a loopback registry is reached without TLS",
			sources.ErrUnreachable, req.URL.Host)
	}
	resp, err := t.next.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode >= http.StatusBadRequest {
		body := errorBody(resp.Body)
		_ = resp.Body.Close()
		resp.Body, resp.ContentLength = io.NopCloser(bytes.NewReader(body)), int64(len(body))
		resp.Header.Del("Content-Length")
		return resp, nil
	}
	resp.Body = &limitedBody{ReadCloser: resp.Body, r: capped(resp.Body, t.max, "an answer of the registry")}
	return resp, nil
}

type limitedBody struct {
	io.ReadCloser
	r io.Reader
}

func (b *limitedBody) Read(p []byte) (int, error) { return b.r.Read(p) }

// resolveOCI finds the manifest of the newest tag src.Version allows (Helm writes a
// version's "+" as "_" in tags), or of the digest pinned.
func (c *Client) resolveOCI(ctx context.Context, src Source) (Resolved, error) {
	op := src.op("resolve", "of")
	repo, opts, err := c.ociSession(ctx, src)
	if err != nil {
		return Resolved{}, wrap(ctx, op, src, err)
	}
	if src.Digest != "" {
		r, err := c.resolveDigest(repo, src.Digest, opts)
		return r, wrap(ctx, op, src, err)
	}
	tag, err := pickTag(repo, src.Version, opts)
	if err != nil {
		return Resolved{}, wrap(ctx, op, src, err)
	}
	desc, err := remote.Head(repo.Tag(tag), opts...)
	if err != nil {
		return Resolved{}, wrap(ctx, op, src, err)
	}
	return Resolved{Version: strings.ReplaceAll(tag, "_", "+"), Digest: desc.Digest.String(), URL: repo.Tag(tag).Name()}, nil
}

// ociTags lists the tags of src's OCI repository.
func (c *Client) ociTags(ctx context.Context, src Source) ([]string, error) {
	repo, opts, err := c.ociSession(ctx, src)
	if err != nil {
		return nil, err
	}
	return remote.List(repo, opts...)
}

// pickTag returns the tag of the newest version allowed: an exact version is its tag
// (no listing needed).
func pickTag(repo name.Repository, version string, opts []remote.Option) (string, error) {
	if _, err := semver.StrictNewVersion(strings.TrimPrefix(version, "v")); err == nil && !strings.HasPrefix(version, "v") {
		return strings.ReplaceAll(version, "+", "_"), nil
	}
	tags, err := remote.List(repo, opts...)
	if err != nil {
		return "", err
	}
	i, err := newest(len(tags), func(i int) string { return strings.ReplaceAll(tags[i], "_", "+") }, version)
	if err != nil {
		return "", err
	}
	return tags[i], nil
}

// resolveDigest reads the version of the chart pinned by digest from its config.
func (c *Client) resolveDigest(repo name.Repository, digest string, opts []remote.Option) (Resolved, error) {
	m, err := c.manifest(repo, digest, opts)
	if err != nil {
		return Resolved{}, err
	}
	version := m.Annotations["org.opencontainers.image.version"]
	if version == "" {
		cfg, err := readBlob(repo, m.Config, configBytes, opts)
		if err != nil {
			return Resolved{}, err
		}
		var meta struct {
			Version string `json:"version"`
		}
		if err := json.Unmarshal(cfg, &meta); err != nil {
			return Resolved{}, fmt.Errorf("%w: the chart's config does not parse: %v", sources.ErrFetchFailed, err)
		}
		version = meta.Version
	}
	if _, err := semver.NewVersion(version); err != nil {
		return Resolved{}, fmt.Errorf("%w: the chart at %s has no valid version (%q)", sources.ErrFetchFailed, digest, version)
	}
	return Resolved{Version: version, Digest: digest, URL: repo.Digest(digest).Name()}, nil
}

// manifestBytes caps an image manifest (the cap the OCI distribution spec suggests
// registries take).
const manifestBytes = 4 << 20

// getManifest reads the image manifest ref names (go-containerregistry checks that it has
// the digest a digest reference names), at most manifestBytes of it: an image index or
// another kind of manifest is refused.
func getManifest(ref name.Reference, opts []remote.Option) (*v1.Manifest, []byte, error) {
	desc, err := remote.Get(ref, opts...)
	if err != nil {
		return nil, nil, err
	}
	what := ref.Identifier()
	switch {
	case len(desc.Manifest) > manifestBytes:
		return nil, nil, limitErr("the manifest "+what, manifestBytes)
	case desc.MediaType.IsIndex():
		return nil, nil, invalid("%s is an image index (%s), not one manifest: name the manifest of the platform (its digest)", what, desc.MediaType)
	case desc.MediaType != types.OCIManifestSchema1 && desc.MediaType != types.DockerManifestSchema2:
		return nil, nil, invalid("%s is a manifest of media type %q, not an OCI image manifest (%s)", what, desc.MediaType, types.OCIManifestSchema1)
	}
	m, err := v1.ParseManifest(bytes.NewReader(desc.Manifest))
	if err != nil {
		return nil, nil, fmt.Errorf("%w: the manifest %s does not parse: %v", sources.ErrFetchFailed, what, err)
	}
	return m, desc.Manifest, nil
}

// manifest reads the manifest of digest and checks that it is a Helm chart's.
func (c *Client) manifest(repo name.Repository, digest string, opts []remote.Option) (*v1.Manifest, error) {
	m, _, err := getManifest(repo.Digest(digest), opts)
	if err != nil {
		return nil, err
	}
	if m.Config.MediaType != ConfigMediaType {
		return nil, invalid("%s is not a Helm chart: its config is of media type %q, not %s", digest, m.Config.MediaType, ConfigMediaType)
	}
	return m, nil
}

// layer is the manifest's layer of one of mediaTypes.
func layer(m *v1.Manifest, mediaTypes ...types.MediaType) (v1.Descriptor, bool) {
	for _, l := range m.Layers {
		for _, mt := range mediaTypes {
			if l.MediaType == mt {
				return l, true
			}
		}
	}
	return v1.Descriptor{}, false
}

// readBlob reads a small blob, at most max bytes.
func readBlob(repo name.Repository, d v1.Descriptor, max int64, opts []remote.Option) ([]byte, error) {
	if d.Size > max {
		return nil, limitErr("blob "+d.Digest.String(), max)
	}
	l, err := remote.Layer(repo.Digest(d.Digest.String()), opts...)
	if err != nil {
		return nil, err
	}
	rc, err := l.Compressed()
	if err != nil {
		return nil, err
	}
	defer func() { _ = rc.Close() }()
	data, err := io.ReadAll(io.LimitReader(rc, max+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > max {
		return nil, limitErr("blob "+d.Digest.String(), max)
	}
	return data, nil
}

// fetchOCI downloads the chart layer of the manifest r.Digest names into the cache.
func (c *Client) fetchOCI(ctx context.Context, src Source, r Resolved) (string, error) {
	op := "fetch chart " + src.Name + " " + r.Version + " from"
	dir, err := c.downloadOCI(ctx, src, r)
	if err != nil {
		return "", wrap(ctx, op, src, err)
	}
	return dir, nil
}

func (c *Client) downloadOCI(ctx context.Context, src Source, r Resolved) (string, error) {
	repo, opts, err := c.ociSession(ctx, src)
	if err != nil {
		return "", err
	}
	m, err := c.manifest(repo, r.Digest, opts)
	if err != nil {
		return "", err
	}
	chart, ok := layer(m, ChartLayerMediaType, legacyChartLayerMediaType)
	if !ok {
		return "", invalid("the manifest %s has no chart layer (%s)", r.Digest, ChartLayerMediaType)
	}
	return c.installLayer(repo, chart, r.Digest, src, opts)
}

// installLayer downloads the layer d of the manifest digest — at most
// Limits.ArchiveBytes, its digest checked — and extracts it into the cache (install).
func (c *Client) installLayer(repo name.Repository, d v1.Descriptor, digest string, src Source, opts []remote.Option) (string, error) {
	if d.Size > c.limits().ArchiveBytes {
		return "", limitErr("the "+src.layout().what+" archive", c.limits().ArchiveBytes)
	}
	if d.Digest.Algorithm != "sha256" {
		return "", badArchive("the layer's digest %s is not a sha256", d.Digest)
	}
	l, err := remote.Layer(repo.Digest(d.Digest.String()), opts...)
	if err != nil {
		return "", err
	}
	rc, err := l.Compressed()
	if err != nil {
		return "", err
	}
	defer func() { _ = rc.Close() }()
	dir, _, err := c.install(rc, d.Digest.Hex, digest, src)
	return dir, err
}

// keychain gives the source's credentials to its own registry, and nothing to any other.
type keychain struct {
	creds    Credentials
	registry string
}

// Resolve implements authn.Keychain.
func (k *keychain) Resolve(res authn.Resource) (authn.Authenticator, error) {
	if res.RegistryStr() != k.registry {
		return authn.Anonymous, nil
	}
	cr := k.creds
	switch {
	case cr.Username != "" || cr.Password != "":
		return &authn.Basic{Username: cr.Username, Password: cr.Password}, nil
	case cr.BearerToken != "":
		return &authn.Bearer{Token: cr.BearerToken}, nil
	case len(cr.DockerConfigJSON) > 0:
		auths, err := parseDockerConfig(cr.DockerConfigJSON)
		if err != nil {
			return nil, err
		}
		if a, ok := auths[k.registry]; ok {
			return authn.FromConfig(a), nil
		}
	}
	return authn.Anonymous, nil
}

// parseDockerConfig reads a .dockerconfigjson, its entries keyed by registry host.
func parseDockerConfig(data []byte) (map[string]authn.AuthConfig, error) {
	var cfg struct {
		Auths map[string]authn.AuthConfig `json:"auths"`
	}
	if err := json.Unmarshal(data, &cfg); err != nil {
		return nil, invalid(".dockerconfigjson does not parse as JSON")
	}
	out := map[string]authn.AuthConfig{}
	for key, a := range cfg.Auths {
		out[registryHost(key)] = a
	}
	return out, nil
}

// registryHost is the host of a .dockerconfigjson key: "https://host/v1/" reads "host".
func registryHost(key string) string {
	h := strings.TrimPrefix(strings.TrimPrefix(key, "https://"), "http://")
	h, _, _ = strings.Cut(h, "/")
	switch h {
	case "docker.io", "registry-1.docker.io":
		return name.DefaultRegistry
	}
	return h
}

// dockerAuths are the entries of a .dockerconfigjson, for redaction; none when it does
// not parse.
func dockerAuths(data []byte) []authn.AuthConfig {
	auths, err := parseDockerConfig(data)
	if err != nil {
		return nil
	}
	out := make([]authn.AuthConfig, 0, len(auths))
	for _, a := range auths {
		out = append(out, a)
	}
	return out
}
