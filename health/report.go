package health

import (
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"
)

const (
	// maxListed bounds how many objects an error message names, so that it fits a
	// status condition however many objects are stuck.
	maxListed = 5
	// maxMessage bounds one object's status message.
	maxMessage = 512
)

// verdict is what a set of statuses means for a wait.
type verdict int

const (
	// waiting: some objects are not Current and none has failed.
	waiting verdict = iota
	// allCurrent: every object is Current; the wait succeeds.
	allCurrent
	// anyFailed: an object has failed; the wait fails at once.
	anyFailed
)

func (v verdict) String() string {
	switch v {
	case allCurrent:
		return "allCurrent"
	case anyFailed:
		return "anyFailed"
	default:
		return "waiting"
	}
}

// decide says whether a wait over these statuses is over, and how.
func decide(objs []ObjectStatus) verdict {
	v := allCurrent
	for _, o := range objs {
		switch o.Status {
		case Current:
		case Failed:
			return anyFailed
		default:
			v = waiting
		}
	}
	return v
}

// notReady returns the statuses that are not Current, failed ones first, otherwise in
// their original order.
func notReady(objs []ObjectStatus) []ObjectStatus {
	var out []ObjectStatus
	for _, o := range objs {
		if o.Status != Current {
			out = append(out, o)
		}
	}
	slices.SortStableFunc(out, func(a, b ObjectStatus) int {
		switch {
		case a.Status == Failed && b.Status != Failed:
			return -1
		case a.Status != Failed && b.Status == Failed:
			return 1
		}
		return 0
	})
	return out
}

// formatError writes the message of a Wait failure: what went wrong, how many objects,
// then each object that is not ready with its status message, at most maxListed of them.
func formatError(e *Error) string {
	var b strings.Builder
	failed := 0
	for _, o := range e.NotReady {
		if o.Status == Failed {
			failed++
		}
	}
	switch e.Err {
	case ErrFailed:
		fmt.Fprintf(&b, "%s: %d of %d %s failed", ErrFailed, failed, e.Total, plural(e.Total, "object", "objects"))
		if others := len(e.NotReady) - failed; others > 0 {
			fmt.Fprintf(&b, ", %d not ready", others)
		}
	case ErrTimeout:
		fmt.Fprintf(&b, "%s after %s: %d of %d %s not ready", ErrTimeout, e.Timeout, len(e.NotReady), e.Total, plural(e.Total, "object", "objects"))
	default:
		fmt.Fprintf(&b, "%v: %d of %d %s not ready", e.Err, len(e.NotReady), e.Total, plural(e.Total, "object", "objects"))
	}
	for i, o := range e.NotReady {
		if i == maxListed {
			fmt.Fprintf(&b, "; and %d more", len(e.NotReady)-maxListed)
			break
		}
		if i == 0 {
			b.WriteString(": ")
		} else {
			b.WriteString("; ")
		}
		b.WriteString(o.String())
	}
	return b.String()
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// truncate shortens s to at most n runes, marking the cut with an ellipsis.
func truncate(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n-1]) + "…"
}
