package e2e

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
	"github.com/converge-gitops/converge/internal/testcharts"
	"github.com/converge-gitops/converge/sources"
)

// hostileChart is a chart kept in Git at deploy/ with the values a tenant sets, and the
// message its SyncTarget must fail with.
type hostileChart struct {
	name   string
	files  map[string]string
	values string
	want   string
}

// Scenario 54: charts whose templates would take a process down — a recursion through tpl
// (written in the chart, or reached through values alone), memory that doubles per line,
// output that doubles per define, two loops calling no function — each fail only their own
// SyncTarget with a clear reason,
// while a benign chart of another namespace keeps deploying in its usual time; the
// daemon's process never restarts and its peak RSS stays under 300 MiB.
func TestHostileTemplatesCostOnlyTheirOwnSyncTarget(t *testing.T) {
	run(t, 54, "hostile templates cost only their own SyncTarget", parallel, func(s *scenario) {
		g := NewWithT(t)
		// A hostile render that meets no other bound runs until this deadline: long enough
		// that waiting behind one is told apart from a loaded machine's slow deploy.
		const deadline = 30 * time.Second
		d := startDaemon(t, "hostile", "--watch-label-selector", shardLabel+"=hostile",
			"--render-timeout", deadline.String(), "--render-memory-limit", "256Mi")
		s.explainWith(d)
		g.Expect(d.waitReady(60 * time.Second)).To(Succeed())
		cmd, _ := d.process()
		pid := cmd.Process.Pid

		good := s.goodNamespace()
		benign := s.repo("benign")
		files := testcharts.Benign("benign")
		rev := benign.commit(prefixed("deploy/", files))
		bst := s.hostileTarget("benign", good, benign, "")
		s.waitHealthy(bst, rev, 90*time.Second)
		files["values.yaml"] = "message: alone\n"
		rev = benign.commit(prefixed("deploy/", files))
		usual := s.waitHealthy(bst, rev, 90*time.Second)
		s.latency("benign chart commit → healthy, alone", usual)

		chart, values := testcharts.TplRecursionThroughValues("values")
		// A recursion through tpl, memory doubling per line and output doubling per define
		// each meet the stack bound, the memory bound or the deadline first, depending on how
		// much CPU a loaded machine gives the worker: any bound stops them. (sync/render's
		// tests show which bound an unloaded worker meets.)
		exceeded := "exceeded " + deadline.String()
		recursion := "failed: render (recursed past its stack bound of 64 MiB.*|used more than 256 MiB of memory; its worker was stopped|" + exceeded + ")$"
		exhausting := "failed: render (used more than 256 MiB of memory; its worker was stopped|" + exceeded + ")$"
		hostile := []hostileChart{
			{"tpl", testcharts.TplRecursion("tpl"), "", recursion},
			{"tpl-values", chart, values, recursion},
			{"lists", testcharts.ListDoubling("lists", 24), "", exhausting},
			{"includes", testcharts.IncludeDoubling("includes", 22), "", exhausting},
			{"spin-1", testcharts.NestedRange("spin"), "", "failed: render " + exceeded + "$"},
			{"spin-2", testcharts.NestedRange("spin"), "", "failed: render " + exceeded + "$"},
		}
		var sts []*convergev1.SyncTarget
		for _, h := range hostile {
			r := s.repo(h.name)
			r.commit(prefixed("deploy/", h.files))
			sts = append(sts, s.hostileTarget(h.name, s.ns, r, h.values))
		}
		set := s.hostileSet(g, benign)

		// While the hostile renders run, the benign chart deploys each of its commits.
		for i := range 3 {
			files["values.yaml"] = fmt.Sprintf("message: push %d\n", i)
			rev = benign.commit(prefixed("deploy/", files))
			took := s.waitHealthy(bst, rev, 90*time.Second)
			s.latency(fmt.Sprintf("benign chart commit → healthy, beside hostile ones (%d)", i+1), took)
			// Its usual time, give or take what a loaded machine adds, but not a hostile
			// render's deadline: the benign render never queues behind a hostile one.
			g.Expect(took).To(BeNumerically("<", usual+deadline/2), "the benign chart waited on the hostile ones")
			cm := &corev1.ConfigMap{}
			object(g, good, "benign-benign", cm)
			g.Expect(cm.Data).To(HaveKeyWithValue("message", fmt.Sprintf("push %d", i)))
		}
		for i, h := range hostile {
			s.eventually(sts[i], 3*time.Minute, func(g Gomega, st *convergev1.SyncTarget) {
				c := ready(st)
				g.Expect(c.Reason).To(Equal(convergev1.BuildFailedReason), "%s: %s", h.name, c.Message)
				g.Expect(c.Message).To(MatchRegexp(h.want), h.name)
			})
		}
		g.Eventually(func(g Gomega) {
			c := setReady(getSet(g, set))
			g.Expect(c.Reason).To(Equal(convergev1.TemplateInvalidReason), c.Message)
			g.Expect(c.Message).To(ContainSubstring("the result would exceed 262144 bytes"))
		}).WithTimeout(time.Minute).WithPolling(200 * time.Millisecond).Should(Succeed())
		g.Expect(generatedNames(g, s.ns, set.Name)).To(BeEmpty(), "the hostile set wrote a SyncTarget")
		cmd, _ = d.process()
		g.Expect(cmd.Process.Pid).To(Equal(pid), "the daemon was restarted")
		g.Expect(d.exited()).To(BeFalse(), "the daemon exited")
		peak := peakRSS(g, pid)
		t.Logf("daemon peak RSS (VmHWM): %d MiB", peak>>20)
		g.Expect(peak).To(BeNumerically("<", 300<<20), "the daemon's peak RSS")
	})
}

