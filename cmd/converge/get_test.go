package main

import (
	"bytes"
	"context"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
	"github.com/converge-gitops/converge/internal/localcluster"
	"github.com/converge-gitops/converge/internal/localcluster/clustertest"
)

// -update rewrites the golden files. Other test files of the package may define the flag
// too; whichever registers it first wins and all read the same one.
func init() {
	if flag.Lookup("update") == nil {
		flag.Bool("update", false, "rewrite the golden files under testdata")
	}
}

// stGolden compares got with the golden file testdata/<name>, or rewrites it with -update.
func stGolden(t *testing.T, name string, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if f := flag.Lookup("update"); f != nil && f.Value.String() == "true" {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run the test with -update to write it)", err)
	}
	if got != string(want) {
		t.Errorf("output differs from %s (rerun with -update if the change is intended)\n--- got\n%s\n--- want\n%s", path, got, want)
	}
}

// stNow is the clock of the table fixtures.
var stNow = time.Date(2025, 3, 14, 15, 9, 26, 0, time.UTC)

const (
	shaGood = "0a1b2c3d4e5f60718293a4b5c6d7e8f901234567"
	shaBad  = "badc0ffee0ddf00d1234567890abcdef12345678"
	shaNew  = "5eed5eed5eed5eed5eed5eed5eed5eed5eed5eed"
)

func ago(d time.Duration) metav1.Time { return metav1.NewTime(stNow.Add(-d)) }

func agoPtr(d time.Duration) *metav1.Time { t := ago(d); return &t }

func cond(typ string, status metav1.ConditionStatus, reason, msg string) metav1.Condition {
	return metav1.Condition{Type: typ, Status: status, Reason: reason, Message: msg, LastTransitionTime: ago(time.Hour)}
}

// tableFixtures are SyncTargets in the states `converge get` distinguishes.
func tableFixtures() []convergev1.SyncTarget {
	mk := func(ns, name string, status convergev1.SyncTargetStatus) convergev1.SyncTarget {
		return convergev1.SyncTarget{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: convergev1.SyncTargetSpec{Source: convergev1.GitSource{
				URL: "https://git.example.com/org/" + name + ".git", Ref: convergev1.GitRef{Branch: "main"}}},
			Status: status,
		}
	}
	good, bad, next := "main@sha1:"+shaGood, "main@sha1:"+shaBad, "main@sha1:"+shaNew
	rolledBack := "revision " + bad + " failed: health check: Deployment team-a/api: Progressing=False " +
		"ProgressDeadlineExceeded; rolled back to " + good + " (1 configured)"
	items := []convergev1.SyncTarget{
		mk("team-a", "shop", convergev1.SyncTargetStatus{
			Conditions: []metav1.Condition{
				cond(convergev1.ReadyCondition, metav1.ConditionTrue, convergev1.SucceededReason, "applied revision "+good+": 2 created, 1 unchanged"),
				cond(convergev1.HealthyCondition, metav1.ConditionTrue, convergev1.SucceededReason, "applied revision "+good+": 2 created, 1 unchanged"),
			},
			LastAppliedRevision: good, LastHealthyRevision: good,
			History: []convergev1.HistoryEntry{{Revision: good, StartedAt: ago(15 * time.Second), FinishedAt: agoPtr(12 * time.Second),
				Result: convergev1.SyncSucceeded, Created: 2}},
		}),
		mk("team-a", "api", convergev1.SyncTargetStatus{
			Conditions: []metav1.Condition{
				cond(convergev1.ReadyCondition, metav1.ConditionFalse, convergev1.RolledBackReason, rolledBack),
				cond(convergev1.HealthyCondition, metav1.ConditionFalse, convergev1.RolledBackReason, rolledBack),
			},
			LastAppliedRevision: good, LastHealthyRevision: good, LastAttemptedRevision: bad,
			History: []convergev1.HistoryEntry{{Revision: bad, StartedAt: ago(6 * time.Minute), FinishedAt: agoPtr(5 * time.Minute),
				Result: convergev1.SyncRolledBack, Configured: 1, Message: rolledBack}},
		}),
		mk("team-b", "web", convergev1.SyncTargetStatus{
			Conditions: []metav1.Condition{
				cond(convergev1.ReadyCondition, metav1.ConditionTrue, convergev1.SucceededReason, "applied revision "+good+": 1 unchanged"),
				cond(convergev1.HealthyCondition, metav1.ConditionTrue, convergev1.SucceededReason, "applied revision "+good+": 1 unchanged"),
				cond(convergev1.ReconcilingCondition, metav1.ConditionTrue, convergev1.ProgressingReason, "applying "+next),
			},
			LastAppliedRevision: good, LastAttemptedRevision: next,
			History: []convergev1.HistoryEntry{{Revision: good, StartedAt: ago(3*time.Hour + time.Minute), FinishedAt: agoPtr(3 * time.Hour),
				Result: convergev1.SyncSucceeded}},
		}),
		mk("team-b", "legacy", convergev1.SyncTargetStatus{
			Conditions: []metav1.Condition{
				cond(convergev1.ReadyCondition, metav1.ConditionTrue, convergev1.SucceededReason, "applied revision sha1:"+shaGood+": 4 unchanged"),
			},
			LastAppliedRevision: "sha1:" + shaGood,
			History:             []convergev1.HistoryEntry{{Revision: "sha1:" + shaGood, StartedAt: ago(50 * time.Hour), Result: convergev1.SyncSucceeded}},
		}),
		mk("team-b", "fresh", convergev1.SyncTargetStatus{}),
	}
	items[3].Spec.Suspend = true
	items[0].Spec.KubeConfig = &convergev1.KubeConfigReference{SecretRef: convergev1.KubeConfigSecretReference{Name: "prod-eu"}}
	return items
}

