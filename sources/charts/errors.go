package charts

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"regexp"
	"strings"
	"syscall"

	"github.com/google/go-containerregistry/pkg/v1/remote/transport"

	"github.com/converge-gitops/converge/sources"
)

// Error is a failed operation on a chart repository. Its message names the operation, the
// repository (without credentials) and what failed; it never quotes credentials. It
// unwraps to its Kind only, one of the sources.Err* kinds (or a context error), so that
// callers tell what to report and whether to retry as they do for Git sources.
type Error struct {
	// Op is what was attempted, e.g. "read the index of" or "download chart podinfo 6.5.0 from".
	Op string
	// Repository is the repository URL, credentials removed.
	Repository string
	// Kind is a sources.Err* kind or a context error.
	Kind error
	// Detail explains the failure, credentials removed.
	Detail string
}

func (e *Error) Error() string {
	msg := e.Op + " " + e.Repository + ": " + kindText(e.Kind)
	if e.Detail != "" {
		msg += ": " + e.Detail
	}
	return msg
}

// Unwrap returns the kind of failure.
func (e *Error) Unwrap() error { return e.Kind }

func kindText(kind error) string {
	switch {
	case errors.Is(kind, sources.ErrFetchFailed):
		return "request failed"
	case errors.Is(kind, sources.ErrRefNotFound):
		return "not found"
	case errors.Is(kind, sources.ErrLimitExceeded):
		return "limit exceeded"
	}
	return kind.Error()
}

// statusError is an HTTP answer other than success.
type statusError struct {
	code int
	what string
}

func (e *statusError) Error() string {
	return fmt.Sprintf("%s: the server answered %d %s", e.what, e.code, http.StatusText(e.code))
}

// userinfo matches the userinfo of URLs inside free text.
var userinfo = regexp.MustCompile(`([A-Za-z][A-Za-z0-9+.-]*://)[^/\s"']*@`)

// redact removes URL userinfo and every secret of creds from s.
func redact(s string, creds Credentials) string {
	s = userinfo.ReplaceAllString(s, "$1")
	for _, secret := range creds.secrets() {
		if len(secret) >= 4 {
			s = strings.ReplaceAll(s, secret, "[redacted]")
		}
	}
	return s
}

// wrap turns err into an *Error of a known kind, credentials removed. An *Error or a
// *sources.VerificationError passes unchanged.
func wrap(ctx context.Context, op string, src Source, err error) error {
	if err == nil {
		return nil
	}
	var e *Error
	var ve *sources.VerificationError
	if errors.As(err, &e) || errors.As(err, &ve) {
		return err
	}
	detail, kind := classify(ctx, err)
	return &Error{Op: op, Repository: sources.RedactURL(src.Repository), Kind: kind, Detail: redact(detail, src.Credentials)}
}

func classify(ctx context.Context, err error) (string, error) {
	if ctx.Err() != nil || errors.Is(err, context.DeadlineExceeded) {
		if errors.Is(ctx.Err(), context.Canceled) {
			return "", context.Canceled
		}
		return "no answer from the server before the deadline", sources.ErrTimeout
	}
	for _, k := range []error{sources.ErrInvalidSource, sources.ErrRefNotFound, sources.ErrAuthFailed,
		sources.ErrRepositoryNotFound, sources.ErrLimitExceeded, sources.ErrUnreachable, ErrBadArchive, sources.ErrFetchFailed} {
		if errors.Is(err, k) {
			return strings.TrimPrefix(strings.TrimPrefix(err.Error(), k.Error()), ": "), k
		}
	}
	if code, ok := httpStatus(err); ok {
		return classifyStatus(err, code)
	}
	var ua x509.UnknownAuthorityError
	var hn x509.HostnameError
	var ci x509.CertificateInvalidError
	if errors.As(err, &ua) || errors.As(err, &hn) || errors.As(err, &ci) {
		return "the server's certificate is not trusted; set ca.crt in the secret: " + err.Error(), sources.ErrUntrustedCertificate
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return "no answer from the server before the deadline", sources.ErrTimeout
	}
	var dns *net.DNSError
	var op *net.OpError
	switch {
	case errors.As(err, &dns):
		return "cannot resolve host " + dns.Name, sources.ErrUnreachable
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused", sources.ErrUnreachable
	case errors.As(err, &op) && op.Op == "dial":
		return "cannot connect: " + op.Err.Error(), sources.ErrUnreachable
	}
	return err.Error(), sources.ErrFetchFailed
}

// httpStatus is the status code of a failed HTTP answer, from this package or from a
// registry.
func httpStatus(err error) (int, bool) {
	var se *statusError
	if errors.As(err, &se) {
		return se.code, true
	}
	var te *transport.Error
	if errors.As(err, &te) {
		return te.StatusCode, true
	}
	return 0, false
}

func classifyStatus(err error, code int) (string, error) {
	switch code {
	case http.StatusUnauthorized, http.StatusForbidden:
		return "the server refused the credentials (or asked for some and got none): " + err.Error(), sources.ErrAuthFailed
	case http.StatusNotFound:
		return err.Error(), sources.ErrRefNotFound
	}
	return err.Error(), sources.ErrFetchFailed
}

// limitErr says that what the repository sent is larger than a cap.
func limitErr(what string, max int64) error {
	return fmt.Errorf("%w: %s is larger than the cap of %d bytes", sources.ErrLimitExceeded, what, max)
}

// invalid says the source cannot work as written.
func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{sources.ErrInvalidSource}, args...)...)
}
