package render

import (
	"errors"
	"fmt"
	"strings"
	"time"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
	"github.com/converge-gitops/converge/internal/category"
)

// Classes of render failure. Every error Render returns is an *Error whose chain
// holds exactly one of these, so callers can tell them apart with errors.Is; all of
// them are the commit's fault and map to the BuildFailed reason, but ErrDecryption
// (DecryptionFailed) and ErrSubstitution (SubstitutionFailed), which carry their reason
// (package category).
var (
	// ErrOutsideRoot: a path, `../` or symlink resolves outside the checkout root.
	ErrOutsideRoot = errors.New("path escapes the repository root")
	// ErrSymlinkLoop: resolving a path or walking a tree went round a symlink cycle.
	ErrSymlinkLoop = errors.New("symlink loop")
	// ErrLimitExceeded: a cap of Limits was exceeded.
	ErrLimitExceeded = errors.New("limit exceeded")
	// ErrInvalidDocument: a document could not be parsed as YAML or JSON.
	ErrInvalidDocument = errors.New("invalid document")
	// ErrInvalidObject: a document parsed but is not a usable Kubernetes object.
	ErrInvalidObject = errors.New("invalid object")
	// ErrDuplicateObject: two objects have the same group, kind, namespace and name.
	ErrDuplicateObject = errors.New("duplicate object")
	// ErrRemoteDisabled: a kustomization refers to a remote base, file or git URL.
	ErrRemoteDisabled = errors.New("remote kustomize resources are not allowed")
	// ErrPluginDisabled: a kustomization uses a plugin, an exec or container function,
	// helm, or another feature that runs code or changes process-wide state.
	ErrPluginDisabled = errors.New("kustomize plugins and functions are not allowed")
	// ErrKustomize: kustomize failed for another reason (bad patch, missing file, …).
	ErrKustomize = errors.New("kustomize build failed")
	// ErrNotFound: the path to render, or a file it refers to, does not exist.
	ErrNotFound = errors.New("not found")
	// ErrInvalidOptions: the Options themselves are unusable (a caller bug or a bad spec).
	ErrInvalidOptions = errors.New("invalid render options")
	// ErrDecryption: a SOPS-encrypted file could not be decrypted (no decryption
	// configured, no key for it, MAC mismatch, malformed), or the decryption keys are
	// unusable. It maps to the DecryptionFailed reason.
	ErrDecryption = category.New(category.FailRevision, convergev1.DecryptionFailedReason, "decryption failed")
	// ErrCiphertext: a file holds a value in SOPS' encrypted form (ENC[AES256_GCM,…]) but
	// is not a SOPS file that can be decrypted (its sops metadata, or their mac, is
	// missing): it is refused rather than applied as ciphertext. Unlike ErrDecryption, no
	// key or Secret could help: the commit is at fault, and it maps to BuildFailed.
	ErrCiphertext = errors.New("SOPS ciphertext outside a SOPS file")
	// ErrRenderTimeout: the render did not finish within Options.Timeout. The *Error
	// then reads "render exceeded <timeout>" and names no file.
	ErrRenderTimeout = errors.New("render exceeded its deadline")
	// ErrSubstitution: spec.postBuild substitution failed: a variable is unset in strict
	// mode, or a ${ is not a reference converge understands (see Substitution).
	ErrSubstitution = category.New(category.FailRevision, convergev1.SubstitutionFailedReason, "substitution failed")
)

// timeoutError is the cause of a render that ran out of time: it reads
// "render exceeded 2m0s" and is ErrRenderTimeout. It deliberately does not wrap
// context.DeadlineExceeded: the commit's content is at fault (BuildFailed), not the
// caller's context.
type timeoutError struct{ after time.Duration }

func (e timeoutError) Error() string { return "render exceeded " + e.after.String() }

func (e timeoutError) Is(target error) bool { return target == ErrRenderTimeout }

// Error is the error Render returns. It names the file, relative to the checkout root,
// and the YAML document within it when the failure is about one document. It never
// quotes the content of a document, so a Secret that fails to render is not echoed.
type Error struct {
	// File is the slash-separated path relative to the checkout root of the file or
	// directory at fault; empty when the failure is not about one file.
	File string
	// Document is the 1-based position of the YAML document within File, or 0 when
	// the failure concerns the whole file.
	Document int
	// Err is the cause; its chain holds one of the Err* classes of this package.
	Err error
}

// Error formats as "render <file>: document <n>: <cause>", and a timeout as
// "render exceeded <timeout>".
func (e *Error) Error() string {
	var te timeoutError
	if e.File == "" && e.Document == 0 && errors.As(e.Err, &te) {
		return te.Error()
	}
	if ce, ok := e.Err.(*classedError); ok && ce.whole && e.File == "" && e.Document == 0 {
		return ce.msg
	}
	var b strings.Builder
	b.WriteString("render")
	if e.File != "" {
		b.WriteString(" ")
		b.WriteString(e.File)
	}
	if e.Document > 0 {
		fmt.Fprintf(&b, ": document %d", e.Document)
	}
	b.WriteString(": ")
	if e.Err != nil {
		b.WriteString(e.Err.Error())
	}
	return b.String()
}

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Err }

// fileErr builds an *Error for a whole file, or returns err unchanged when it is one.
func fileErr(file string, err error) error {
	var re *Error
	if errors.As(err, &re) {
		return err
	}
	return &Error{File: file, Err: err}
}

// docErr builds an *Error for one document of a file.
func docErr(file string, doc int, err error) error {
	return &Error{File: file, Document: doc, Err: err}
}

// classErr wraps the class sentinel with a formatted detail: "<class>: <detail>".
func classErr(class error, format string, args ...any) error {
	return fmt.Errorf("%w: %s", class, fmt.Sprintf(format, args...))
}
