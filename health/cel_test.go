package health

import (
	"errors"
	"testing"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/runtime/schema"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
)

var widgetGVK = schema.GroupVersionKind{Group: "test.converge.dev", Version: "v1", Kind: "Widget"}

// widgetCheck reads a Widget's status.phase.
func widgetCheck() convergev1.CustomHealthCheck {
	return convergev1.CustomHealthCheck{
		APIVersion: "test.converge.dev/v1",
		Kind:       "Widget",
		Current:    `has(self.status) && self.status.phase == "Ready"`,
		Failed:     `has(self.status) && self.status.phase == "Failed"`,
		InProgress: `has(self.status) && self.status.phase == "Pending"`,
	}
}

func TestCompileRules(t *testing.T) {
	withCurrent := func(expr string) convergev1.CustomHealthCheck {
		c := widgetCheck()
		c.Current = expr
		return c
	}
	tests := []struct {
		name      string
		checks    []convergev1.CustomHealthCheck
		wantExprs []string // the fields compiled, in evaluation order
		wantErr   []string // substrings of the error
	}{
		{name: "none"},
		{
			name:      "all three, tried failed first",
			checks:    []convergev1.CustomHealthCheck{widgetCheck()},
			wantExprs: []string{"failed", "current", "inProgress"},
		},
		{
			name:      "current alone",
			checks:    []convergev1.CustomHealthCheck{{APIVersion: "test.converge.dev/v1", Kind: "Widget", Current: "true"}},
			wantExprs: []string{"current"},
		},
		{
			name:    "syntax error names the kind, the field and the position",
			checks:  []convergev1.CustomHealthCheck{withCurrent(`self.status.phase ==`)},
			wantErr: []string{"invalid health check expression", "test.converge.dev/v1 Widget: current:", "1:21", "Syntax error"},
		},
		{
			name:    "unknown function",
			checks:  []convergev1.CustomHealthCheck{withCurrent(`isReady(self)`)},
			wantErr: []string{"Widget: current:", "undeclared reference to 'isReady'"},
		},
		{
			name:    "not a bool",
			checks:  []convergev1.CustomHealthCheck{withCurrent(`"yes"`)},
			wantErr: []string{"Widget: current: must evaluate to a bool, not string"},
		},
		{
			name:    "current is required",
			checks:  []convergev1.CustomHealthCheck{withCurrent(" ")},
			wantErr: []string{"Widget: current: expression is required"},
		},
		{
			name:    "kind listed twice",
			checks:  []convergev1.CustomHealthCheck{widgetCheck(), widgetCheck()},
			wantErr: []string{"test.converge.dev/v1 Widget: kind listed twice"},
		},
		{
			name:    "bad apiVersion",
			checks:  []convergev1.CustomHealthCheck{{APIVersion: "a/b/c", Kind: "Widget", Current: "true"}},
			wantErr: []string{`"a/b/c" "Widget": not an apiVersion and kind`},
		},
		{
			name: "every bad expression is reported",
			checks: []convergev1.CustomHealthCheck{{
				APIVersion: "test.converge.dev/v1", Kind: "Widget",
				Current: "true", Failed: "(", InProgress: "1 +",
			}},
			wantErr: []string{"Widget: failed:", "Widget: inProgress:"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			rules, err := compileRules(&programCache{m: map[string]programEntry{}}, tt.checks)
			if len(tt.wantErr) > 0 {
				g.Expect(err).To(HaveOccurred())
				g.Expect(errors.Is(err, ErrInvalidExpr)).To(BeTrue())
				for _, s := range tt.wantErr {
					g.Expect(err.Error()).To(ContainSubstring(s))
				}
				g.Expect(ValidateExprs(tt.checks)).To(MatchError(err.Error()))
				return
			}
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(ValidateExprs(tt.checks)).To(Succeed())
			if tt.wantExprs == nil {
				g.Expect(rules).To(BeEmpty())
				return
			}
			var fields []string
			for _, e := range rules[widgetGVK].exprs {
				fields = append(fields, e.field)
			}
			g.Expect(fields).To(Equal(tt.wantExprs))
		})
	}
}

