package charts

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"regexp"
	"strings"

	"github.com/converge-gitops/converge/sources"
)

// Credentials authenticate to a chart repository. Its String and GoString never print them.
type Credentials struct {
	// Username and Password authenticate with basic auth (HTTP repositories and registries).
	Username, Password string
	// BearerToken is sent as "Authorization: Bearer <token>" (HTTP), or as the registry
	// token of an OCI registry.
	BearerToken string
	// DockerConfigJSON is a .dockerconfigjson: the credentials of its entry for the
	// registry's host are used (OCI only).
	DockerConfigJSON []byte
	// CA is a PEM bundle: when set, the server's certificate must be signed by one of
	// these authorities (the system's are not consulted).
	CA []byte
}

// String hides the credentials.
func (c Credentials) String() string { return "charts.Credentials{redacted}" }

// GoString hides the credentials.
func (c Credentials) GoString() string { return c.String() }

// secrets are the values an error must never show.
func (c Credentials) secrets() []string {
	out := []string{c.Password, c.BearerToken}
	for _, a := range dockerAuths(c.DockerConfigJSON) {
		out = append(out, a.Password, a.Auth, a.IdentityToken, a.RegistryToken)
	}
	return out
}

// digest identifies the credentials, for keying pollers and caches.
func (c Credentials) digest() string {
	h := sha256.New()
	for _, v := range []string{c.Username, c.Password, c.BearerToken, string(c.DockerConfigJSON), string(c.CA)} {
		_, _ = fmt.Fprintf(h, "%d:%s;", len(v), v)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// SourceKind says what a Source follows.
type SourceKind string

// The kinds of sources.
const (
	// KindChart is a Helm chart of a chart repository (HTTP or OCI): the zero value.
	KindChart SourceKind = ""
	// KindArtifact is a configuration artifact of an OCI registry — a kustomization, plain
	// YAML or a chart directory, packed as `converge push artifact`, `flux push artifact`
	// or `oras push` of a tar.gz write it — whose whole tree is fetched.
	KindArtifact SourceKind = "Artifact"
)

// Source is a chart, or a configuration artifact, to follow.
type Source struct {
	// Kind says whether the source is a chart (the zero value) or a configuration artifact.
	Kind SourceKind
	// Repository is https:// or http:// (a repository serving index.yaml) or oci://. For an
	// artifact it is the whole repository, oci://host[:port]/path/repo.
	Repository string
	// Name of the chart; for OCI the chart is <repository>/<name>. An artifact has none:
	// it must be empty.
	Name string
	// Version is an exact version or a semver range; "" means "*". For an artifact it is
	// a semver range over the repository's tags ("v" prefixes read), the newest tag it
	// allows followed.
	Version string
	// Tag follows one tag of an artifact as it moves: any tag, semver or not ("latest",
	// "main-3f2a"). An artifact without Tag, Version or Digest follows "latest".
	Tag string
	// Digest pins an OCI chart, or an artifact, by its manifest digest.
	Digest string
	// LayerMediaType chooses the layer of an artifact holding its tree, when its manifest
	// has several or one of a type not read by default.
	LayerMediaType string
	// Credentials for the repository.
	Credentials Credentials
	// Keyring holds ASCII-armored OpenPGP public keys; non-nil means the chart's
	// provenance must verify against them.
	Keyring []byte
	// CosignKeys holds PEM public keys (ECDSA, Ed25519 or RSA; blocks may follow each
	// other); non-nil means the OCI chart or artifact must be signed with cosign by one of
	// them (see Client.VerifySigner).
	CosignKeys []byte
}

// Key identifies what polling the source finds: kind, repository, chart, version range,
// tag, digest, layer, credentials and trusted keys. Sources with the same key share a
// poller.
func (s Source) Key() string {
	h := sha256.New()
	for _, v := range []string{string(s.Kind), s.Repository, s.Name, s.Version, s.Tag, s.Digest, s.LayerMediaType,
		s.Credentials.digest(), string(s.Keyring), string(s.CosignKeys)} {
		_, _ = fmt.Fprintf(h, "%d:%s;", len(v), v)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// IsOCI reports whether the source is an OCI registry.
func (s Source) IsOCI() bool { return strings.HasPrefix(s.Repository, "oci://") }

// IsArtifact reports whether the source is a configuration artifact.
func (s Source) IsArtifact() bool { return s.Kind == KindArtifact }

// chartName is the name the chart's archive uses for its top directory: the last element
// of Name.
func (s Source) chartName() string {
	return s.Name[strings.LastIndex(s.Name, "/")+1:]
}

// op names an operation on the source for errors, the repository following: "resolve
// chart podinfo of", "resolve the artifact".
func (s Source) op(verb, preposition string) string {
	if s.IsArtifact() {
		return verb + " the artifact"
	}
	return verb + " chart " + s.Name + " " + preposition
}

// Resolved is a version of a chart, or of an artifact, found by Resolve.
type Resolved struct {
	// Version of the chart; the tag of an artifact, or "digest" for one pinned by digest.
	Version string
	// Digest is "sha256:<hex>": the archive's sha256 for an HTTP repository, the manifest
	// digest for OCI.
	Digest string
	// URL is where the archive is (HTTP), or the OCI reference; empty after ParseRevision.
	URL string
}

// String is the revision of the chart, as the SyncTarget's status shows it:
// "<version>@sha256:<hex>".
func (r Resolved) String() string { return r.Version + "@" + r.Digest }

var digestPattern = regexp.MustCompile(`^sha256:[0-9a-f]{64}$`)

// ParseRevision reads a revision String wrote. Its URL is empty.
func ParseRevision(s string) (Resolved, error) {
	i := strings.LastIndex(s, "@")
	if i <= 0 {
		return Resolved{}, fmt.Errorf("%w: chart revision %q is not <version>@sha256:<hex>", sources.ErrInvalidSource, s)
	}
	r := Resolved{Version: s[:i], Digest: s[i+1:]}
	if !digestPattern.MatchString(r.Digest) {
		return Resolved{}, fmt.Errorf("%w: chart revision %q: the digest is not sha256:<64 hex digits>", sources.ErrInvalidSource, s)
	}
	if strings.ContainsAny(r.Version, " /\\@") {
		return Resolved{}, fmt.Errorf("%w: chart revision %q: bad version", sources.ErrInvalidSource, s)
	}
	return r, nil
}

// hexDigest is the hex of a "sha256:<hex>" digest.
func hexDigest(d string) string { return strings.TrimPrefix(d, "sha256:") }

// Limits bound what is read from a repository. Zero values take the defaults.
type Limits struct {
	// ArchiveBytes caps a chart archive as downloaded (default 16 MiB).
	ArchiveBytes int64
	// ExtractedBytes caps the files of an extracted chart together (default 64 MiB).
	ExtractedBytes int64
	// FileBytes caps one file of a chart (default 16 MiB).
	FileBytes int64
	// Files caps the entries (files and directories) of a chart (default 10000).
	Files int
	// IndexBytes caps an HTTP repository's index.yaml, and an OCI registry's answers other
	// than blobs (default 32 MiB).
	IndexBytes int64
}

// Defaults of Limits.
const (
	DefaultArchiveBytes   = 16 << 20
	DefaultExtractedBytes = 64 << 20
	DefaultFileBytes      = 16 << 20
	DefaultFiles          = 10000
	DefaultIndexBytes     = 32 << 20
	// provBytes caps a provenance file.
	provBytes = 1 << 20
	// configBytes caps an OCI chart's config blob.
	configBytes = 1 << 20
)

func (l Limits) withDefaults() Limits {
	if l.ArchiveBytes <= 0 {
		l.ArchiveBytes = DefaultArchiveBytes
	}
	if l.ExtractedBytes <= 0 {
		l.ExtractedBytes = DefaultExtractedBytes
	}
	if l.FileBytes <= 0 {
		l.FileBytes = DefaultFileBytes
	}
	if l.Files <= 0 {
		l.Files = DefaultFiles
	}
	if l.IndexBytes <= 0 {
		l.IndexBytes = DefaultIndexBytes
	}
	return l
}
