package render

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utiljson "k8s.io/apimachinery/pkg/util/json"

	"github.com/converge-gitops/converge/sync/helm"
)

// The render worker protocol: length-prefixed JSON messages on two pipes (the worker's
// file descriptors 3, parent to worker, and 4, worker to parent; its stdout is not used,
// so nothing a library prints can be taken for a message). The parent sends one request,
// answers the worker's calls (lookup, scope of a kind) and reads one result.

// toWorker is a message from the parent: a render request or the answer to a call.
type toWorker struct {
	Request *wireRequest `json:",omitempty"`
	Reply   *wireReply   `json:",omitempty"`
}

// fromWorker is a message from the worker: a call to the parent or the render's result.
type fromWorker struct {
	Call   *wireCall   `json:",omitempty"`
	Result *wireResult `json:",omitempty"`
}

// wireRequest is Options as it crosses the boundary: the functions become calls back to
// the parent, the decryption keys travel as the Secret data they were parsed from.
type wireRequest struct {
	Options Options
	Keys    map[string][]byte `json:",omitempty"`
	HasKeys bool              `json:",omitempty"`
	// Scope and Lookup say whether Options.IsNamespaced and Options.Helm.Lookup were set.
	Scope, Lookup bool `json:",omitempty"`
}

// wireCall asks the parent: the scope of a kind (Kind set) or a lookup (APIVersion set).
type wireCall struct {
	ID                                int64
	Scope                             *schema.GroupVersionKind `json:",omitempty"`
	APIVersion, Kind, Namespace, Name string                   `json:",omitempty"`
}

type wireReply struct {
	ID         int64
	Namespaced bool            `json:",omitempty"`
	Object     json.RawMessage `json:",omitempty"`
	Err        string          `json:",omitempty"`
}

type wireResult struct {
	Objects    []json.RawMessage `json:",omitempty"`
	Digest     string            `json:",omitempty"`
	Kustomized bool              `json:",omitempty"`
	Chart      bool              `json:",omitempty"`
	Sensitive  []string          `json:",omitempty"`
	Values     *ChartValues      `json:",omitempty"`
	Err        *wireError        `json:",omitempty"`
	// Dirty says that the worker still runs part of the render (a template loop that
	// calls no function cannot be stopped): the parent ends the worker.
	Dirty bool `json:",omitempty"`
}

// wireError is an *Error: its place, its cause's text and the classes it is.
type wireError struct {
	File     string   `json:",omitempty"`
	Document int      `json:",omitempty"`
	Msg      string   `json:",omitempty"`
	Classes  []string `json:",omitempty"`
	Timeout  int64    `json:",omitempty"`
}

// errorClasses are the sentinels a render error may be, by name on the wire.
var errorClasses = map[string]error{
	"outside-root": ErrOutsideRoot, "symlink-loop": ErrSymlinkLoop, "limit": ErrLimitExceeded,
	"invalid-document": ErrInvalidDocument, "invalid-object": ErrInvalidObject,
	"duplicate": ErrDuplicateObject, "remote": ErrRemoteDisabled, "plugin": ErrPluginDisabled,
	"kustomize": ErrKustomize, "not-found": ErrNotFound, "options": ErrInvalidOptions,
	"decryption": ErrDecryption, "ciphertext": ErrCiphertext, "timeout": ErrRenderTimeout,
	"substitution": ErrSubstitution, "helm": ErrHelm, "helm-bound": helm.ErrRenderBound,
	"worker": ErrRenderWorker,
}

// maxMessage bounds one message on either pipe; a result larger than that is refused.
const maxMessage = 128 << 20

func writeMessage(w *bufio.Writer, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	var n [4]byte
	binary.BigEndian.PutUint32(n[:], uint32(len(b)))
	if _, err := w.Write(n[:]); err != nil {
		return err
	}
	if _, err := w.Write(b); err != nil {
		return err
	}
	return w.Flush()
}