// goodNamespace is a second tenant's namespace, with the git credentials.
func (s *scenario) goodNamespace() string {
	ns := s.ns + "-good"
	s.create(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
	s.t.Cleanup(func() {
		_ = suite.k8s.Delete(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
	})
	s.create(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: httpSecret, Namespace: ns},
		Data: map[string][]byte{sources.SecretUsername: []byte(suite.gitUser), sources.SecretPassword: []byte(suite.gitPass)}})
	return ns
}

// hostileTarget is a chart SyncTarget of namespace ns served by the scenario's own daemon,
// deploying into ns with values.
func (s *scenario) hostileTarget(name, ns string, r *repo, values string) *convergev1.SyncTarget {
	st := &convergev1.SyncTarget{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{shardLabel: "hostile"}},
		Spec: convergev1.SyncTargetSpec{
			Source: convergev1.GitSource{URL: r.httpURL(), Ref: convergev1.GitRef{Branch: "main"},
				SecretRef: &convergev1.LocalObjectReference{Name: httpSecret},
				Interval:  &metav1.Duration{Duration: 2 * time.Second}},
			Path: "deploy", Prune: true, Timeout: &metav1.Duration{Duration: 30 * time.Second},
			Helm: &convergev1.HelmSpec{ReleaseName: name},
		},
	}
	if values != "" {
		st.Spec.Helm.Values = &apiextensionsv1.JSON{Raw: []byte(yamlToJSON(s.t, values))}
	}
	s.create(st)
	s.t.Cleanup(func() { _ = suite.k8s.Delete(context.Background(), st) })
	return st
}

// yamlToJSON turns the one-line values of a hostile chart ("key: 'string'") into JSON.
func yamlToJSON(t *testing.T, values string) string {
	k, v, ok := strings.Cut(strings.TrimSpace(values), ": ")
	if !ok {
		t.Fatalf("values %q are not one key: value line", values)
	}
	return fmt.Sprintf("{%q: %q}", k, strings.Trim(v, "'"))
}

func prefixed(prefix string, files map[string]string) map[string]string {
	out := make(map[string]string, len(files))
	for k, v := range files {
		out[prefix+k] = v
	}
	return out
}

// peakRSS is the process's peak resident size (VmHWM), in bytes.
func peakRSS(g Gomega, pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	g.Expect(err).NotTo(HaveOccurred())
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			g.Expect(err).NotTo(HaveOccurred())
			return kb << 10
		}
	}
	g.Expect("VmHWM").To(BeEmpty(), "no VmHWM in /proc/%d/status", pid)
	return 0
}

// hostileSet is a SyncTargetSet of 1000 parameter sets (a matrix of 25 × 40 list elements)
// whose template, under 2 KiB, nests replace to grow each SyncTarget's path to 960 KiB:
// about 1 GiB for the set, were its render not bounded.
func (s *scenario) hostileSet(g Gomega, r *repo) *convergev1.SyncTargetSet {
	var as, bs []map[string]string
	for i := range 25 {
		as = append(as, map[string]string{"a": fmt.Sprint(i)})
	}
	for i := range 40 {
		bs = append(bs, map[string]string{"b": fmt.Sprint(i)})
	}
	path := strconv.Quote(strings.Repeat("x", 15))
	for range 4 { // 15 × 16⁴ bytes
		path = fmt.Sprintf(`(replace "x" "%s" %s)`, strings.Repeat("x", 16), path)
	}
	set := &convergev1.SyncTargetSet{
		ObjectMeta: metav1.ObjectMeta{Name: "replaces", Namespace: s.ns, Labels: map[string]string{shardLabel: "hostile"}},
		Spec: convergev1.SyncTargetSetSpec{
			Generators: []convergev1.Generator{{Matrix: &convergev1.MatrixGenerator{Generators: []convergev1.BaseGenerator{
				{List: &convergev1.ListGenerator{Elements: as}}, {List: &convergev1.ListGenerator{Elements: bs}}}}}},
			Template: convergev1.SyncTargetTemplate{
				Metadata: convergev1.SyncTargetTemplateMeta{Name: "t-{{ .a }}-{{ .b }}"},
				Spec:     fleetSpec(g, r, map[string]any{"path": "{{ " + path[1:len(path)-1] + " }}"}),
			},
		},
	}
	s.create(set)
	s.t.Cleanup(func() { _ = suite.k8s.Delete(context.Background(), set) })
	return set
}
