package notify

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"text/template"
	"text/template/parse"
	"time"
)

// A spec.summary template is written by whoever may create a Notifier and executed by the
// daemon, in the worker shared by none but that Notifier, yet text/template cannot be
// interrupted: a template that never ends would hold its worker, and with it the
// Notifier's deletion and the daemon's shutdown, for ever. So a summary is confined to
// what provably ends, and checked twice, when the Notifier is validated and again before
// each execution:
//
//   - no range, no template or block invocation, no define: nothing executes a node more
//     than once (if and with choose one branch), so an execution takes at most as many
//     steps as the template has nodes, and the CRD bounds the template to 4096 bytes;
//   - with takes one field of the message; fields are the message's own (.Event, $.Target,
//     ...), one level deep, no method and no chain;
//   - functions are the comparisons and logic (eq, ne, lt, le, gt, ge, and, or, not), len,
//     index, slice and the string makers print, printf, println, html, js and urlquery;
//     the string makers refuse inputs or results over maxTemplateOutput and printf refuses
//     a width or precision over maxFormatWidth, so no value, and no step, grows without
//     bound (call is refused);
//   - and a budget (maxSummarySteps function calls and writes, summaryTimeout) stops the
//     execution at its next step should it ever run longer.

// maxTemplateOutput bounds what a summary template may produce, and every value a
// function of it makes.
const maxTemplateOutput = 64 << 10

// maxFormatWidth bounds a printf width or precision (fmt allows a million).
const maxFormatWidth = 100

// maxSummarySteps bounds the function calls and writes of one execution; a template the
// CRD accepts (4096 bytes) cannot take as many.
const maxSummarySteps = 10000

// summaryTimeout bounds one execution of a summary template.
const summaryTimeout = time.Second

// summaryFields are the fields of Message a summary may name.
var summaryFields = func() map[string]bool {
	fields := map[string]bool{}
	t := reflect.TypeFor[Message]()
	for i := range t.NumField() {
		fields[t.Field(i).Name] = true
	}
	return fields
}()

// summaryFuncs are the functions a summary may call; the string makers are replaced by
// bounded ones (see budget.funcs).
var summaryFuncs = map[string]bool{
	"and": true, "or": true, "not": true, "eq": true, "ne": true, "lt": true, "le": true, "gt": true, "ge": true,
	"len": true, "index": true, "slice": true,
	"print": true, "printf": true, "println": true, "html": true, "js": true, "urlquery": true,
}

// summary is a checked spec.summary template and the budget of its executions.
type summary struct {
	t      *template.Template
	budget *budget
}

// parseSummary parses and checks a spec.summary template; an empty one is the default
// text (nil).
func parseSummary(s string) (*summary, error) {
	if s == "" {
		return nil, nil
	}
	b := &budget{}
	t, err := template.New("summary").Option("missingkey=error").Funcs(b.funcs()).Parse(s)
	if err != nil {
		return nil, fmt.Errorf("spec.summary: %w", err)
	}
	if err := checkSummary(t); err != nil {
		return nil, fmt.Errorf("spec.summary: %w", err)
	}
	return &summary{t: t, budget: b}, nil
}

// text is the message text of m: the template's output, or the default text. The
// execution ends at its next step once ctx ends, summaryTimeout passed or its steps ran out.
func (s *summary) text(ctx context.Context, m Message) (string, error) {
	if s == nil {
		return cut(defaultText(m), maxText), nil
	}
	ctx, cancel := context.WithTimeout(ctx, summaryTimeout)
	defer cancel()
	s.budget.start(ctx)
	b := boundedBuffer{budget: s.budget}
	if err := s.t.Execute(&b, m); err != nil {
		return "", fmt.Errorf("spec.summary: %w", err)
	}
	return cut(strings.TrimSpace(b.String()), maxText), nil
}

// checkSummary refuses what could make an execution long: see the comment at the top.
func checkSummary(t *template.Template) error {
	if len(t.Templates()) > 1 {
		return errors.New("define and block are not allowed")
	}
	return checkNode(t.Root)
}

// checkNode checks one node of the template's tree and those under it.
func checkNode(n parse.Node) error {
	switch n := n.(type) {
	case *parse.ListNode:
		if n == nil {
			return nil
		}
		for _, c := range n.Nodes {
			if err := checkNode(c); err != nil {
				return err
			}
		}
		return nil
	case *parse.TextNode, *parse.CommentNode:
		return nil
	case *parse.ActionNode:
		return checkPipe(n.Pipe)
	case *parse.IfNode:
		return checkBranch(&n.BranchNode)
	case *parse.WithNode:
		if !isMessageField(n.Pipe) {
			return fmt.Errorf("%s: with takes one field of the message, e.g. {{with .Message}}", n)
		}
		return checkBranch(&n.BranchNode)
	case *parse.RangeNode:
		return fmt.Errorf("range is not allowed (the message has no list to range over): %s", cut(n.String(), 80))
	case *parse.TemplateNode:
		return fmt.Errorf("%s: template and block are not allowed", n)
	}
	return fmt.Errorf("%s is not allowed", cut(n.String(), 80))
}

// checkBranch checks an if or with: its pipeline and both lists.
func checkBranch(b *parse.BranchNode) error {
	if err := checkPipe(b.Pipe); err != nil {
		return err
	}
	if err := checkNode(b.List); err != nil {
		return err
	}
	return checkNode(b.ElseList)
}

// checkPipe checks every argument of every command of a pipeline.
func checkPipe(p *parse.PipeNode) error {
	if p == nil {
		return nil
	}
	for _, c := range p.Cmds {
		for _, a := range c.Args {
			if err := checkArg(a); err != nil {
				return err
			}
		}
	}
	return nil
}

