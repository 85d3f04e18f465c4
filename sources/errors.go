package sources

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"regexp"
	"strings"
	"syscall"

	"github.com/go-git/go-git/v5/plumbing/transport"

	"github.com/converge-gitops/converge/internal/category"
)

// Kinds of failure. Every error returned by Resolve and Checkout matches exactly one of them with
// errors.Is (or is a context error, or a *LimitError), so callers can decide what to report and
// whether to retry. Those that say what follows for a SyncTarget carry their category
// (package category): an invalid source stalls, a checkout over the caps or a signature
// that does not verify fails the revision.
var (
	// ErrInvalidSource: the source cannot work as written (bad URL, ref, constraint or
	// credentials secret); retrying does not help until it changes.
	ErrInvalidSource = category.New(category.Stall, "", "invalid source")
	// ErrAuthFailed: the server refused the credentials, or asked for some and got none.
	ErrAuthFailed = errors.New("authentication failed")
	// ErrUnknownHostKey: the SSH server's host key is not in known_hosts.
	ErrUnknownHostKey = errors.New("unknown ssh host key")
	// ErrHostKeyMismatch: known_hosts has a different key for the SSH server — the server's key
	// changed, or someone is in the middle.
	ErrHostKeyMismatch = errors.New("ssh host key mismatch")
	// ErrUntrustedCertificate: the HTTPS server's certificate is not trusted (see ca.crt).
	ErrUntrustedCertificate = errors.New("untrusted tls certificate")
	// ErrUnreachable: no connection could be made to the server.
	ErrUnreachable = errors.New("server unreachable")
	// ErrTimeout: the operation did not finish within its deadline.
	ErrTimeout = errors.New("timed out")
	// ErrRepositoryNotFound: the server has no such repository.
	ErrRepositoryNotFound = errors.New("repository not found")
	// ErrRefNotFound: the branch, tag or ref does not exist (any more), or no tag matches the
	// semver constraint, or the commit cannot be fetched.
	ErrRefNotFound = errors.New("ref not found")
	// ErrLimitExceeded: a checkout is larger than a cap; see LimitError.
	ErrLimitExceeded = category.New(category.FailRevision, "", "checkout limit exceeded")
	// ErrVerificationFailed: the revision is not signed by a trusted key (spec.source.verify);
	// see VerificationError.
	ErrVerificationFailed = category.New(category.FailRevision, "", "verification failed")
	// ErrFetchFailed: any other failure talking to the server or reading what it sent.
	ErrFetchFailed = errors.New("git operation failed")
)

// Error is the error Resolve and Checkout return for a failed remote operation. Its message
// names the operation, the redacted URL and the kind of failure; it never contains credentials.
// It unwraps to its Kind only: the underlying library error, which may quote credentials, is
// kept out of reach.
type Error struct {
	// Op is what was attempted: "list refs of" or "fetch".
	Op string
	// URL is the repository URL with credentials removed.
	URL string
	// Kind is one of the Err* values of this package, or a context error.
	Kind error
	// Detail explains the failure, with credentials removed.
	Detail string
}

func (e *Error) Error() string {
	msg := e.Op + " " + e.URL + ": " + e.Kind.Error()
	if e.Detail != "" {
		msg += ": " + e.Detail
	}
	return msg
}

// Unwrap returns the kind of failure.
func (e *Error) Unwrap() error { return e.Kind }

// LimitError is returned by Checkout when a checkout would exceed a cap.
type LimitError struct {
	// Limit names the cap: "MaxBytes" or "MaxFiles".
	Limit string
	// Max is the cap's value.
	Max int64
	// Commit is the commit whose checkout was refused.
	Commit string
	// Reason says what went over the cap when it is not the files written, for instance what
	// the server's pack declares; empty otherwise.
	Reason string
}

func (e *LimitError) Error() string {
	var msg string
	switch e.Limit {
	case "MaxBytes":
		msg = fmt.Sprintf("checkout of %s exceeds the size cap MaxBytes (%d bytes)", e.Commit, e.Max)
	case "MaxFiles":
		msg = fmt.Sprintf("checkout of %s exceeds the file count cap MaxFiles (%d files)", e.Commit, e.Max)
	default:
		msg = fmt.Sprintf("checkout of %s exceeds the cap %s (%d)", e.Commit, e.Limit, e.Max)
	}
	if e.Reason != "" {
		msg += ": " + e.Reason
	}
	return msg
}

// Is makes errors.Is(err, ErrLimitExceeded) true.
func (e *LimitError) Is(target error) bool { return target == ErrLimitExceeded }

// FailureCategory is ErrLimitExceeded's: the revision is too large, and will stay so.
func (e *LimitError) FailureCategory() (category.Category, string) { return category.FailRevision, "" }

// hostKeyError is what our SSH host key callback returns; x/crypto/ssh wraps it with %w.
type hostKeyError struct {
	kind error
	msg  string
}

