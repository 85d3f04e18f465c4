package helm

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync/atomic"
	"text/template"

	"github.com/Masterminds/sprig/v3"
)

// maxSequence bounds the elements of until, untilStep and seq.
const maxSequence = 1 << 20

// producedFactor bounds the bytes returned by template functions during one render, as a
// multiple of Options.MaxOutputBytes: nested includes may re-indent the same text several
// times, so a chart's functions can return more than it outputs (podinfo's and ingress-nginx's
// return less than their output).
const producedFactor = 16

// helmOwned are the template functions Helm's engine defines or removes itself: the guard
// leaves them as Helm has them (env, expandenv and getHostByName stay disabled).
var helmOwned = map[string]bool{
	"env": true, "expandenv": true, "getHostByName": true, "fail": true, "required": true,
	"include": true, "tpl": true, "lookup": true,
	"toToml": true, "mustToToml": true, "fromToml": true, "toYaml": true, "mustToYaml": true,
	"toYamlPretty": true, "fromYaml": true, "fromYamlArray": true, "toJson": true,
	"mustToJson": true, "fromJson": true, "fromJsonArray": true,
}

// errStopped is raised inside template functions once the render is over (deadline) or a
// bound is exceeded; text/template turns it into the execution's error.
var errStopped = errors.New("render stopped")

// guard makes a render's template functions answer to its bounds: each sprig function first
// checks that the render is still wanted, functions whose output grows with an argument
// (repeat, indent, until, rand...) check it before they run, and lookup is counted.
type guard struct {
	ctx      context.Context
	opts     Options
	lookups  atomic.Int64
	produced atomic.Int64
	exceeded atomic.Pointer[string]
}

func newGuard(ctx context.Context, opts Options) *guard {
	return &guard{ctx: ctx, opts: opts}
}

func (g *guard) funcs() template.FuncMap {
	fm := template.FuncMap{}
	for name, fn := range sprig.TxtFuncMap() {
		if helmOwned[name] {
			continue
		}
		fm[name] = g.wrap(name, fn)
	}
	fm["lookup"] = g.lookup
	return fm
}

// stop records why the render stops and raises errStopped in the running template.
func (g *guard) stop(reason string) {
	g.exceeded.CompareAndSwap(nil, &reason)
	panic(fmt.Errorf("%w: %s", errStopped, reason))
}

func (g *guard) wrap(name string, fn any) any {
	v := reflect.ValueOf(fn)
	t := v.Type()
	check := sizeChecks[name]
	return reflect.MakeFunc(t, func(args []reflect.Value) []reflect.Value {
		if err := g.ctx.Err(); err != nil {
			g.stop("the render deadline passed")
		}
		if check != nil {
			if reason := check(args, g.opts.MaxOutputBytes); reason != "" {
				g.stop(name + ": " + reason)
			}
		}
		var out []reflect.Value
		if t.IsVariadic() {
			out = v.CallSlice(args)
		} else {
			out = v.Call(args)
		}
		if len(out) > 0 && out[0].Kind() == reflect.String {
			g.count(name, int64(out[0].Len()))
		}
		return out
	}).Interface()
}

// count adds a function's string result to what the render has produced: one result larger
// than MaxOutputBytes, or all results together larger than producedFactor times it, stop the
// render (what functions return is a bound on what a loop of them can write).
func (g *guard) count(name string, n int64) {
	limit := g.opts.MaxOutputBytes
	if n > limit {
		g.stop(fmt.Sprintf("%s: result larger than %d bytes", name, limit))
	}
	if g.produced.Add(n) > producedFactor*limit {
		g.stop(fmt.Sprintf("template functions returned more than %d bytes in all (%d times the output bound)", producedFactor*limit, producedFactor))
	}
}

