package remote

import (
	"bytes"
	"io"
	"strings"
)

// The roles of the value that follows a key kindCheck looks at.
const (
	roleNone    = iota
	roleKind    // an object's kind
	roleVersion // an object's apiVersion
	roleType    // a watch event's type
	roleObject  // a watch event's object
)

const (
	// maxCaptured bounds the strings kindCheck keeps: the longest apiVersion.
	maxCaptured = 256
	// maxDepth bounds the nesting of a JSON answer (sigs.k8s.io/json refuses deeper).
	maxDepth = 10000
	// maxOddKey is the longest key, with an escape or a byte beyond ASCII, that could
	// decode or fold to "kind" or "apiVersion".
	maxOddKey = 48
)

// watchTypes are the types of a watch event.
var watchTypes = map[string]bool{"ADDED": true, "MODIFIED": true, "DELETED": true, "BOOKMARK": true, "ERROR": true}

// kindCheck passes a JSON answer through while checking, as it is read, that it holds
// Kubernetes API objects: each top-level value (each event's object, in a watch) an object
// with a kind (and, in a watch, an apiVersion) of plain names, and each watch event of a
// known type. client-go's decoders quote in their errors an object without a kind or
// apiVersion (all of it), a kind, an apiVersion or an event type that they do not know; an
// answer that would have them quote it fails its read instead, together with the chunk it
// was found in, so that no decoder ever sees the offending object whole.
type kindCheck struct {
	body   io.ReadCloser
	watch  bool
	notAPI error
	fail   error // notAPI once the answer is found not to be API objects

	stack      []byte // the open containers, '{' or '['
	expectKey  bool   // the next string of the open object is a key
	pending    int    // the role of the value after the last key
	checking   bool   // an object whose kind is checked is open, at depth checkDepth
	sawKind    bool
	sawVersion bool

	inString, escaped bool
	isKey             bool
	role              int    // the role of the string value being read
	text              []byte // the string being read, when it is a key or value of a role
	capture           bool
	odd               bool // it has an escape or a byte beyond ASCII
	long              bool // it is longer than maxCaptured
}

// Read implements io.Reader.
func (k *kindCheck) Read(p []byte) (int, error) {
	if k.fail != nil {
		return 0, k.fail
	}
	n, err := k.body.Read(p)
	if !k.scan(p[:n]) {
		return 0, k.fail
	}
	return n, err
}

// Close implements io.Closer.
func (k *kindCheck) Close() error { return k.body.Close() }

func (k *kindCheck) refuse() { k.fail = k.notAPI }

// checkDepth is the depth of the objects whose kind is checked.
func (k *kindCheck) checkDepth() int {
	if k.watch {
		return 2
	}
	return 1
}

func (k *kindCheck) top() byte {
	if len(k.stack) == 0 {
		return 0
	}
	return k.stack[len(k.stack)-1]
}

