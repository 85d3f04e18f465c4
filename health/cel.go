package health

import (
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/ext"
	"k8s.io/apimachinery/pkg/runtime/schema"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
)

// ErrInvalidExpr is wrapped by the error for a CEL expression that does not compile or
// cannot yield a bool: a bad spec, not worth retrying until the spec changes.
var ErrInvalidExpr = errors.New("invalid health check expression")

const (
	// celCostLimit stops an expression that would run away (a comprehension over a huge
	// list, say) instead of letting it stall the wait.
	celCostLimit = 100_000
	// maxCachedPrograms bounds the program cache; past it the cache starts over.
	maxCachedPrograms = 1024
	// maxExprInMessage bounds how much of an expression a status message quotes.
	maxExprInMessage = 200
)

// celEnv is the one CEL environment every expression is compiled in: "self" is the
// object (dynamically typed), with the string, list, set and optional-type extensions.
var celEnv = sync.OnceValues(func() (*cel.Env, error) {
	return cel.NewEnv(
		cel.Variable("self", cel.DynType),
		cel.OptionalTypes(),
		ext.Strings(),
		ext.Lists(),
		ext.Sets(),
	)
})

// programs caches compiled expressions by their source, for the whole process: a
// SyncTarget's expressions are compiled once, not on every reconcile.
var programs = &programCache{m: map[string]programEntry{}}

type programCache struct {
	mu sync.Mutex
	m  map[string]programEntry
}

type programEntry struct {
	prg cel.Program
	err error
}

// get returns the program for src, compiling it on first use. The error (compile or
// type error) is cached too and says where in the expression it is.
func (c *programCache) get(src string) (cel.Program, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.m[src]; ok {
		return e.prg, e.err
	}
	prg, err := compileExpr(src)
	if len(c.m) >= maxCachedPrograms {
		clear(c.m)
	}
	c.m[src] = programEntry{prg: prg, err: err}
	return prg, err
}

// compileExpr compiles one boolean expression over "self".
func compileExpr(src string) (cel.Program, error) {
	env, err := celEnv()
	if err != nil {
		return nil, fmt.Errorf("creating the CEL environment: %w", err)
	}
	ast, iss := env.Compile(src)
	if iss.Err() != nil {
		msgs := make([]string, 0, len(iss.Errors()))
		for _, e := range iss.Errors() {
			msgs = append(msgs, fmt.Sprintf("%d:%d: %s", e.Location.Line(), e.Location.Column()+1, e.Message))
		}
		return nil, errors.New(strings.Join(msgs, "; "))
	}
	if t := ast.OutputType(); !t.IsExactType(cel.BoolType) && t.Kind() != types.DynKind {
		return nil, fmt.Errorf("must evaluate to a bool, not %s", t)
	}
	prg, err := env.Program(ast, cel.CostLimit(celCostLimit))
	if err != nil {
		return nil, err
	}
	return prg, nil
}

// exprRule is a CustomHealthCheck with its expressions compiled, in the order they are
// tried: failed, current, inProgress.
type exprRule struct {
	exprs []compiledExpr
}

type compiledExpr struct {
	field  string // the CustomHealthCheck field: failed, current or inProgress
	status Status // what the object is when the expression holds
	source string
	prg    cel.Program
}

// compileRules compiles every check, keyed by the kind it reads. A kind named twice, a
// missing current expression or an expression that does not compile is an error
// wrapping ErrInvalidExpr that names the kind and the field.
func compileRules(cache *programCache, checks []convergev1.CustomHealthCheck) (map[schema.GroupVersionKind]*exprRule, error) {
	if len(checks) == 0 {
		return nil, nil
	}
	rules := make(map[schema.GroupVersionKind]*exprRule, len(checks))
	var errs []error
	for _, hc := range checks {
		gv, err := schema.ParseGroupVersion(hc.APIVersion)
		if err != nil || hc.Kind == "" {
			errs = append(errs, fmt.Errorf("%w: %q %q: not an apiVersion and kind", ErrInvalidExpr, hc.APIVersion, hc.Kind))
			continue
		}
		gvk := gv.WithKind(hc.Kind)
		name := gv.String() + " " + hc.Kind
		if _, dup := rules[gvk]; dup {
			errs = append(errs, fmt.Errorf("%w: %s: kind listed twice", ErrInvalidExpr, name))
			continue
		}
		if strings.TrimSpace(hc.Current) == "" {
			errs = append(errs, fmt.Errorf("%w: %s: current: expression is required", ErrInvalidExpr, name))
			continue
		}
		rule := &exprRule{}
		for _, f := range []struct {
			field  string
			status Status
			src    string
		}{
			{"failed", Failed, hc.Failed},
			{"current", Current, hc.Current},
			{"inProgress", InProgress, hc.InProgress},
		} {
			if strings.TrimSpace(f.src) == "" {
				continue
			}
			prg, err := cache.get(f.src)
			if err != nil {
				errs = append(errs, fmt.Errorf("%w: %s: %s: %w", ErrInvalidExpr, name, f.field, err))
				continue
			}
			rule.exprs = append(rule.exprs, compiledExpr{field: f.field, status: f.status, source: f.src, prg: prg})
		}
		rules[gvk] = rule
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return rules, nil
}

// ValidateExprs compiles the expressions of checks and returns an error (wrapping
// ErrInvalidExpr) naming each kind and field that is wrong; the reconciler can call it to
// report a bad spec before applying anything. Compiled programs are cached.
func ValidateExprs(checks []convergev1.CustomHealthCheck) error {
	_, err := compileRules(programs, checks)
	return err
}

// evaluate reads the status of obj (the object as a map) from the rule: the first
// expression that holds wins; when none does the object is InProgress. An expression
// that cannot be evaluated (most often a field that is not there yet) does not hold,
// and the message says why.
func (r *exprRule) evaluate(obj map[string]any) (Status, string) {
	var errs []string
	for _, e := range r.exprs {
		holds, err := e.eval(obj)
		if err != nil {
			errs = append(errs, e.field+": "+err.Error())
			continue
		}
		if holds {
			return e.status, fmt.Sprintf("%s expression holds: %s", e.field, truncate(e.source, maxExprInMessage))
		}
	}
	msg := "no health expression holds yet"
	if len(errs) > 0 {
		msg += " (" + strings.Join(errs, "; ") + ")"
	}
	return InProgress, msg
}

func (e compiledExpr) eval(obj map[string]any) (bool, error) {
	out, _, err := e.prg.Eval(map[string]any{"self": obj})
	if err != nil {
		return false, err
	}
	b, ok := out.(types.Bool)
	if !ok {
		return false, fmt.Errorf("evaluated to %s, not bool", out.Type().TypeName())
	}
	return bool(b), nil
}