// readMessage reads one message of at most limit bytes into v.
func readMessage(r io.Reader, limit int, v any) error {
	var n [4]byte
	if _, err := io.ReadFull(r, n[:]); err != nil {
		return err
	}
	size := int(binary.BigEndian.Uint32(n[:]))
	if size > limit {
		return fmt.Errorf("%w: a message of %d bytes, more than %d", errTooLarge, size, limit)
	}
	b := make([]byte, size)
	if _, err := io.ReadFull(r, b); err != nil {
		return err
	}
	return json.Unmarshal(b, v)
}

var errTooLarge = errors.New("message too large")

// requestOf is opts on the wire.
func requestOf(opts Options) *wireRequest {
	req := &wireRequest{Options: opts, Scope: opts.IsNamespaced != nil}
	req.Lookup = opts.Helm != nil && opts.Helm.Lookup != nil
	if opts.Decryption != nil {
		req.HasKeys, req.Keys = true, opts.Decryption.data
	}
	return req
}

// options is the request as Options again, its functions calling c.
func (r *wireRequest) options(c caller) (Options, error) {
	opts := r.Options
	if r.HasKeys {
		keys, err := ParseKeys(r.Keys)
		if err != nil {
			return opts, err
		}
		opts.Decryption = keys
	}
	if r.Scope {
		opts.IsNamespaced = c.namespaced
	}
	if r.Lookup && opts.Helm != nil {
		opts.Helm.Lookup = c.lookup
	}
	return opts, nil
}

// resultOf is a render's outcome on the wire.
func resultOf(res *Result, err error) *wireResult {
	if err != nil {
		return &wireResult{Err: wireErrorOf(err)}
	}
	out := &wireResult{Digest: res.Digest, Kustomized: res.Kustomized, Chart: res.Chart, Sensitive: res.Sensitive, Values: res.Values}
	for _, o := range res.Objects {
		b, merr := json.Marshal(o.Object)
		if merr != nil {
			return &wireResult{Err: wireErrorOf(merr)}
		}
		out.Objects = append(out.Objects, b)
	}
	return out
}

func wireErrorOf(err error) *wireError {
	w := &wireError{Msg: err.Error()}
	var re *Error
	if errors.As(err, &re) {
		w.File, w.Document = re.File, re.Document
		if re.Err != nil {
			w.Msg = re.Err.Error()
		}
		var te timeoutError
		if errors.As(re.Err, &te) {
			w.Timeout = int64(te.after)
		}
	}
	for name, class := range errorClasses {
		if errors.Is(err, class) {
			w.Classes = append(w.Classes, name)
		}
	}
	return w
}

// result is the wire result as Render returns it.
func (w *wireResult) result() (*Result, error) {
	if w.Err != nil {
		return nil, w.Err.err()
	}
	res := &Result{Digest: w.Digest, Kustomized: w.Kustomized, Chart: w.Chart, Sensitive: w.Sensitive, Values: w.Values}
	res.Objects = make([]*unstructured.Unstructured, 0, len(w.Objects))
	for _, b := range w.Objects {
		m := map[string]any{}
		if err := utiljson.Unmarshal(b, &m); err != nil {
			return nil, &Error{Err: fmt.Errorf("%w: reading the worker's result: %w", ErrRenderWorker, err)}
		}
		res.Objects = append(res.Objects, &unstructured.Unstructured{Object: m})
	}
	return res, nil
}

func (w *wireError) err() error {
	if w.Timeout > 0 {
		return &Error{Err: timeoutError{after: time.Duration(w.Timeout)}}
	}
	ce := &classedError{msg: w.Msg}
	for _, name := range w.Classes {
		if c, ok := errorClasses[name]; ok {
			ce.classes = append(ce.classes, c)
		}
	}
	return &Error{File: w.File, Document: w.Document, Err: ce}
}

// classedError is an error that came back from a render worker: its text, and the
// classes errors.Is finds in it, as they were in the worker.
type classedError struct {
	msg     string
	classes []error
	// whole: the message says all, an *Error of it adds nothing ("render used more…").
	whole bool
}

func (e *classedError) Error() string { return e.msg }

func (e *classedError) Is(target error) bool {
	for _, c := range e.classes {
		if c == target {
			return true
		}
	}
	return false
}
