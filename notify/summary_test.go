package notify

import (
	"context"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
)

// spinForever passed the old validation (it only parsed) and never ends: text/template
// ranges over integers and nothing is written for the output cap to stop.
const spinForever = `{{range 1000000000}}{{range 1000000000}}{{end}}{{end}}`

// TestHostileSummaryRefused: every way a summary could run long (loops, recursion through
// templates, values that double at each step, huge printf widths) is refused, when it is
// checked or at the step that would grow; what a summary is for still works.
func TestHostileSummaryRefused(t *testing.T) {
	refusedWhenChecked := map[string]string{
		spinForever:                           "range is not allowed",
		`{{range .Created}}x{{end}}`:          "range is not allowed",
		`{{range $i, $c := .Message}}{{end}}`: "range is not allowed",
		`{{define "a"}}{{template "a" .}}{{template "a" .}}{{end}}{{template "a" .}}`: "define and block are not allowed",
		`{{block "b" .}}{{.Event}}{{end}}`:                                            "define and block are not allowed",
		`{{template "summary" .}}`:                                                    "template and block are not allowed",
		`{{call .Message}}`:                                                           `function "call" is not allowed`,
		`{{with printf "%s" .Message}}{{.}}{{end}}`:                                   "with takes one field of the message",
		`{{.Message.Len}}`:                                                            "only the message's own fields",
		`{{(.Message).Len}}`:                                                          "only the message's own fields",
		`{{$.Nope}}`:                                                                  "only the message's own fields",
		`{{if .Created}}{{range 10}}{{end}}{{end}}`:                                   "range is not allowed",
		`{{with .Message}}{{else}}{{range 3}}{{end}}{{end}}`:                          "range is not allowed",
	}
	for tmpl, want := range refusedWhenChecked {
		_, err := parseSummary(tmpl)
		NewWithT(t).Expect(err).To(MatchError(And(HavePrefix("spec.summary: "), ContainSubstring(want))), tmpl)
	}

	doubling := `{{$a := printf "%050d" 0}}` + strings.Repeat(`{{$a = printf "%s%s" $a $a}}`, 20) + `{{$a}}`
	escaping := `{{$a := "\\"}}` + strings.Repeat(`{{$a = js $a}}`, 20) + `{{len $a}}` // each js doubles the backslashes
	refusedWhenRun := map[string]string{
		doubling:                          "longer than 65536 bytes",
		escaping:                          "longer than 65536 bytes",
		`{{printf "%1000000d" 1}}`:        "width or precision over 100",
		`{{printf "%.999999s" .Message}}`: "width or precision over 100",
		`{{printf "%*d" 999999 1}}`:       "from an argument (*)",
	}
	for tmpl, want := range refusedWhenRun {
		g := NewWithT(t)
		s, err := parseSummary(tmpl)
		g.Expect(err).NotTo(HaveOccurred(), tmpl)
		_, err = s.text(context.Background(), rolledBackMsg())
		g.Expect(err).To(MatchError(And(HavePrefix("spec.summary: "), ContainSubstring(want))), tmpl)
	}

	g := NewWithT(t)
	s, err := parseSummary(`{{if eq .Event "RolledBack"}}:rewind:{{else}}{{.Event}}{{end}} {{$.Namespace}}/{{.Target}}` +
		`{{with .Commit}} at {{slice . 0 7}}{{end}}: {{printf "%.20s" .Message | html}} ({{len .Message}}, {{.Created}})`)
	g.Expect(err).NotTo(HaveOccurred())
	out, err := s.text(context.Background(), rolledBackMsg())
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(out).To(Equal(":rewind: shop/web at 0123456: health check failed: (156, 0)"))
}

