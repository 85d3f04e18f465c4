package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
	"github.com/converge-gitops/converge/internal/charttest"
	"github.com/converge-gitops/converge/internal/gittest"
)

// chartTestFiles is a chart in Git with a test Pod that is deleted once it succeeded, and,
// when the values say failing, a second one, run after it.
var chartTestFiles = map[string]string{
	"charts/shop/Chart.yaml":  "apiVersion: v2\nname: shop\nversion: 1.2.3\n",
	"charts/shop/values.yaml": "failing: false\n",
	"charts/shop/templates/cm.yaml": `apiVersion: v1
kind: ConfigMap
metadata:
  name: {{ .Release.Name }}-config
data:
  greeting: hello
`,
	"charts/shop/templates/tests/ok.yaml": chartTestPod("ok", "0", "hook-succeeded"),
	"charts/shop/templates/tests/fail.yaml": "{{- if .Values.failing }}\n" +
		chartTestPod("fail", "5", "before-hook-creation") + "{{- end }}\n",
}

func chartTestPod(name, weight, policy string) string {
	return `apiVersion: v1
kind: Pod
metadata:
  name: {{ .Release.Name }}-test-` + name + `
  annotations:
    helm.sh/hook: test
    helm.sh/hook-weight: "` + weight + `"
    helm.sh/hook-delete-policy: ` + policy + `
spec:
  restartPolicy: Never
  automountServiceAccountToken: false
  containers:
  - name: test
    image: busybox
    command: ["wget", "-qO-", "http://{{ .Release.Name }}:80"]
`
}

// TestChartTest runs `converge test` against an API server and a chart in a local Git
// repository. The API server runs no kubelet: the test plays it, setting the phase of the
// test Pods the command creates.
func TestChartTest(t *testing.T) {
	t.Parallel()
	a := startAPIServer(t)
	a.namespace(t, "team-t")
	ctx := context.Background()
	if err := a.c.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default", Namespace: "team-t"}}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	gitRoot := t.TempDir()
	repo := gittest.NewRepo(t, gitRoot, "shop")
	srv := gittest.NewHTTPServer(t, gitRoot, gittest.HTTPOptions{})
	sha := repo.Commit(t, "main", chartTestFiles)
	for name, failing := range map[string]string{"pass": "false", "fail": "true"} {
		st := &convergev1.SyncTarget{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "team-t"},
			Spec: convergev1.SyncTargetSpec{
				Source: convergev1.GitSource{URL: srv.RepoURL(repo), Ref: convergev1.GitRef{Branch: "main"}},
				Path:   "charts/shop",
				Helm:   &convergev1.HelmSpec{Values: &apiextensionsv1.JSON{Raw: []byte(`{"failing":` + failing + `}`)}},
			},
			Status: convergev1.SyncTargetStatus{LastAppliedRevision: "main@sha1:" + sha},
		}
		a.create(t, st)
	}

	t.Run("passing", func(t *testing.T) {
		g := NewWithT(t)
		res := runChartTestCLI(t, a, "pass", map[string]corev1.PodPhase{"pass-test-ok": corev1.PodSucceeded})
		g.Expect(res.code).To(Equal(0), res.stderr)
		g.Expect(res.stdout).To(MatchRegexp(`^TEST +RESULT +DURATION +MESSAGE\nPod/pass-test-ok +Succeeded +[0-9.]+m?s +\n$`))
		// hook-succeeded: the Pod is gone once it passed.
		err := a.c.Get(ctx, client.ObjectKey{Namespace: "team-t", Name: "pass-test-ok"}, &corev1.Pod{})
		g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "the passed test Pod is deleted, got %v", err)
	})

	t.Run("failing", func(t *testing.T) {
		g := NewWithT(t)
		res := runChartTestCLI(t, a, "fail", map[string]corev1.PodPhase{
			"fail-test-ok": corev1.PodSucceeded, "fail-test-fail": corev1.PodFailed})
		g.Expect(res.code).To(Equal(1))
		g.Expect(res.stdout).To(MatchRegexp(`Pod/fail-test-ok +Succeeded +[0-9.]+m?s +\n`))
		g.Expect(res.stdout).To(MatchRegexp(`Pod/fail-test-fail +Failed +[0-9.]+m?s +pod failed\n$`))
		g.Expect(regexp.MustCompile(`test-ok[\s\S]*test-fail`).MatchString(res.stdout)).To(BeTrue(), "weight order")
		g.Expect(res.stderr).To(Equal("converge: 1 of 2 tests failed\n"))
		// before-hook-creation only: the failed Pod stays to be looked at.
		g.Expect(a.c.Get(ctx, client.ObjectKey{Namespace: "team-t", Name: "fail-test-fail"}, &corev1.Pod{})).To(Succeed())
	})

	t.Run("timeout", func(t *testing.T) {
		g := NewWithT(t)
		// No kubelet sets the phase: the test Pod runs until --timeout.
		stdout, stderr, code := cliRun(ctx, a.kubeconfig, "test", "pass", "-n", "team-t", "--timeout", "2s")
		g.Expect(code).To(Equal(1))
		g.Expect(stdout).To(MatchRegexp(`Pod/pass-test-ok +Failed +[0-9.]+m?s +timed out \(--timeout\)\n$`))
		g.Expect(stderr).To(Equal("converge: 1 of 1 tests failed\n"))
	})

	t.Run("chart of a chart repository", func(t *testing.T) {
		g := NewWithT(t)
		files := map[string]string{}
		for p, body := range chartTestFiles {
			files[strings.TrimPrefix(p, "charts/shop/")] = body
		}
		archive, err := charttest.Package("shop", files)
		g.Expect(err).NotTo(HaveOccurred())
		charts := charttest.NewHTTPRepo()
		t.Cleanup(charts.Close)
		charts.Add("shop", "1.2.3", archive)
		sum := sha256.Sum256(archive)
		a.create(t, &convergev1.SyncTarget{
			ObjectMeta: metav1.ObjectMeta{Name: "repo", Namespace: "team-t"},
			Spec:       convergev1.SyncTargetSpec{Chart: &convergev1.ChartSource{Repository: charts.URL(), Name: "shop", Version: "1.x"}},
			Status:     convergev1.SyncTargetStatus{LastAppliedRevision: "1.2.3@sha256:" + hex.EncodeToString(sum[:])},
		})
		res := runChartTestCLI(t, a, "repo", map[string]corev1.PodPhase{"repo-test-ok": corev1.PodSucceeded})
		g.Expect(res.code).To(Equal(0), res.stderr)
		g.Expect(res.stdout).To(MatchRegexp(`Pod/repo-test-ok +Succeeded`))
	})

	t.Run("refusals", func(t *testing.T) { chartTestRefusals(t, a) })
}