func (g *guard) lookup(apiVersion, kind, namespace, name string) (map[string]any, error) {
	if n := g.lookups.Add(1); n > int64(g.opts.MaxLookups) {
		reason := fmt.Sprintf("more than %d lookup calls", g.opts.MaxLookups)
		g.exceeded.CompareAndSwap(nil, &reason)
		return nil, fmt.Errorf("%w: %s", errStopped, reason)
	}
	if g.opts.Lookup == nil {
		return map[string]any{}, nil
	}
	obj, err := g.opts.Lookup(g.ctx, apiVersion, kind, namespace, name)
	if err != nil {
		return nil, fmt.Errorf("lookup %s %s %s/%s: %w", apiVersion, kind, namespace, name, err)
	}
	if obj == nil {
		obj = map[string]any{}
	}
	return obj, nil
}

// maxErrorLen bounds the length of a render error: Helm's engine nests the message of every
// include level (a recursion gives hundreds of kilobytes), the middle is elided.
const maxErrorLen = 4096

type shortError struct {
	msg string
	err error
}

func (e *shortError) Error() string { return e.msg }
func (e *shortError) Unwrap() error { return e.err }

func shorten(err error) error {
	s := err.Error()
	if len(s) <= maxErrorLen {
		return err
	}
	half := maxErrorLen / 2
	msg := s[:half] + fmt.Sprintf(" … (%d bytes elided) … ", len(s)-2*half) + s[len(s)-half:]
	return &shortError{msg: strings.ToValidUTF8(msg, ""), err: err}
}

// explain turns the engine's error into one that says which bound stopped the render.
func (g *guard) explain(err error) error {
	err = shorten(err)
	if reason := g.exceeded.Load(); reason != nil {
		return fmt.Errorf("%w: %s: %w", ErrRenderBound, *reason, err)
	}
	if g.ctx.Err() != nil {
		return fmt.Errorf("%w: the render deadline passed: %w", ErrRenderBound, err)
	}
	return err
}

func (g *guard) checkTotal(files map[string]string) error {
	var n int64
	for _, s := range files {
		n += int64(len(s))
	}
	if n > g.opts.MaxOutputBytes {
		return fmt.Errorf("%w: rendered manifests are %d bytes, more than %d", ErrRenderBound, n, g.opts.MaxOutputBytes)
	}
	return nil
}

// sizeChecks refuse, before they run, calls whose result or allocation would exceed the bound.
var sizeChecks = map[string]func(args []reflect.Value, limit int64) string{
	"repeat":       checkRepeat,
	"indent":       checkIndent,
	"nindent":      checkIndent,
	"until":        checkCounts,
	"untilStep":    checkCounts,
	"seq":          checkCounts,
	"randAlpha":    checkCounts,
	"randAlphaNum": checkCounts,
	"randAscii":    checkCounts,
	"randNumeric":  checkCounts,
}

func intArg(v reflect.Value) (int64, bool) {
	switch v.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return v.Int(), true
	default:
		return 0, false
	}
}

// ints lists the integer arguments, variadic ones included.
func ints(args []reflect.Value) []int64 {
	var out []int64
	for _, a := range args {
		if a.Kind() == reflect.Slice {
			for i := range a.Len() {
				if n, ok := intArg(a.Index(i)); ok {
					out = append(out, n)
				}
			}
			continue
		}
		if n, ok := intArg(a); ok {
			out = append(out, n)
		}
	}
	return out
}

func checkCounts(args []reflect.Value, _ int64) string {
	for _, n := range ints(args) {
		if n > maxSequence || n < -maxSequence {
			return fmt.Sprintf("%d is beyond the bound of %d", n, maxSequence)
		}
	}
	return ""
}

func checkRepeat(args []reflect.Value, limit int64) string {
	if len(args) != 2 || args[1].Kind() != reflect.String {
		return ""
	}
	n, _ := intArg(args[0])
	if n > 0 && n*int64(args[1].Len()+1) > limit {
		return fmt.Sprintf("result would be larger than %d bytes", limit)
	}
	return ""
}

func checkIndent(args []reflect.Value, limit int64) string {
	if len(args) != 2 || args[1].Kind() != reflect.String {
		return ""
	}
	n, _ := intArg(args[0])
	s := args[1].String()
	if n > 0 && n*int64(strings.Count(s, "\n")+1)+int64(len(s)) > limit {
		return fmt.Sprintf("result would be larger than %d bytes", limit)
	}
	return ""
}