func TestProgramCacheCompilesOnce(t *testing.T) {
	g := NewWithT(t)
	cache := &programCache{m: map[string]programEntry{}}
	p1, err := cache.get("self.a == 1")
	g.Expect(err).NotTo(HaveOccurred())
	p2, err := cache.get("self.a == 1")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(p2).To(BeIdenticalTo(p1))
	_, err1 := cache.get("self.a ==")
	_, err2 := cache.get("self.a ==")
	g.Expect(err1).To(HaveOccurred())
	g.Expect(err2).To(BeIdenticalTo(err1), "compile errors are cached too")
	g.Expect(cache.m).To(HaveLen(2))
}

func TestEvaluate(t *testing.T) {
	widget := func(status map[string]any) map[string]any {
		obj := map[string]any{
			"apiVersion": "test.converge.dev/v1", "kind": "Widget",
			"metadata": map[string]any{"name": "w", "namespace": "ns"},
		}
		if status != nil {
			obj["status"] = status
		}
		return obj
	}
	rule := func(c convergev1.CustomHealthCheck) *exprRule {
		rules, err := compileRules(programs, []convergev1.CustomHealthCheck{c})
		if err != nil {
			t.Fatal(err)
		}
		return rules[widgetGVK]
	}
	bigList := make([]any, 2000)
	for i := range bigList {
		bigList[i] = int64(i)
	}
	tests := []struct {
		name    string
		check   convergev1.CustomHealthCheck
		obj     map[string]any
		want    Status
		wantMsg []string
	}{
		{
			name: "current", check: widgetCheck(), obj: widget(map[string]any{"phase": "Ready"}),
			want: Current, wantMsg: []string{`current expression holds: has(self.status) && self.status.phase == "Ready"`},
		},
		{
			name: "failed", check: widgetCheck(), obj: widget(map[string]any{"phase": "Failed"}),
			want: Failed, wantMsg: []string{"failed expression holds"},
		},
		{
			name: "in progress", check: widgetCheck(), obj: widget(map[string]any{"phase": "Pending"}),
			want: InProgress, wantMsg: []string{"inProgress expression holds"},
		},
		{
			name: "nothing holds", check: widgetCheck(), obj: widget(map[string]any{"phase": "Other"}),
			want: InProgress, wantMsg: []string{"no health expression holds yet"},
		},
		{
			name: "failed wins over current",
			check: convergev1.CustomHealthCheck{APIVersion: "test.converge.dev/v1", Kind: "Widget",
				Current: "true", Failed: "true"},
			obj: widget(nil), want: Failed,
		},
		{
			name: "current wins over in progress",
			check: convergev1.CustomHealthCheck{APIVersion: "test.converge.dev/v1", Kind: "Widget",
				Current: "true", InProgress: "true"},
			obj: widget(nil), want: Current,
		},
		{
			name: "a missing field does not hold and says why",
			check: convergev1.CustomHealthCheck{APIVersion: "test.converge.dev/v1", Kind: "Widget",
				Current: `self.status.phase == "Ready"`},
			obj: widget(nil), want: InProgress,
			wantMsg: []string{"no health expression holds yet (current: no such key: status)"},
		},
		{
			name: "conditions",
			check: convergev1.CustomHealthCheck{APIVersion: "test.converge.dev/v1", Kind: "Widget",
				Current: `self.?status.conditions.orValue([]).exists(c, c.type == "Ready" && c.status == "True")`},
			obj: widget(map[string]any{"conditions": []any{
				map[string]any{"type": "Other", "status": "False"},
				map[string]any{"type": "Ready", "status": "True"},
			}}),
			want: Current,
		},
		{
			name: "a dynamic value that is not a bool",
			check: convergev1.CustomHealthCheck{APIVersion: "test.converge.dev/v1", Kind: "Widget",
				Current: `self.metadata.name`},
			obj: widget(nil), want: InProgress, wantMsg: []string{"current: evaluated to string, not bool"},
		},
		{
			name: "a runaway expression is stopped",
			check: convergev1.CustomHealthCheck{APIVersion: "test.converge.dev/v1", Kind: "Widget",
				Current: `self.status.items.all(x, self.status.items.all(y, x + y >= 0))`},
			obj: widget(map[string]any{"items": bigList}), want: InProgress,
			wantMsg: []string{"cost limit exceeded"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := NewWithT(t)
			got, msg := rule(tt.check).evaluate(tt.obj)
			g.Expect(got).To(Equal(tt.want), msg)
			for _, s := range tt.wantMsg {
				g.Expect(msg).To(ContainSubstring(s))
			}
		})
	}
}