type cliResult struct {
	stdout, stderr string
	code           int
}

// runChartTestCLI runs `converge test NAME` and, as a kubelet would, sets the phase of
// each test Pod it creates.
func runChartTestCLI(t *testing.T, a *apiServer, name string, phases map[string]corev1.PodPhase) cliResult {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan cliResult, 1)
	go func() {
		stdout, stderr, code := cliRun(ctx, a.kubeconfig, "test", name, "-n", "team-t", "--timeout", "2m")
		done <- cliResult{stdout, stderr, code}
	}()
	g := NewWithT(t)
	// The command creates its test Pods one after the other, in weight order, each once
	// the one before has finished: each gets its phase as soon as it appears, whatever
	// order phases lists them in.
	set := map[string]bool{}
	g.Eventually(func(g Gomega) {
		for pod, phase := range phases {
			if set[pod] {
				continue
			}
			p := &corev1.Pod{}
			err := a.c.Get(ctx, client.ObjectKey{Namespace: "team-t", Name: pod}, p)
			if apierrors.IsNotFound(err) {
				continue
			}
			g.Expect(err).NotTo(HaveOccurred())
			p.Status.Phase = phase
			g.Expect(a.c.Status().Update(ctx, p)).To(Succeed())
			set[pod] = true
		}
		if len(set) < len(phases) && len(done) > 0 {
			StopTrying(fmt.Sprintf("the command returned before its test Pods ran: %d of %d seen", len(set), len(phases))).Now()
		}
		g.Expect(set).To(HaveLen(len(phases)))
	}).WithTimeout(time.Minute).WithPolling(100 * time.Millisecond).Should(Succeed())
	var res cliResult
	g.Eventually(done).WithTimeout(time.Minute).Should(Receive(&res))
	return res
}

// chartTestRefusals: what `converge test` cannot test is refused with a clear error.
func chartTestRefusals(t *testing.T, a *apiServer) {
	g := NewWithT(t)
	ctx := context.Background()
	a.create(t, &convergev1.SyncTarget{
		ObjectMeta: metav1.ObjectMeta{Name: "fresh", Namespace: "team-t"},
		Spec: convergev1.SyncTargetSpec{Source: convergev1.GitSource{
			URL: "https://example.com/shop", Ref: convergev1.GitRef{Branch: "main"}}},
	})
	for name, want := range map[string]string{
		"fresh":   "converge: SyncTarget team-t/fresh has applied no revision yet: there is nothing to test\n",
		"missing": "converge: SyncTarget team-t/missing not found\n",
	} {
		stdout, stderr, code := cliRun(ctx, a.kubeconfig, "test", name, "-n", "team-t")
		g.Expect(code).To(Equal(1), name)
		g.Expect(stdout).To(BeEmpty(), name)
		g.Expect(stderr).To(Equal(want), name)
	}
}

// TestTestFailureNamesTheTimeout: a test cut by --timeout says so, however the client
// said it: the context's error, or client-go's rate limiter refusing to wait past the
// deadline before it comes.
func TestTestFailureNamesTheTimeout(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	limiter := fmt.Errorf("client rate limiter Wait returned an error: %w", errors.New("rate: Wait(n=1) would exceed context deadline"))
	g.Expect(testFailure(ctx, limiter)).To(Equal("timed out (--timeout)"))
	g.Expect(testFailure(ctx, fmt.Errorf("get pod: %w", context.DeadlineExceeded))).To(Equal("timed out (--timeout)"))
	g.Expect(testFailure(ctx, errors.New("pod failed"))).To(Equal("pod failed"))
	done, cancel := context.WithCancel(ctx)
	cancel()
	g.Expect(testFailure(done, errors.New("anything"))).To(Equal("timed out (--timeout)"))
}