// scan checks the next bytes of the answer, and reports whether it may still be API
// objects.
func (k *kindCheck) scan(b []byte) bool {
	for i := 0; i < len(b) && k.fail == nil; i++ {
		if !k.inString {
			k.structural(b[i])
			continue
		}
		if !k.capture && !k.escaped { // skip to the string's next quote or backslash
			j := bytes.IndexAny(b[i:], `"\`)
			if j < 0 {
				break
			}
			i += j
		}
		k.stringByte(b[i])
	}
	return k.fail == nil
}

// structural takes a byte outside strings.
func (k *kindCheck) structural(c byte) {
	switch c {
	case ' ', '\t', '\n', '\r':
	case ':':
		k.expectKey = false
	case '"':
		k.startString()
	case '{', '[':
		k.openValue(c)
		if len(k.stack) == maxDepth {
			k.refuse()
			return
		}
		k.stack = append(k.stack, c)
		k.expectKey = c == '{'
	case '}', ']':
		k.close()
	case ',':
		k.expectKey = k.top() == '{'
	default: // a number, true, false or null: only its first byte finds a role
		k.openValue(c)
	}
}

// openValue starts a value whose first byte is c, in the role the last key gave it.
func (k *kindCheck) openValue(c byte) {
	role := k.pending
	k.pending = roleNone
	switch {
	case len(k.stack) == 0: // an object, or a watch event
		if c != '{' {
			k.refuse()
			return
		}
		if !k.watch {
			k.checking, k.sawKind, k.sawVersion = true, false, false
		}
	case role == roleObject:
		if c != '{' {
			k.refuse()
			return
		}
		k.checking, k.sawKind, k.sawVersion = true, false, false
	case role != roleNone:
		if c != '"' {
			k.refuse()
			return
		}
		k.role = role
	}
}

// close ends the open container.
func (k *kindCheck) close() {
	if len(k.stack) == 0 {
		k.refuse()
		return
	}
	if k.checking && len(k.stack) == k.checkDepth() {
		if !k.sawKind || (k.watch && !k.sawVersion) {
			k.refuse()
			return
		}
		k.checking = false
	}
	k.stack = k.stack[:len(k.stack)-1]
	k.expectKey = false
}

// startString starts a string: a key, or a value.
func (k *kindCheck) startString() {
	k.inString, k.escaped, k.odd, k.long = true, false, false, false
	k.text = k.text[:0]
	k.role = roleNone
	k.isKey = k.top() == '{' && k.expectKey
	if !k.isKey {
		k.openValue('"')
		k.capture = k.role != roleNone
		return
	}
	depth := len(k.stack)
	k.capture = (k.checking && depth == k.checkDepth()) || (k.watch && depth == 1)
}

// stringByte takes a byte of a string.
func (k *kindCheck) stringByte(c byte) {
	switch {
	case k.escaped:
		k.escaped = false
		k.keep(c)
	case c == '\\':
		k.escaped, k.odd = true, true
	case c == '"':
		k.inString = false
		k.endString()
	default:
		k.keep(c)
	}
}

func (k *kindCheck) keep(c byte) {
	if !k.capture {
		return
	}
	if c >= 0x80 {
		k.odd = true
	}
	if len(k.text) == maxCaptured {
		k.long = true
		return
	}
	k.text = append(k.text, c)
}

// endString ends a string.
func (k *kindCheck) endString() {
	if !k.capture {
		return
	}
	if k.isKey {
		k.endKey()
		return
	}
	v := string(k.text)
	switch k.role {
	case roleKind:
		k.sawKind = true
		if k.odd || !plainName(v, 63) {
			k.refuse()
		}
	case roleVersion:
		k.sawVersion = true
		if k.odd || k.long || !plainName(v, 253) {
			k.refuse()
		}
	case roleType:
		if !watchTypes[v] {
			k.refuse()
		}
	}
}

// endKey gives the value after a key its role, and refuses keys that decoders would take
// for one of the keys checked (an escape, or another case).
func (k *kindCheck) endKey() {
	key := string(k.text)
	plain := !k.odd && !k.long
	event := k.watch && len(k.stack) == 1
	switch {
	case plain && event && key == "type":
		k.pending = roleType
	case plain && event && key == "object":
		k.pending = roleObject
	case plain && !event && key == "kind":
		k.pending = roleKind
	case plain && !event && key == "apiVersion":
		k.pending = roleVersion
	case k.odd && !k.long && len(key) <= maxOddKey,
		strings.EqualFold(key, "kind"), strings.EqualFold(key, "apiVersion"):
		k.refuse()
	}
}

// plainName reports whether s is a kind or an apiVersion of at most max bytes: letters,
// digits, '.', '-', '_' and '/'.
func plainName(s string, max int) bool {
	if s == "" || len(s) > max {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !nameByte(s[i]) {
			return false
		}
	}
	return true
}

func nameByte(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	}
	return strings.IndexByte("._-/", c) >= 0
}
