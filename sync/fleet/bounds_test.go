package fleet

import (
	"context"
	"encoding/json"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
)

// nestedReplace is a template string that grows seed by 16 on every level of replace.
func nestedReplace(levels int, seed string) string {
	s := fmt.Sprintf("%q", seed)
	for range levels {
		s = fmt.Sprintf(`(replace "x" "%s" %s)`, strings.Repeat("x", 16), s)
	}
	return "{{ " + strings.TrimSuffix(strings.TrimPrefix(s, "("), ")") + " }}"
}

// hostileSet is a set of 1000 parameter sets (a matrix of 25 × 40 list elements) whose
// template renders path from nested replaces: its whole spec is under 2 KiB.
func hostileSet(t *testing.T, path string) (*convergev1.SyncTargetSet, []Params) {
	t.Helper()
	var as, bs []map[string]string
	for i := range 25 {
		as = append(as, map[string]string{"a": fmt.Sprint(i)})
	}
	for i := range 40 {
		bs = append(bs, map[string]string{"b": fmt.Sprint(i)})
	}
	set := testSet(`{"source": {"url": "https://git.example.com/x.git", "ref": {"branch": "main"}}, "path": `+
		fmt.Sprintf("%q", path)+`}`, convergev1.SyncTargetTemplateMeta{Name: "t-{{ .a }}-{{ .b }}"})
	set.Spec.Generators = []convergev1.Generator{{Matrix: &convergev1.MatrixGenerator{Generators: []convergev1.BaseGenerator{
		{List: &convergev1.ListGenerator{Elements: as}}, {List: &convergev1.ListGenerator{Elements: bs}}}}}}
	b, err := json.Marshal(set.Spec)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) > 2048 {
		t.Fatalf("the hostile spec has %d bytes, want at most 2 KiB", len(b))
	}
	params, err := Product(listParams(set.Spec.Generators[0].Matrix.Generators[0].List),
		listParams(set.Spec.Generators[0].Matrix.Generators[1].List))
	if err != nil {
		t.Fatal(err)
	}
	if len(params) != MaxParamSets {
		t.Fatalf("%d parameter sets, want %d", len(params), MaxParamSets)
	}
	return set, params
}

// allocated is what f allocates on the heap, and how long it takes.
func allocated(f func()) (uint64, time.Duration) {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	start := time.Now()
	f()
	took := time.Since(start)
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc, took
}

// A 2 KiB set whose template nests replace to grow every SyncTarget to almost 1 MiB is
// refused at the first SyncTarget, having allocated a few MiB, not the GiB its 1000
// parameter sets would hold.
func TestNestedReplaceStopsAtTheTargetBound(t *testing.T) {
	g := NewWithT(t)
	path := nestedReplace(4, strings.Repeat("x", 15)) // 15 × 16⁴ = 960 KiB
	set, params := hostileSet(t, path)
	var err error
	alloc, took := allocated(func() { _, err = Render(context.Background(), set, params, Limits{}) })
	g.Expect(err).To(MatchError(And(ContainSubstring(`parameters {a="0", b="0"}`), ContainSubstring("spec.path"),
		ContainSubstring(fmt.Sprintf("replace: the result would exceed %d bytes", MaxRenderedBytes)))))
	t.Logf("allocated %d bytes in %s", alloc, took)
	g.Expect(alloc).To(BeNumerically("<", 16<<20), "bytes allocated")
	g.Expect(took).To(BeNumerically("<", 5*time.Second))
}

// The same set growing each SyncTarget to just under the bound of one is refused once the
// SyncTargets rendered so far pass the bound of the set, having allocated a small multiple
// of that bound (each SyncTarget's intermediate strings and its own), not the 500 MiB its
// 1000 parameter sets would take.
func TestNestedReplaceStopsAtTheSetBound(t *testing.T) {
	g := NewWithT(t)
	path := nestedReplace(3, strings.Repeat("x", 60)) // 60 × 16³ = 240 KiB
	set, params := hostileSet(t, path)
	var err error
	alloc, took := allocated(func() { _, err = Render(context.Background(), set, params, Limits{}) })
	g.Expect(err).To(MatchError(ContainSubstring(fmt.Sprintf("the SyncTargets of the set exceed %d bytes in all", MaxSetRenderedBytes))))
	t.Logf("allocated %d bytes in %s", alloc, took)
	g.Expect(alloc).To(BeNumerically("<", 12*MaxSetRenderedBytes), "bytes allocated")
	g.Expect(took).To(BeNumerically("<", 5*time.Second))
}

var _ = metav1.Now

// tickingClock moves on by step every time it is read: a deadline passes after a known
// number of checks, without sleeping.
type tickingClock struct {
	now   time.Time
	step  time.Duration
	reads int
}