// checkArg allows constants, dot, variables, the message's own fields and the functions of
// summaryFuncs.
func checkArg(n parse.Node) error {
	switch n := n.(type) {
	case *parse.DotNode, *parse.NilNode, *parse.BoolNode, *parse.NumberNode, *parse.StringNode:
		return nil
	case *parse.PipeNode:
		return checkPipe(n)
	case *parse.FieldNode:
		if len(n.Ident) == 1 && summaryFields[n.Ident[0]] {
			return nil
		}
	case *parse.VariableNode:
		if len(n.Ident) == 1 || (n.Ident[0] == "$" && len(n.Ident) == 2 && summaryFields[n.Ident[1]]) {
			return nil
		}
	case *parse.IdentifierNode:
		if summaryFuncs[n.Ident] {
			return nil
		}
		return fmt.Errorf("function %q is not allowed", n.Ident)
	}
	return fmt.Errorf("%s: only the message's own fields may be named (.Event, .Namespace, .Target, .Revision, "+
		".Commit, .Message, .Created, .Configured, .Deleted)", cut(n.String(), 80))
}

// isMessageField says whether a pipeline is one field of the message (.Message, $.Commit).
func isMessageField(p *parse.PipeNode) bool {
	if p == nil || len(p.Decl) > 0 || len(p.Cmds) != 1 || len(p.Cmds[0].Args) != 1 {
		return false
	}
	switch a := p.Cmds[0].Args[0].(type) {
	case *parse.FieldNode:
		return len(a.Ident) == 1 && summaryFields[a.Ident[0]]
	case *parse.VariableNode:
		return len(a.Ident) == 2 && a.Ident[0] == "$" && summaryFields[a.Ident[1]]
	}
	return false
}

// budget stops an execution at its next step (a function call or a write) once its
// context ended or its steps ran out.
type budget struct {
	ctx   context.Context
	steps int
}

func (b *budget) start(ctx context.Context) {
	b.ctx, b.steps = ctx, maxSummarySteps
}

// step takes one step, or says why the execution must stop.
func (b *budget) step() error {
	if b.ctx == nil {
		return errors.New("executed without a budget")
	}
	if err := b.ctx.Err(); err != nil {
		return fmt.Errorf("stopped: %w", err)
	}
	if b.steps--; b.steps < 0 {
		return fmt.Errorf("stopped after %d steps", maxSummarySteps)
	}
	return nil
}

// funcs replaces text/template's string makers with bounded ones that take a step each.
func (b *budget) funcs() template.FuncMap {
	return template.FuncMap{
		"print":    b.bounded(fmt.Sprint),
		"println":  b.bounded(fmt.Sprintln),
		"html":     b.bounded(template.HTMLEscaper),
		"js":       b.bounded(template.JSEscaper),
		"urlquery": b.bounded(template.URLQueryEscaper),
		"printf": func(format string, args ...any) (string, error) {
			if err := checkFormat(format); err != nil {
				return "", err
			}
			return b.bounded(func(args ...any) string { return fmt.Sprintf(format, args...) })(args...)
		},
	}
}

// bounded wraps a string maker: a step, inputs and result at most maxTemplateOutput.
func (b *budget) bounded(f func(...any) string) func(...any) (string, error) {
	return func(args ...any) (string, error) {
		if err := b.step(); err != nil {
			return "", err
		}
		size := 0
		for _, a := range args {
			size += argSize(a)
		}
		if size > maxTemplateOutput {
			return "", fmt.Errorf("arguments longer than %d bytes", maxTemplateOutput)
		}
		s := f(args...)
		if len(s) > maxTemplateOutput {
			return "", fmt.Errorf("a value longer than %d bytes", maxTemplateOutput)
		}
		return s, nil
	}
}

// argSize is how much text an argument can turn into: its length for a string, the sum
// of the fields for the message, a little for anything else (numbers, booleans).
func argSize(a any) int {
	switch v := a.(type) {
	case Message:
		return len(v.Event) + len(v.Namespace) + len(v.Target) + len(v.Revision) + len(v.Commit) + len(v.Message) + 128
	case string:
		return len(v)
	}
	if v := reflect.ValueOf(a); v.Kind() == reflect.String {
		return v.Len()
	}
	return 32
}

// checkFormat refuses a printf format whose width or precision is over maxFormatWidth, or
// taken from an argument (*).
func checkFormat(format string) error {
	for i := 0; i < len(format); i++ {
		if format[i] != '%' {
			continue
		}
		n := 0 // the number being read: a flag 0, a width, a precision or an argument index
		for i++; i < len(format) && strings.IndexByte("+-# .*[]0123456789", format[i]) >= 0; i++ {
			switch c := format[i]; {
			case c == '*':
				return errors.New("printf: a width or precision from an argument (*) is not allowed")
			case c >= '0' && c <= '9':
				if n = n*10 + int(c-'0'); n > maxFormatWidth {
					return fmt.Errorf("printf: a width or precision over %d is not allowed", maxFormatWidth)
				}
			default:
				n = 0
			}
		}
	}
	return nil
}

// boundedBuffer holds a template's output: each write takes a step of the budget, and the
// output stops at maxTemplateOutput.
type boundedBuffer struct {
	bytes.Buffer
	budget *budget
}

func (b *boundedBuffer) Write(p []byte) (int, error) {
	if err := b.budget.step(); err != nil {
		return 0, err
	}
	if b.Len()+len(p) > maxTemplateOutput {
		return 0, fmt.Errorf("output longer than %d bytes", maxTemplateOutput)
	}
	return b.Buffer.Write(p)
}