func TestGetTable(t *testing.T) {
	for _, tc := range []struct {
		golden        string
		allNamespaces bool
	}{
		{"get/namespace.golden", false},
		{"get/all-namespaces.golden", true},
	} {
		t.Run(tc.golden, func(t *testing.T) {
			var out bytes.Buffer
			p := &syncTargetPrinter{out: &out, format: outputTable, allNamespaces: tc.allNamespaces, now: func() time.Time { return stNow }}
			if err := p.printList(tableFixtures(), false); err != nil {
				t.Fatal(err)
			}
			stGolden(t, tc.golden, out.String())
		})
	}
}

// TestGetWatchRows: rows printed by a watch line up with the table, and a change that
// shows nothing new (only time passing, or a field not in the table) prints nothing.
func TestGetWatchRows(t *testing.T) {
	g := NewWithT(t)
	var out bytes.Buffer
	now := stNow
	p := &syncTargetPrinter{out: &out, format: outputTable, now: func() time.Time { return now }}
	items := tableFixtures()[:2]
	g.Expect(p.printList(items, false)).To(Succeed())
	out.Reset()

	now = now.Add(time.Minute)
	shop := items[1].DeepCopy() // sorted: api, shop
	shop.Status.ObservedGeneration = 7
	g.Expect(p.printChange("MODIFIED", shop)).To(Succeed())
	g.Expect(out.String()).To(BeEmpty(), "neither time passing nor a field outside the table is a change")

	shop.Status.Conditions[0].Message = "applied revision main@sha1:" + shaNew + ": 1 configured"
	shop.Status.LastAppliedRevision = "main@sha1:" + shaNew
	shop.Status.History = append([]convergev1.HistoryEntry{{Revision: "main@sha1:" + shaNew,
		StartedAt: metav1.NewTime(now.Add(-3 * time.Second)), FinishedAt: &metav1.Time{Time: now.Add(-2 * time.Second)},
		Result: convergev1.SyncSucceeded}}, shop.Status.History...)
	g.Expect(p.printChange("MODIFIED", shop)).To(Succeed())
	g.Expect(p.printChange("DELETED", items[0].DeepCopy())).To(Succeed())
	stGolden(t, "get/watch-rows.golden", out.String())
}

func TestShortRevision(t *testing.T) {
	for in, want := range map[string]string{
		"main@sha1:" + shaGood:                      "main@sha1:0a1b2c3",
		"sha1:" + shaGood:                           "sha1:0a1b2c3",
		"refs/pull/7/head@sha1:" + shaBad:           "refs/pull/7/head@sha1:badc0ff",
		"v1.2.0@sha256:" + strings.Repeat("ab", 32): "v1.2.0@sha256:abababa",
		"":               "",
		"not-a-revision": "not-a-revision",
	} {
		if got := shortRevision(in); got != want {
			t.Errorf("shortRevision(%q) = %q, want %q", in, got, want)
		}
	}
}