// TestSummaryStopsAtItsDeadline: an execution whose context ended stops at its next step,
// and one that takes more steps (function calls and writes) than its budget stops there
// (a template the CRD accepts, at most 4096 bytes, cannot take as many).
func TestSummaryStopsAtItsDeadline(t *testing.T) {
	g := NewWithT(t)
	long, err := parseSummary(strings.Repeat(`{{print}}`, maxSummarySteps+1))
	g.Expect(err).NotTo(HaveOccurred())
	_, err = long.text(context.Background(), rolledBackMsg())
	g.Expect(err).To(MatchError(ContainSubstring("stopped after 10000 steps")))

	s, err := parseSummary(`{{.Event}} {{print .Message}}`)
	g.Expect(err).NotTo(HaveOccurred())
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = s.text(ctx, rolledBackMsg())
	g.Expect(err).To(MatchError(ContainSubstring("stopped: context canceled")))
	out, err := s.text(context.Background(), rolledBackMsg())
	g.Expect(err).NotTo(HaveOccurred(), "each execution has its own budget")
	g.Expect(out).To(HavePrefix("RolledBack health check failed"))
}

// unitReconciler is a Reconciler on a fake client holding objs (Notifier status as a
// subresource) and a fake clock, for tests without an API server.
func unitReconciler(clk *clocktesting.FakeClock, o Options, objs ...client.Object) (*Reconciler, client.Client) {
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(objs...).
		WithStatusSubresource(&convergev1.Notifier{}).Build()
	o.Clock = clk
	return NewReconciler(c, c, o), c
}

// TestHostileSummaryIsInvalidSpec: a Notifier whose summary could spin for ever is not
// started: Ready is False with reason InvalidSpec and says why.
func TestHostileSummaryIsInvalidSpec(t *testing.T) {
	g := NewWithT(t)
	n := &convergev1.Notifier{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "team", Generation: 1},
		Spec: convergev1.NotifierSpec{Summary: spinForever,
			Provider: convergev1.NotificationProvider{Type: convergev1.SlackProvider, Address: "https://hooks.example.com/x"}}}
	r, c := unitReconciler(clocktesting.NewFakeClock(t0), Options{}, n)
	_, err := r.Reconcile(context.Background(), ctrl.Request{NamespacedName: client.ObjectKeyFromObject(n)})
	g.Expect(err).NotTo(HaveOccurred())
	got := &convergev1.Notifier{}
	g.Expect(c.Get(context.Background(), client.ObjectKeyFromObject(n), got)).To(Succeed())
	ready := apimeta.FindStatusCondition(got.Status.Conditions, convergev1.ReadyCondition)
	g.Expect(ready).NotTo(BeNil())
	g.Expect(ready.Status).To(Equal(metav1.ConditionFalse))
	g.Expect(ready.Reason).To(Equal(convergev1.InvalidSpecReason))
	g.Expect(ready.Message).To(ContainSubstring("spec.summary: range is not allowed"))
	g.Expect(r.workers).NotTo(HaveKey(types.NamespacedName{Namespace: "shop", Name: "team"}))
}

// FuzzSummary: a summary template is refused, or its execution ends having taken at most
// one step (a function call or a write) per byte of the template: no node runs twice.
func FuzzSummary(f *testing.F) {
	for _, s := range []string{spinForever, `{{.Event}} {{.Target}}`, `{{if eq .Event "Failed"}}x{{else}}{{printf "%5.3s" .Message}}{{end}}`,
		`{{with .Commit}}{{slice . 0 7}}{{end}}`, `{{$a := print .Message}}{{$a = print $a $a}}{{js $a}}`,
		`{{define "a"}}{{template "a" .}}{{end}}`, `{{range .Created}}{{end}}`, `{{call .Message}}`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		sum, err := parseSummary(s)
		if err != nil || sum == nil {
			return
		}
		out, err := sum.text(context.Background(), rolledBackMsg())
		if steps := maxSummarySteps - sum.budget.steps; steps > len(s) {
			t.Fatalf("%q took %d steps", s, steps)
		}
		if err == nil && len([]rune(out)) > maxText {
			t.Fatalf("%q made %d runes", s, len([]rune(out)))
		}
	})
}
