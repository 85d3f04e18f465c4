package category

import (
	"errors"
	"fmt"
	"testing"
)

var (
	errStall  = New(Stall, "", "invalid source")
	errReason = New(FailRevision, "DecryptionFailed", "decryption failed")
)

// typed is an error type that says its category itself.
type typed struct{}

func (typed) Error() string                       { return "unreachable" }
func (typed) FailureCategory() (Category, string) { return Retry, "" }

func TestOf(t *testing.T) {
	for _, tc := range []struct {
		name     string
		err      error
		category Category
		reason   string
	}{
		{name: "nil", err: nil},
		{name: "an error that says nothing", err: errors.New("boom")},
		{name: "a sentinel", err: errStall, category: Stall},
		{name: "a sentinel wrapped with %w", err: fmt.Errorf("x: %w", errStall), category: Stall},
		{name: "a sentinel with its reason", err: fmt.Errorf("x: %w", errReason), category: FailRevision, reason: "DecryptionFailed"},
		{name: "retried outside, reason inside", err: Wrap(Retry, fmt.Errorf("%w: reading: %w", errReason, errors.New("not found"))),
			category: Retry, reason: "DecryptionFailed"},
		{name: "the first of several wrapped", err: fmt.Errorf("%w and %w", errors.New("plain"), errStall), category: Stall},
		{name: "a type that says its category", err: fmt.Errorf("dial: %w", typed{}), category: Retry},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, reason := Of(tc.err)
			if c != tc.category || reason != tc.reason {
				t.Fatalf("Of = %v, %q; want %v, %q", c, reason, tc.category, tc.reason)
			}
			if tc.err != nil && tc.category != Unknown && !Is(tc.err, tc.category) {
				t.Fatalf("Is(%v) = false", tc.category)
			}
		})
	}
}

func TestWrapReadsAsTheError(t *testing.T) {
	inner := errors.New("inner")
	w := Wrap(Retry, inner)
	if w.Error() != "inner" || !errors.Is(w, inner) {
		t.Fatalf("Wrap: %q, Is inner %v", w.Error(), errors.Is(w, inner))
	}
	if Wrap(Retry, nil) != nil {
		t.Fatal("Wrap(nil) is not nil")
	}
	if !errors.Is(fmt.Errorf("x: %w", errStall), errStall) {
		t.Fatal("a sentinel is not found by errors.Is")
	}
}