// cliRun runs the converge CLI in-process against kubeconfig and returns what it printed
// and its exit code.
func cliRun(ctx context.Context, kubeconfig string, args ...string) (stdout, stderr string, code int) {
	var out, errOut bytes.Buffer
	cmd := newRootCommand()
	cmd.SetArgs(append(args, "--kubeconfig", kubeconfig))
	cmd.SetOut(&out)
	cmd.SetErr(&errOut)
	err := cmd.ExecuteContext(ctx)
	if err != nil {
		errOut.WriteString("converge: " + err.Error() + "\n")
		return out.String(), errOut.String(), exitCode(err)
	}
	return out.String(), errOut.String(), 0
}

// apiServer is a kube-apiserver with the SyncTarget CRD for the tests of one file.
type apiServer struct {
	c          client.Client
	kubeconfig string
}

func startAPIServer(t *testing.T) *apiServer {
	t.Helper()
	ctrl.SetLogger(logr.Discard()) // envtest logs through controller-runtime
	cluster := clustertest.Start(t, localcluster.Options{CRDDirectoryPaths: []string{clustertest.CRDDir()}})
	scheme := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(scheme)
	_ = convergev1.AddToScheme(scheme)
	c, err := client.New(cluster.Config, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	return &apiServer{c: c, kubeconfig: cluster.Kubeconfig}
}

// create creates st with its status, as the daemon would have written it.
func (a *apiServer) create(t *testing.T, st *convergev1.SyncTarget) *convergev1.SyncTarget {
	t.Helper()
	ctx := context.Background()
	st = st.DeepCopy()
	status := st.Status
	if err := a.c.Create(ctx, st); err != nil {
		t.Fatal(err)
	}
	if status.Conditions != nil || status.History != nil || status.LastAppliedRevision != "" {
		st.Status = status
		if err := a.c.Status().Update(ctx, st); err != nil {
			t.Fatal(err)
		}
	}
	return st
}

// writeStatus replaces st's status as the daemon would.
func (a *apiServer) writeStatus(t *testing.T, key client.ObjectKey, mutate func(*convergev1.SyncTarget)) {
	t.Helper()
	ctx := context.Background()
	st := &convergev1.SyncTarget{}
	if err := a.c.Get(ctx, key, st); err != nil {
		t.Fatal(err)
	}
	base := st.DeepCopy()
	mutate(st)
	if err := a.c.Status().Patch(ctx, st, client.MergeFrom(base)); err != nil {
		t.Fatal(err)
	}
}

func (a *apiServer) namespace(t *testing.T, name string) {
	t.Helper()
	if err := a.c.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}); err != nil {
		t.Fatal(err)
	}
}

