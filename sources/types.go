package sources

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
)

// Ref says which revision of a repository to follow. At most one field is set; when none is, the
// remote's default branch (HEAD) is followed.
//
// Its fields match convergev1.GitRef name for name and type for type, so a caller converts
// with sources.Ref(spec.Source.Ref).
type Ref struct {
	// Branch to follow, e.g. main.
	Branch string
	// Tag to follow, e.g. v1.2.3; annotated tags are peeled to their commit.
	Tag string
	// SemVer is a constraint such as ">=1.0.0 <2.0.0"; the highest matching tag is followed.
	SemVer string
	// Commit is a full commit SHA.
	Commit string
	// Name is any fully qualified ref, e.g. refs/pull/7/head.
	Name string
}

// Validate checks that at most one kind of ref is set and that a commit is a full SHA.
func (r Ref) Validate() error {
	n := 0
	for _, v := range []string{r.Branch, r.Tag, r.SemVer, r.Commit, r.Name} {
		if v != "" {
			n++
		}
	}
	if n > 1 {
		return fmt.Errorf("%w: ref sets more than one of branch, tag, semver, commit and name", ErrInvalidSource)
	}
	if r.Commit != "" && !isHex(r.Commit, 40) && !isHex(r.Commit, 64) {
		return fmt.Errorf("%w: commit %q is not a full lowercase hex SHA", ErrInvalidSource, r.Commit)
	}
	if r.Name != "" && !strings.HasPrefix(r.Name, "refs/") && r.Name != "HEAD" {
		return fmt.Errorf("%w: ref name %q is not fully qualified (refs/…)", ErrInvalidSource, r.Name)
	}
	return nil
}

// String describes the ref for messages, e.g. "branch main" or "semver >=1.0.0".
func (r Ref) String() string {
	switch {
	case r.Branch != "":
		return "branch " + r.Branch
	case r.Tag != "":
		return "tag " + r.Tag
	case r.SemVer != "":
		return "semver " + r.SemVer
	case r.Commit != "":
		return "commit " + r.Commit
	case r.Name != "":
		return "ref " + r.Name
	}
	return "default branch"
}

// Source is a repository and the ref to follow in it, with the credentials to reach it.
type Source struct {
	// URL of the repository: https://, http://, ssh:// or the scp-like user@host:path.
	URL string
	// Ref to follow.
	Ref Ref
	// Auth holds credentials; nil for a public repository over HTTP(S).
	Auth *Auth
}

// String describes the source with its URL redacted, e.g. "https://host/org/app.git (branch main)".
func (s Source) String() string {
	return RedactURL(s.URL) + " (" + s.Ref.String() + ")"
}

// Key identifies what a poller polls: the URL, the ref and a hash of the credentials. Sources
// with equal keys share one poller and one fetch.
type Key string

// Key returns the source's poller key.
func (s Source) Key() Key {
	h := sha256.New()
	for _, v := range []string{s.URL, s.Ref.Branch, s.Ref.Tag, s.Ref.SemVer, s.Ref.Commit, s.Ref.Name, s.Auth.hash()} {
		_, _ = fmt.Fprintf(h, "%d:%s;", len(v), v)
	}
	return Key(hex.EncodeToString(h.Sum(nil))[:32])
}

// Revision is an exact commit, with the ref it was resolved from.
type Revision struct {
	// Ref is the branch, tag or ref name the commit was resolved from, e.g. "main",
	// "v1.2.0" or "refs/pull/7/head"; empty when the source asked for the commit itself.
	Ref string
	// Commit is the full lowercase hex SHA.
	Commit string
}

// String renders the revision as <ref>@sha1:<hex> (e.g. main@sha1:0a1b…), or sha1:<hex> when it
// has no ref; sha256 replaces sha1 for SHA-256 commits.
func (r Revision) String() string {
	if r.Commit == "" {
		return ""
	}
	algo := "sha1"
	if len(r.Commit) == 64 {
		algo = "sha256"
	}
	if r.Ref == "" {
		return algo + ":" + r.Commit
	}
	return r.Ref + "@" + algo + ":" + r.Commit
}

// IsZero reports whether the revision is empty.
func (r Revision) IsZero() bool { return r.Commit == "" }

// ParseRevision reads what Revision.String writes: <ref>@sha1:<hex>, <ref>@sha256:<hex>,
// sha1:<hex> or sha256:<hex>.
func ParseRevision(s string) (Revision, error) {
	ref, digest := "", s
	if i := strings.LastIndex(s, "@sha"); i >= 0 {
		ref, digest = s[:i], s[i+1:]
		if ref == "" {
			return Revision{}, fmt.Errorf("invalid revision %q: empty ref before @", s)
		}
		if strings.ContainsAny(ref, " \t\n\r\x00") {
			return Revision{}, fmt.Errorf("invalid revision %q: ref contains whitespace or control characters", s)
		}
	}
	algo, hexSHA, ok := strings.Cut(digest, ":")
	if !ok {
		return Revision{}, fmt.Errorf("invalid revision %q: want <ref>@sha1:<hex>", s)
	}
	switch {
	case algo == "sha1" && isHex(hexSHA, 40):
	case algo == "sha256" && isHex(hexSHA, 64):
	default:
		return Revision{}, fmt.Errorf("invalid revision %q: want sha1:<40 hex> or sha256:<64 hex>", s)
	}
	return Revision{Ref: ref, Commit: hexSHA}, nil
}

// isHex reports whether s is n lowercase hex digits.
func isHex(s string, n int) bool {
	if len(s) != n {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// ShortRevision abbreviates a revision as converge records it to its first 7 hex digits:
// main@sha1:0a1b2c3. What is not such a revision is returned as it is.
func ShortRevision(rev string) string {
	r, err := ParseRevision(rev)
	if err != nil {
		return rev
	}
	algo, _, _ := strings.Cut(strings.TrimPrefix(rev, r.Ref+"@"), ":")
	short := algo + ":" + r.Commit[:7]
	if r.Ref == "" {
		return short
	}
	return r.Ref + "@" + short
}
