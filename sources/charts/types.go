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

// Source is a chart to follow.
type Source struct {
	// Repository is https:// or http:// (a repository serving index.yaml) or oci://.
	Repository string
	// Name of the chart; for OCI the chart is <repository>/<name>.
	Name string
	// Version is an exact version or a semver range; "" means "*".
	Version string
	// Digest pins an OCI chart by its manifest digest.
	Digest string
	// Credentials for the repository.
	Credentials Credentials
	// Keyring holds ASCII-armored OpenPGP public keys; non-nil means the chart's
	// provenance must verify against them.
	Keyring []byte
}

// Key identifies what polling the source finds: repository, chart, version range, digest
// and credentials. Sources with the same key share a poller.
func (s Source) Key() string {
	h := sha256.New()
	for _, v := range []string{s.Repository, s.Name, s.Version, s.Digest, s.Credentials.digest()} {
		_, _ = fmt.Fprintf(h, "%d:%s;", len(v), v)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// IsOCI reports whether the source is an OCI registry.
func (s Source) IsOCI() bool { return strings.HasPrefix(s.Repository, "oci://") }

// chartName is the name the chart's archive uses for its top directory: the last element
// of Name.
func (s Source) chartName() string {
	return s.Name[strings.LastIndex(s.Name, "/")+1:]
}

// Resolved is a version of a chart, found by Resolve.
type Resolved struct {
	// Version of the chart.
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
