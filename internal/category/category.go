// Package category lets an error say what it means for the SyncTarget it happened to —
// fail the revision, wait for the source, retry, or stall — so that the reconciler reads
// that from the error and need not know the package it came from. A package marks its
// sentinels with New, wraps an error with Wrap, or gives an error type a
// FailureCategory method; the reconciler asks Of.
package category

// Category is what follows a failure.
type Category int

const (
	// Unknown: the error says nothing; the step it happened in decides.
	Unknown Category = iota
	// FailRevision: the revision is at fault and will not mend; it is tried again when the
	// source moves, the spec changes or a user asks.
	FailRevision
	// WaitSource: the source could not be read; the poller wakes the SyncTarget when it
	// answers again.
	WaitSource
	// Retry: a passing failure, not the revision's; retried with backoff.
	Retry
	// Stall: the spec cannot work as written; looked at again at its interval.
	Stall
)

// String names the category.
func (c Category) String() string {
	switch c {
	case FailRevision:
		return "fail the revision"
	case WaitSource:
		return "wait for the source"
	case Retry:
		return "retry"
	case Stall:
		return "stall"
	}
	return "unknown"
}

// Categorized is an error that says its category, and the reason a status reports it
// with ("" leaves it to the step it happened in).
type Categorized interface {
	error
	FailureCategory() (Category, string)
}

// Error is an error with a category and a reason: a sentinel (New) or a wrapper (Wrap).
type Error struct {
	category Category
	reason   string
	msg      string
	err      error
}

// New returns a sentinel error of category c whose status reason is reason ("" for the
// step's) and whose message is msg.
func New(c Category, reason, msg string) *Error {
	return &Error{category: c, reason: reason, msg: msg}
}

// Wrap gives err category c; it reads and unwraps as err. Nil stays nil.
func Wrap(c Category, err error) error {
	return WrapReason(c, "", err)
}

// WrapReason gives err category c and the status reason reason; it reads and unwraps as
// err. Nil stays nil.
func WrapReason(c Category, reason string, err error) error {
	if err == nil {
		return nil
	}
	return &Error{category: c, reason: reason, err: err}
}

func (e *Error) Error() string {
	if e.err != nil {
		return e.err.Error()
	}
	return e.msg
}

// Unwrap returns the wrapped error, nil for a sentinel.
func (e *Error) Unwrap() error { return e.err }

// FailureCategory is the category and reason e carries.
func (e *Error) FailureCategory() (Category, string) { return e.category, e.reason }

// Of returns the category of err — the first one its chain says, outermost first — and
// the first reason it says, which may come from deeper in the chain (a sentinel wrapped
// by an error that only retries it). Unknown and "" when it says none.
func Of(err error) (Category, string) {
	c, reason := Unknown, ""
	walk(err, func(e Categorized) bool {
		ec, er := e.FailureCategory()
		if c == Unknown {
			c = ec
		}
		if reason == "" {
			reason = er
		}
		return c != Unknown && reason != ""
	})
	return c, reason
}

// walk calls visit on every Categorized error of err's tree, depth first in the order
// errors.As looks, until visit returns true.
func walk(err error, visit func(Categorized) bool) bool {
	for err != nil {
		if c, ok := err.(Categorized); ok && visit(c) {
			return true
		}
		switch u := err.(type) {
		case interface{ Unwrap() []error }:
			for _, e := range u.Unwrap() {
				if walk(e, visit) {
					return true
				}
			}
			return false
		case interface{ Unwrap() error }:
			err = u.Unwrap()
		default:
			return false
		}
	}
	return false
}

// Is reports whether err's category is c.
func Is(err error, c Category) bool {
	got, _ := Of(err)
	return got == c
}