// syncedBuffer is a bytes.Buffer safe to read while a command writes to it.
type syncedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// TestGetAgainstAPIServer runs `converge get` against a real API server: the table of a
// namespace and of all, one SyncTarget, -o yaml and json, a missing one, and -w.
func TestGetAgainstAPIServer(t *testing.T) {
	t.Parallel()
	a := startAPIServer(t)
	for _, ns := range []string{"team-a", "team-b"} {
		a.namespace(t, ns)
	}
	for _, st := range tableFixtures() {
		a.create(t, &st)
	}
	ctx := context.Background()

	t.Run("table", func(t *testing.T) {
		g := NewWithT(t)
		out, errOut, code := cliRun(ctx, a.kubeconfig, "get", "-n", "team-a")
		g.Expect(code).To(Equal(0), errOut)
		lines := strings.Split(strings.TrimSpace(out), "\n")
		g.Expect(lines).To(HaveLen(3))
		g.Expect(strings.Fields(lines[0])).To(Equal([]string{"NAME", "READY", "REVISION", "HEALTH", "CLUSTER", "LAST", "SYNC", "MESSAGE"}))
		g.Expect(strings.Fields(lines[1])[:5]).To(Equal([]string{"api", "False", "main@sha1:0a1b2c3", "False", "in-cluster"}))
		g.Expect(lines[1]).To(ContainSubstring("revision main@sha1:badc0ff failed: health check"))
		g.Expect(strings.Fields(lines[2])[:5]).To(Equal([]string{"shop", "True", "main@sha1:0a1b2c3", "True", "prod-eu"}))
	})
	t.Run("all namespaces", func(t *testing.T) {
		g := NewWithT(t)
		out, errOut, code := cliRun(ctx, a.kubeconfig, "get", "-A")
		g.Expect(code).To(Equal(0), errOut)
		lines := strings.Split(strings.TrimSpace(out), "\n")
		g.Expect(lines).To(HaveLen(6))
		g.Expect(strings.Fields(lines[0])[0]).To(Equal("NAMESPACE"))
		var names []string
		for _, l := range lines[1:] {
			f := strings.Fields(l)
			names = append(names, f[0]+"/"+f[1]+":"+f[2])
		}
		g.Expect(names).To(Equal([]string{"team-a/api:False", "team-a/shop:True", "team-b/fresh:-",
			"team-b/legacy:Suspended", "team-b/web:True"}))
		g.Expect(lines[4]).To(ContainSubstring("suspended; applied revision sha1:0a1b2c3"))
		g.Expect(lines[5]).To(ContainSubstring("applying main@sha1:5eed5ee"))
	})
	t.Run("a set's SyncTargets and pull requests", func(t *testing.T) {
		g := NewWithT(t)
		a.namespace(t, "team-c")
		preview := tableFixtures()[0].DeepCopy()
		preview.Namespace, preview.Name = "team-c", "web-pr-7"
		preview.Labels = map[string]string{convergev1.SetLabel: "previews"}
		preview.ResourceVersion = ""
		a.create(t, preview)
		set := &convergev1.SyncTargetSet{ObjectMeta: metav1.ObjectMeta{Namespace: "team-c", Name: "previews"},
			Spec: convergev1.SyncTargetSetSpec{
				Generators: []convergev1.Generator{{List: &convergev1.ListGenerator{Elements: []map[string]string{{"a": "b"}}}}},
				Template: convergev1.SyncTargetTemplate{Metadata: convergev1.SyncTargetTemplateMeta{Name: "x"},
					Spec: apiextensionsv1.JSON{Raw: []byte(`{"source":{"url":"https://example.com/a.git","ref":{"branch":"main"}}}`)}}}}
		g.Expect(a.c.Create(ctx, set)).To(Succeed())
		set.Status.PullRequests = []convergev1.PullRequestState{
			{Number: 7, URL: "https://github.com/acme/web/pull/7", Author: "dana", Branch: "feature/x", SyncTargets: []string{"web-pr-7"}},
			{Number: 9, URL: "https://github.com/acme/web/pull/9", Author: "visitor", Branch: "evil\x1b[2J",
				Waiting: "from a fork: waits for a maintainer to add the label \"preview-approved\""}}
		g.Expect(a.c.Status().Update(ctx, set)).To(Succeed())

		out, errOut, code := cliRun(ctx, a.kubeconfig, "get", "-n", "team-c", "--set", "previews")
		g.Expect(code).To(Equal(0), errOut)
		blocks := strings.Split(strings.TrimSpace(out), "\n\n")
		g.Expect(blocks).To(HaveLen(2), out)
		targets := strings.Split(blocks[0], "\n")
		g.Expect(targets).To(HaveLen(2), "only the set's SyncTargets")
		g.Expect(strings.Fields(targets[1])[0]).To(Equal("web-pr-7"))
		prs := strings.Split(blocks[1], "\n")
		g.Expect(prs).To(HaveLen(3))
		g.Expect(prs[0]).To(HavePrefix("PULL REQUEST"))
		g.Expect(strings.Fields(prs[1])).To(Equal([]string{"#7", "dana", "feature/x", "web-pr-7", "True", "https://github.com/acme/web/pull/7"}))
		g.Expect(prs[2]).To(ContainSubstring(`from a fork: waits for a maintainer to add the label "preview-approved"`))
		g.Expect(out).NotTo(ContainSubstring("\x1b"), "what a forge says is never a terminal escape")

		_, errOut, code = cliRun(ctx, a.kubeconfig, "get", "-A", "--set", "previews")
		g.Expect(code).To(Equal(2))
		g.Expect(errOut).To(ContainSubstring("use -n NAMESPACE"))
	})
	t.Run("one by name as yaml and json", func(t *testing.T) {
		g := NewWithT(t)
		out, errOut, code := cliRun(ctx, a.kubeconfig, "get", "api", "-n", "team-a", "-o", "yaml")
		g.Expect(code).To(Equal(0), errOut)
		st := &convergev1.SyncTarget{}
		g.Expect(yaml.UnmarshalStrict([]byte(out), st)).To(Succeed())
		g.Expect(st.Kind).To(Equal("SyncTarget"))
		g.Expect(st.APIVersion).To(Equal("converge.dev/v1alpha1"))
		g.Expect(st.ManagedFields).To(BeEmpty())
		g.Expect(st.Status.History).To(HaveLen(1))
		g.Expect(st.Status.History[0].Result).To(Equal(convergev1.SyncRolledBack))

		out, errOut, code = cliRun(ctx, a.kubeconfig, "get", "-n", "team-b", "-o", "json")
		g.Expect(code).To(Equal(0), errOut)
		list := &convergev1.SyncTargetList{}
		g.Expect(yaml.Unmarshal([]byte(out), list)).To(Succeed())
		g.Expect(list.Kind).To(Equal("List"))
		g.Expect(list.Items).To(HaveLen(3))
		g.Expect(list.Items[0].Name).To(Equal("fresh"))
	})
	t.Run("missing", func(t *testing.T) {
		g := NewWithT(t)
		out, errOut, code := cliRun(ctx, a.kubeconfig, "get", "nope", "-n", "team-a")
		g.Expect(code).To(Equal(1))
		g.Expect(out).To(BeEmpty())
		g.Expect(errOut).To(Equal("converge: SyncTarget team-a/nope not found\n"))

		out, errOut, code = cliRun(ctx, a.kubeconfig, "get", "-n", "empty")
		g.Expect(code).To(Equal(0))
		g.Expect(out).To(BeEmpty())
		g.Expect(errOut).To(Equal("No SyncTargets found in namespace empty.\n"))

		_, errOut, code = cliRun(ctx, a.kubeconfig, "get", "api", "-A")
		g.Expect(code).To(Equal(2), errOut)
		_, errOut, code = cliRun(ctx, a.kubeconfig, "get", "-o", "wide")
		g.Expect(code).To(Equal(2), errOut)
		g.Expect(errOut).To(ContainSubstring("--output must be table, yaml or json"))
	})
	t.Run("watch", func(t *testing.T) {
		g := NewWithT(t)
		wctx, cancel := context.WithCancel(ctx)
		var out, errOut syncedBuffer
		cmd := newRootCommand()
		cmd.SetArgs([]string{"get", "-w", "-n", "team-a", "--kubeconfig", a.kubeconfig})
		cmd.SetOut(&out)
		cmd.SetErr(&errOut)
		done := make(chan error, 1)
		go func() { done <- cmd.ExecuteContext(wctx) }()
		defer func() {
			cancel()
			g.Eventually(done).WithTimeout(10 * time.Second).Should(Receive(BeNil()))
		}()

		g.Eventually(out.String).WithTimeout(10 * time.Second).Should(ContainSubstring("shop "))
		g.Expect(strings.Split(strings.TrimSpace(out.String()), "\n")).To(HaveLen(3))

		a.writeStatus(t, client.ObjectKey{Namespace: "team-a", Name: "shop"}, func(st *convergev1.SyncTarget) {
			st.Status.Conditions = append(st.Status.Conditions,
				cond(convergev1.ReconcilingCondition, metav1.ConditionTrue, convergev1.ProgressingReason, "applying main@sha1:"+shaNew))
		})
		g.Eventually(out.String).WithTimeout(10 * time.Second).Should(ContainSubstring("applying main@sha1:5eed5ee"))
		lines := strings.Split(strings.TrimSpace(out.String()), "\n")
		g.Expect(lines).To(HaveLen(4), "one row for the one change:\n%s", out.String())
		g.Expect(strings.Fields(lines[3])[:2]).To(Equal([]string{"shop", "True"}))
		g.Expect(strings.Index(lines[3], "main@sha1:0a1b2c3")).To(Equal(strings.Index(lines[0], "REVISION")), "aligned with the header")

		g.Expect(a.c.Delete(ctx, &convergev1.SyncTarget{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "api"}})).To(Succeed())
		g.Eventually(out.String).WithTimeout(10 * time.Second).Should(MatchRegexp(`\napi .*\(deleted\)\n$`))
	})
}