func (e *hostKeyError) Error() string { return e.msg }

// userinfoPattern matches the userinfo of URLs inside free text: everything up to the last
// '@' before the host, as url.Parse reads it, so that a password holding an unescaped '@'
// is removed whole.
var userinfoPattern = regexp.MustCompile(`([A-Za-z][A-Za-z0-9+.-]*://)[^/\s"']*@`)

// redactor removes credentials from text.
type redactor struct {
	secrets []string
}

func newRedactor(rawURL string, a *Auth) *redactor {
	r := &redactor{}
	r.add(a.secrets()...)
	if u, ok := parseUserinfo(rawURL); ok {
		r.add(u...)
	}
	return r
}

func (r *redactor) add(secrets ...string) {
	for _, s := range secrets {
		// Very short values would blank out ordinary words; they are also not secrets anyone
		// can rely on. URLs are redacted structurally whatever their length.
		if len(s) >= 4 {
			r.secrets = append(r.secrets, s)
		}
	}
}

func (r *redactor) redact(s string) string {
	s = userinfoPattern.ReplaceAllString(s, "$1")
	for _, secret := range r.secrets {
		s = strings.ReplaceAll(s, secret, "[redacted]")
	}
	return s
}

// wrapErr turns an error of go-git, x/crypto/ssh or net/http into an *Error of a known kind with
// credentials removed from its message.
func wrapErr(ctx context.Context, op, rawURL string, red *redactor, err error) error {
	if err == nil {
		return nil
	}
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	var le *LimitError
	if errors.As(err, &le) {
		return le
	}
	detail, kind := classify(ctx, err)
	return &Error{Op: op, URL: RedactURL(rawURL), Kind: kind, Detail: red.redact(detail)}
}

func classify(ctx context.Context, err error) (detail string, kind error) {
	var hk *hostKeyError
	if errors.As(err, &hk) {
		return hk.msg, hk.kind
	}
	if detail, kind, ok := classifyTimeout(ctx, err); ok {
		return detail, kind
	}
	// Errors of this package carry their kind already.
	for _, k := range []error{ErrInvalidSource, ErrRefNotFound, ErrAuthFailed, ErrRepositoryNotFound, ErrFetchFailed} {
		if errors.Is(err, k) {
			return strings.TrimPrefix(strings.TrimPrefix(err.Error(), k.Error()), ": "), k
		}
	}
	if detail, kind, ok := classifyGit(err); ok {
		return detail, kind
	}
	var ua x509.UnknownAuthorityError
	var hn x509.HostnameError
	var ci x509.CertificateInvalidError
	if errors.As(err, &ua) || errors.As(err, &hn) || errors.As(err, &ci) {
		return "the server's certificate is not trusted; set ca.crt in the secret: " + err.Error(), ErrUntrustedCertificate
	}
	return classifyNet(err)
}

// classifyTimeout recognizes the end of ctx and the timeouts of the network.
func classifyTimeout(ctx context.Context, err error) (detail string, kind error, ok bool) {
	const noAnswer = "no answer from the server before the deadline"
	if ctx.Err() != nil {
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return noAnswer, ErrTimeout, true
		}
		return "", ctx.Err(), true
	}
	var ne net.Error
	if errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout()) {
		return noAnswer, ErrTimeout, true
	}
	return "", nil, false
}

// classifyGit recognizes the errors of go-git's transports.
func classifyGit(err error) (detail string, kind error, ok bool) {
	switch {
	case errors.Is(err, transport.ErrAuthenticationRequired):
		return "the server asked for credentials and refused the ones given (or none were given)", ErrAuthFailed, true
	case errors.Is(err, transport.ErrAuthorizationFailed):
		return "the server refused access with these credentials", ErrAuthFailed, true
	case strings.Contains(err.Error(), "unable to authenticate"):
		return "the ssh server refused the identity", ErrAuthFailed, true
	case errors.Is(err, transport.ErrRepositoryNotFound):
		return "the server has no repository at this path (or hides it from these credentials)", ErrRepositoryNotFound, true
	case errors.Is(err, transport.ErrEmptyRemoteRepository):
		return "the remote repository is empty", ErrRefNotFound, true
	}
	return "", nil, false
}

// classifyNet recognizes the failures to connect; anything else is ErrFetchFailed.
func classifyNet(err error) (detail string, kind error) {
	var dns *net.DNSError
	var op *net.OpError
	switch {
	case errors.As(err, &dns):
		return "cannot resolve host " + dns.Name, ErrUnreachable
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused", ErrUnreachable
	case errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.ENETUNREACH):
		return "no route to host", ErrUnreachable
	case errors.As(err, &op) && op.Op == "dial":
		return "cannot connect: " + op.Err.Error(), ErrUnreachable
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return "the server closed the connection: " + err.Error(), ErrFetchFailed
	}
	return err.Error(), ErrFetchFailed
}
