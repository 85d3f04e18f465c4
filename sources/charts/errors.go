package charts

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"regexp"
	"strings"
	"syscall"
	"unicode"

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
	// Detail explains the failure, credentials removed, on one line of at most 512
	// characters: what a server answered is quoted as a short excerpt at most.
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
	return &Error{Op: op, Repository: sources.RedactURL(src.Repository), Kind: kind,
		Detail: excerpt(redact(detail, src.Credentials), maxDetail)}
}

func classify(ctx context.Context, err error) (string, error) {
	if ctx.Err() != nil || errors.Is(err, context.DeadlineExceeded) {
		if errors.Is(ctx.Err(), context.Canceled) {
			return "", context.Canceled
		}
		return "no answer from the server before the deadline", sources.ErrTimeout
	}
	var refused *AddressRefusedError
	if errors.As(err, &refused) {
		return refused.Error(), sources.ErrInvalidSource
	}
	text := errorText(err)
	for _, k := range []error{sources.ErrInvalidSource, sources.ErrRefNotFound, sources.ErrAuthFailed,
		sources.ErrRepositoryNotFound, sources.ErrLimitExceeded, sources.ErrUnreachable, ErrBadArchive, sources.ErrFetchFailed} {
		if errors.Is(err, k) {
			return strings.TrimPrefix(strings.TrimPrefix(text, k.Error()), ": "), k
		}
	}
	if code, ok := httpStatus(err); ok {
		return classifyStatus(text, code)
	}
	var ua x509.UnknownAuthorityError
	var hn x509.HostnameError
	var ci x509.CertificateInvalidError
	if errors.As(err, &ua) || errors.As(err, &hn) || errors.As(err, &ci) {
		return "the server's certificate is not trusted; set ca.crt in the secret: " + text, sources.ErrUntrustedCertificate
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
	return text, sources.ErrFetchFailed
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

func classifyStatus(text string, code int) (string, error) {
	switch code {
	case http.StatusUnauthorized, http.StatusForbidden:
		return "the server refused the credentials (or asked for some and got none): " + text, sources.ErrAuthFailed
	case http.StatusNotFound:
		return text, sources.ErrRefNotFound
	}
	return text, sources.ErrFetchFailed
}

// What an error quotes of what a server said.
const (
	// maxQuoted bounds each message of a registry's error answer the error quotes.
	maxQuoted = 120
	// maxDetail bounds an error's detail.
	maxDetail = 512
	// maxErrorCodes bounds the errors of one registry answer that are quoted.
	maxErrorCodes = 4
	// noToken is how go-containerregistry says a token answer held no token, the whole
	// answer following.
	noToken = "no token in bearer response"
)

// errorText is err's message without what a server answered beyond a short excerpt: the
// body of a registry's error answer is cut by errorBody before go-containerregistry reads
// it; a token answer that holds no token is not quoted at all.
func errorText(err error) string {
	msg := err.Error()
	if i := strings.Index(msg, noToken); i >= 0 {
		msg = msg[:i+len(noToken)]
	}
	return msg
}

// errorBody is what the client keeps of the body of an error answer of a registry: the
// errors it lists (at most maxErrorCodes), their codes and messages cut to maxQuoted
// printable characters, as a registry writes them. The answer of a server that is no
// registry (anything else) is kept empty: it never reaches an error, nor the status.
func errorBody(body io.Reader) []byte {
	data, _ := io.ReadAll(io.LimitReader(body, 64<<10))
	var answer struct {
		Errors []struct {
			Code    string `json:"code"`
			Message string `json:"message,omitempty"`
		} `json:"errors"`
	}
	if json.Unmarshal(data, &answer) != nil || len(answer.Errors) == 0 {
		return nil
	}
	answer.Errors = answer.Errors[:min(len(answer.Errors), maxErrorCodes)]
	for i := range answer.Errors {
		answer.Errors[i].Code = excerpt(answer.Errors[i].Code, 40)
		answer.Errors[i].Message = excerpt(answer.Errors[i].Message, maxQuoted)
	}
	out, _ := json.Marshal(answer)
	return out
}

// excerpt is s on one line, its control and unprintable characters spaces, cut to max
// characters.
func excerpt(s string, max int) string {
	var b strings.Builder
	n := 0
	space := false
	for _, r := range s {
		if !unicode.IsPrint(r) {
			space = true
			continue
		}
		if n >= max {
			b.WriteString("…")
			break
		}
		if space && b.Len() > 0 {
			b.WriteByte(' ')
			n++
		}
		space = false
		b.WriteRune(r)
		n++
	}
	return b.String()
}

// limitErr says that what the repository sent is larger than a cap.
func limitErr(what string, max int64) error {
	return fmt.Errorf("%w: %s is larger than the cap of %d bytes", sources.ErrLimitExceeded, what, max)
}

// invalid says the source cannot work as written.
func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{sources.ErrInvalidSource}, args...)...)
}