func (c *tickingClock) Now() time.Time {
	c.reads++
	c.now = c.now.Add(c.step)
	return c.now
}

func (c *tickingClock) Since(t time.Time) time.Duration { return c.Now().Sub(t) }

// plainSpec is a template spec without parameters.
const plainSpec = `{"source": {"url": "https://git.example.com/x.git", "ref": {"branch": "main"}}, "path": "p"}`

// manyParams are n parameter sets a and b.
func manyParams(n int) []Params {
	out := make([]Params, n)
	for i := range out {
		out[i] = Params{"a": fmt.Sprint(i), "b": "x"}
	}
	return out
}

// A render that runs past its deadline stops at the first check after it: templates
// without any function call are checked at every string and every write.
func TestRenderStopsAtTheDeadline(t *testing.T) {
	for name, tmpl := range map[string]string{
		"writes":   "{{ .a }}-{{ .b }}",
		"no write": "{{ if .a }}{{ end }}{{ with .b }}{{ end }}",
	} {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			labels := map[string]string{}
			for i := range 20 {
				labels[fmt.Sprint("l", i)] = tmpl
			}
			set := testSet(plainSpec, convergev1.SyncTargetTemplateMeta{Name: "t-{{ .a }}", Labels: labels})
			clock := &tickingClock{now: time.Now(), step: time.Millisecond}
			out, err := Render(context.Background(), set, manyParams(MaxParamSets), Limits{Timeout: time.Second, Clock: clock})
			g.Expect(err).To(MatchError(ErrRenderDeadline))
			g.Expect(err).To(MatchError(ContainSubstring("rendering the template took too long: stopped after 1s")))
			g.Expect(out).To(BeNil())
			// Read once for the deadline, then once per check: the first check past it stops.
			g.Expect(clock.reads).To(Equal(1 + 1000))
		})
	}
}

// The reconcile's context ends the render too.
func TestRenderStopsWithItsContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := Render(ctx, testSet(plainSpec, convergev1.SyncTargetTemplateMeta{Name: "{{ .a }}"}), manyParams(2), Limits{})
	NewWithT(t).Expect(err).To(MatchError(context.Canceled))
}

// A template of many nodes and no function, run for many parameter sets, is refused
// after the first: its work is known then.
func TestTemplateWorkIsBounded(t *testing.T) {
	g := NewWithT(t)
	set := testSet(plainSpec, convergev1.SyncTargetTemplateMeta{Name: "t-{{ .a }}",
		Labels: map[string]string{"l": strings.Repeat("{{ if .a }}{{ end }}", 5000)}})
	var err error
	_, took := allocated(func() { _, err = Render(context.Background(), set, manyParams(MaxParamSets), Limits{}) })
	g.Expect(err).To(MatchError(And(ContainSubstring("the template has 25007 nodes"),
		ContainSubstring(fmt.Sprintf("run for 1000 parameter sets, 25007000 in all, more than %d", MaxTemplateWork)))))
	g.Expect(took).To(BeNumerically("<", time.Second))

	// The same template for a hundred parameter sets is within the bound.
	_, err = Render(context.Background(), set, manyParams(100), Limits{})
	g.Expect(err).NotTo(HaveOccurred())
}

// Every function's result counts against what the functions of a render may return, and
// one larger than a SyncTarget may be is refused.
func TestTemplateFunctionsAreCounted(t *testing.T) {
	g := NewWithT(t)
	big := strings.Repeat("x", MaxRenderedBytes/2)
	// trunc of a large parameter returns little, but reads it all: a thousand of them
	// pass what a render's functions may read.
	set := testSet(plainSpec, convergev1.SyncTargetTemplateMeta{Name: "t-{{ .a }}",
		Labels: map[string]string{"l": strings.Repeat("{{ trunc 1 .big }}", 300)}})
	params := manyParams(200)
	for _, p := range params {
		p["big"] = big
	}
	_, err := Render(context.Background(), set, params, Limits{})
	g.Expect(err).To(MatchError(ContainSubstring(fmt.Sprintf("trunc: the template functions returned and read more than %d bytes in all",
		producedFactor*MaxSetRenderedBytes))))
	_, err = renderString(t, Params{"big": big}, `{{ lower .big | replace "x" "yyy" }}`)
	g.Expect(err).To(MatchError(fmt.Sprintf("replace: the result would exceed %d bytes", MaxRenderedBytes)))
	_, err = renderString(t, Params{"big": big}, `{{ if lt .big .big }}{{ end }}{{ if eq .big "z" "y" }}{{ end }}`)
	g.Expect(err).NotTo(HaveOccurred())
}
