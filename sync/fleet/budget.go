package fleet

import (
	"context"
	"errors"
	"fmt"
	"time"

	"k8s.io/utils/clock"
)

// The bounds of the template work of one set: whoever may create a set in a namespace
// writes its template, so what rendering it costs the daemon is bounded before anything
// rendered is validated.
const (
	// MaxRenderedBytes bounds one rendered SyncTarget: its strings, map keys and other
	// values, counted as their JSON text. A SyncTarget spec is a source, a path and a few
	// options: a few KiB, inline Helm values included.
	MaxRenderedBytes = 256 << 10
	// MaxSetRenderedBytes bounds the SyncTargets one set renders, together.
	MaxSetRenderedBytes = 4 << 20
	// producedFactor bounds what the template functions of one render return and read, as
	// a multiple of MaxSetRenderedBytes: a value may go through a few functions before it
	// is written.
	producedFactor = 8
	// MaxTemplateWork bounds the nodes of the template (text, actions, commands, arguments
	// and field names) times the parameter sets: what a render walks, functions aside.
	MaxTemplateWork = 4_000_000
	// RenderTimeout bounds the template work of one reconcile of a set.
	RenderTimeout = 10 * time.Second
)

// Limits configure the deadline of the template work of one reconcile of a set.
type Limits struct {
	// Timeout is how long the render of one set may take; RenderTimeout when zero.
	Timeout time.Duration
	// Clock measures it (default: the real clock).
	Clock clock.PassiveClock
}

// ErrRenderDeadline is the error of a render that ran out of time.
var ErrRenderDeadline = errors.New("rendering the template took too long")

// boundError is a bound of the render passed: it says which, and the set is
// TemplateInvalid.
type boundError struct{ msg string }

func (e *boundError) Error() string { return e.msg }

var (
	errTargetTooLarge = &boundError{fmt.Sprintf("the rendered SyncTarget exceeds %d bytes", MaxRenderedBytes)}
	errSetTooLarge    = &boundError{fmt.Sprintf("the SyncTargets of the set exceed %d bytes in all", MaxSetRenderedBytes)}
)

// budget is one render of a set: the templates parsed once for all its parameter sets,
// and what the render may still spend, shared by them.
type budget struct {
	ctx      context.Context
	clock    clock.PassiveClock
	deadline time.Time
	timeout  time.Duration
	// bytes the rendered SyncTargets may still add up to.
	bytes int
	// produced is what template functions may still return and read, in bytes.
	produced int
	// nodes the templates run so far have (see checkTree).
	nodes  int
	parsed map[string]parsedTemplate
}

func newBudget(ctx context.Context, l Limits) *budget {
	b := &budget{ctx: ctx, clock: l.Clock, timeout: l.Timeout, bytes: MaxSetRenderedBytes,
		produced: producedFactor * MaxSetRenderedBytes, parsed: map[string]parsedTemplate{}}
	if b.clock == nil {
		b.clock = clock.RealClock{}
	}
	if b.timeout <= 0 {
		b.timeout = RenderTimeout
	}
	b.deadline = b.clock.Now().Add(b.timeout)
	return b
}

// check stops the render once its context is done or its deadline has passed. It runs
// before every template string, every function call and every write of a template.
func (b *budget) check() error {
	if err := b.ctx.Err(); err != nil {
		return err
	}
	if !b.clock.Now().Before(b.deadline) {
		return fmt.Errorf("%w: stopped after %s", ErrRenderDeadline, b.timeout)
	}
	return nil
}

// charge counts n bytes a function reads or returns: past the render's share, the render
// stops.
func (b *budget) charge(name string, n int) error {
	if err := b.check(); err != nil {
		return err
	}
	b.produced -= n
	if b.produced < 0 {
		return &boundError{fmt.Sprintf("%s: the template functions returned and read more than %d bytes in all",
			name, producedFactor*MaxSetRenderedBytes)}
	}
	return nil
}

// result counts a function's result: larger than a SyncTarget may be, it is refused.
func (b *budget) result(name, s string) (string, error) {
	if len(s) > MaxRenderedBytes {
		return "", &boundError{fmt.Sprintf("%s: the result would exceed %d bytes", name, MaxRenderedBytes)}
	}
	return s, b.charge(name, len(s))
}

// unary guards a function of one string.
func (b *budget) unary(name string, f func(string) string) func(any) (string, error) {
	return func(v any) (string, error) {
		s := str(v)
		if err := b.charge(name, len(s)); err != nil {
			return "", err
		}
		return b.result(name, f(s))
	}
}

// binary guards a function of a string argument and the piped value.
func (b *budget) binary(name string, f func(arg, s string) string) func(string, any) (string, error) {
	return func(arg string, v any) (string, error) {
		s := str(v)
		if err := b.charge(name, len(arg)+len(s)); err != nil {
			return "", err
		}
		return b.result(name, f(arg, s))
	}
}

func (b *budget) replace(old, replacement string, v any) (string, error) {
	s := str(v)
	if err := b.charge("replace", len(old)+len(replacement)+len(s)); err != nil {
		return "", err
	}
	out, err := replace(old, replacement, s)
	if err != nil {
		return "", err
	}
	return b.result("replace", out)
}

func (b *budget) trunc(n int, v any) (string, error) {
	s := str(v)
	if err := b.charge("trunc", len(s)); err != nil {
		return "", err
	}
	return b.result("trunc", trunc(n, s))
}

func (b *budget) eq(x any, ys ...any) (bool, error) {
	n := len(str(x))
	for _, y := range ys {
		n += len(str(y))
	}
	if err := b.charge("eq", n); err != nil {
		return false, err
	}
	return equal(x, ys...), nil
}

// order guards a comparison.
func (b *budget) order(name string, holds func(int) bool) func(x, y any) (bool, error) {
	return func(x, y any) (bool, error) {
		if err := b.charge(name, len(str(x))+len(str(y))); err != nil {
			return false, err
		}
		c, err := compare(x, y)
		return holds(c), err
	}
}

// checkWork refuses a template whose nodes, run for every parameter set, pass
// MaxTemplateWork: nodes is what one parameter set ran.
func checkWork(nodes, params int) error {
	if nodes*params > MaxTemplateWork {
		return &boundError{fmt.Sprintf("the template has %d nodes (text, actions, arguments, fields): run for %d parameter sets, %d in all, more than %d",
			nodes, params, nodes*params, MaxTemplateWork)}
	}
	return nil
}
