package main

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
	"github.com/converge-gitops/converge/internal/gittest"
	"github.com/converge-gitops/converge/internal/localcluster"
	"github.com/converge-gitops/converge/internal/localcluster/clustertest"
)

// TestReconcileObserveSync: how `converge reconcile --wait` reads each status the daemon
// writes around a request, with the request token "req-2".
func TestReconcileObserveSync(t *testing.T) {
	good, bad := "main@sha1:"+shaGood, "main@sha1:"+shaBad
	rolledBack := "revision " + bad + " failed: health check: Deployment default/web: ProgressDeadlineExceeded; rolled back to " + good + " (1 configured)"
	ready := cond(convergev1.ReadyCondition, metav1.ConditionTrue, convergev1.SucceededReason, "applied revision "+good+": 1 unchanged")
	applying := cond(convergev1.ReconcilingCondition, metav1.ConditionTrue, convergev1.ProgressingReason, "applying "+bad)
	for _, tc := range []struct {
		name        string
		mutate      func(st *convergev1.SyncTarget)
		wantMessage string // while waiting
		wantDone    bool
		wantErr     string // at a failed outcome
	}{{
		name:        "not taken up yet: a Ready from before does not count",
		mutate:      func(st *convergev1.SyncTarget) { st.Status.LastHandledReconcileAt = "req-1" },
		wantMessage: waitingForDaemon,
	}, {
		name: "the fetch fails before the request is taken up",
		mutate: func(st *convergev1.SyncTarget) {
			st.Status.Conditions = append(st.Status.Conditions, cond(convergev1.ReconcilingCondition, metav1.ConditionTrue,
				convergev1.FetchFailedReason, "git ls-remote https://git.example.com/shop.git: 503 Service Unavailable"))
		},
		wantMessage: "FetchFailed: git ls-remote https://git.example.com/shop.git: 503 Service Unavailable (retrying)",
	}, {
		name: "a dependency is not ready",
		mutate: func(st *convergev1.SyncTarget) {
			st.Status.Conditions = append(st.Status.Conditions, cond(convergev1.ReconcilingCondition, metav1.ConditionTrue,
				convergev1.DependencyNotReadyReason, "dependency default/platform is not ready"))
		},
		wantMessage: "DependencyNotReady: dependency default/platform is not ready (retrying)",
	}, {
		name: "outside the sync windows",
		mutate: func(st *convergev1.SyncTarget) {
			apimeta.SetStatusCondition(&st.Status.Conditions, cond(convergev1.ReadyCondition, metav1.ConditionFalse,
				convergev1.OutsideSyncWindowReason, "outside the sync windows; the next one opens at 2025-03-15T06:00:00Z"))
		},
		wantMessage: "waiting: outside the sync windows; the next one opens at 2025-03-15T06:00:00Z",
	}, {
		name: "taken up and applying",
		mutate: func(st *convergev1.SyncTarget) {
			st.Status.LastHandledReconcileAt = "req-2"
			st.Status.Conditions = append(st.Status.Conditions, applying)
		},
		wantMessage: "applying main@sha1:badc0ff",
	}, {
		name: "a failed prune is retried",
		mutate: func(st *convergev1.SyncTarget) {
			st.Status.LastHandledReconcileAt = "req-2"
			st.Status.Conditions = append(st.Status.Conditions, cond(convergev1.ReconcilingCondition, metav1.ConditionTrue,
				convergev1.PruneFailedReason, "revision "+bad+" applied, but pruning failed: forbidden (retrying)"))
		},
		wantMessage: "PruneFailed: revision main@sha1:badc0ff applied, but pruning failed: forbidden (retrying)",
	}, {
		name:     "ready",
		mutate:   func(st *convergev1.SyncTarget) { st.Status.LastHandledReconcileAt = "req-2" },
		wantDone: true, wantMessage: "applied revision main@sha1:0a1b2c3: 1 unchanged",
	}, {
		name: "rolled back",
		mutate: func(st *convergev1.SyncTarget) {
			st.Status.LastHandledReconcileAt = "req-2"
			st.Status.LastAttemptedRevision = bad
			apimeta.SetStatusCondition(&st.Status.Conditions, cond(convergev1.ReadyCondition, metav1.ConditionFalse,
				convergev1.RolledBackReason, rolledBack))
			st.Status.History = []convergev1.HistoryEntry{{Revision: bad, Result: convergev1.SyncRolledBack, Message: rolledBack}}
		},
		wantDone: true, wantErr: "sync of default/web failed (RolledBack): " + rolledBack,
	}, {
		name: "failed with nothing to roll back to: the history entry says why",
		mutate: func(st *convergev1.SyncTarget) {
			st.Status.LastHandledReconcileAt = "req-2"
			st.Status.LastAttemptedRevision = bad
			apimeta.SetStatusCondition(&st.Status.Conditions, cond(convergev1.ReadyCondition, metav1.ConditionFalse,
				convergev1.BuildFailedReason, "revision failed"))
			st.Status.History = []convergev1.HistoryEntry{{Revision: bad, Result: convergev1.SyncFailed,
				Message: "revision " + bad + " failed: kustomize build:\n  accumulating resources"}}
		},
		wantDone: true, wantErr: "sync of default/web failed (BuildFailed): revision " + bad + " failed: kustomize build: accumulating resources",
	}, {
		name:     "suspended",
		mutate:   func(st *convergev1.SyncTarget) { st.Spec.Suspend = true },
		wantDone: true, wantErr: "SyncTarget default/web is suspended: run converge resume web -n default to let it sync again",
	}, {
		name: "stalled on the current spec",
		mutate: func(st *convergev1.SyncTarget) {
			s := cond(convergev1.StalledCondition, metav1.ConditionTrue, convergev1.InvalidSpecReason, "spec.healthCheckExprs: undeclared reference")
			s.ObservedGeneration = 3
			st.Status.Conditions = append(st.Status.Conditions, s)
		},
		wantDone: true, wantErr: "SyncTarget default/web is stalled (InvalidSpec): spec.healthCheckExprs: undeclared reference",
	}, {
		name: "stalled on an older spec: the daemon has not looked at the new one yet",
		mutate: func(st *convergev1.SyncTarget) {
			s := cond(convergev1.StalledCondition, metav1.ConditionTrue, convergev1.InvalidSpecReason, "spec.healthCheckExprs: undeclared reference")
			s.ObservedGeneration = 2
			st.Status.Conditions = append(st.Status.Conditions, s)
		},
		wantMessage: waitingForDaemon,
	}, {
		name:     "being deleted",
		mutate:   func(st *convergev1.SyncTarget) { st.DeletionTimestamp = agoPtr(time.Second) },
		wantDone: true, wantErr: "SyncTarget default/web is being deleted",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			st := &convergev1.SyncTarget{
				ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web", Generation: 3},
				Status: convergev1.SyncTargetStatus{
					Conditions:          []metav1.Condition{ready},
					LastAppliedRevision: good, LastHealthyRevision: good, LastHandledReconcileAt: "req-1",
				},
			}
			tc.mutate(st)
			p := observeSync(st, "req-2")
			g.Expect(p.done).To(Equal(tc.wantDone))
			if tc.wantErr != "" {
				g.Expect(p.err).To(MatchError(tc.wantErr))
				return
			}
			g.Expect(p.err).NotTo(HaveOccurred())
			g.Expect(p.message).To(Equal(tc.wantMessage))
		})
	}
}

// stDeployment is a Deployment that becomes Available on a kwok node, or, with a
// nodeSelector no node matches, never does and fails its 5s progress deadline.
func stDeployment(name, nodeSelector string) string {
	sel := ""
	if nodeSelector != "" {
		sel = "      nodeSelector: {" + nodeSelector + "}\n"
	}
	return fmt.Sprintf(`apiVersion: apps/v1
kind: Deployment
metadata:
  name: %[1]s
spec:
  replicas: 1
  progressDeadlineSeconds: 5
  selector:
    matchLabels: {app: %[1]s}
  template:
    metadata:
      labels: {app: %[1]s}
    spec:
%[2]s      containers:
      - name: app
        image: example.com/%[1]s:1
`, name, sel)
}

// TestReconcileWithDaemon runs the CLI against the real daemon binary on a local cluster
// with kwok nodes: reconcile --wait exits 0 on a good revision and 1, naming RolledBack
// and the reason, on one whose Deployment never becomes Available; rollback --to brings
// the good revision back and waits for it; resume follows the branch (and its bad
// revision) again.
func TestReconcileWithDaemon(t *testing.T) {
	t.Parallel()
	ctrl.SetLogger(logr.Discard()) // envtest logs through controller-runtime
	cluster := clustertest.Start(t, localcluster.Options{Workloads: true, Nodes: 1, CRDDirectoryPaths: []string{clustertest.CRDDir()}})
	scheme := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(scheme)
	_ = convergev1.AddToScheme(scheme)
	c, err := client.New(cluster.Config, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	kubeconfig := cluster.Kubeconfig
	root := t.TempDir()
	repo := gittest.NewRepo(t, root, "app")
	srv := gittest.NewHTTPServer(t, root, gittest.HTTPOptions{})
	good := repo.Commit(t, "main", map[string]string{"deploy/web.yaml": stDeployment("web", "")})

	ctx := context.Background()
	key := client.ObjectKey{Namespace: "default", Name: "web"}
	st := &convergev1.SyncTarget{
		ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name},
		Spec: convergev1.SyncTargetSpec{
			Source: convergev1.GitSource{URL: srv.RepoURL(repo), Ref: convergev1.GitRef{Branch: "main"},
				Interval: &metav1.Duration{Duration: time.Second}},
			Path: "deploy", TargetNamespace: "default", Prune: true,
			Timeout: &metav1.Duration{Duration: 30 * time.Second},
		},
	}
	if err := c.Create(ctx, st); err != nil {
		t.Fatal(err)
	}
	d := serve(t, kubeconfig)
	daemonLog := func() string {
		d.mu.Lock()
		defer d.mu.Unlock()
		return d.out.String()
	}
	g := NewWithT(t)
	latest := func(g Gomega) *convergev1.SyncTarget {
		out := &convergev1.SyncTarget{}
		g.Expect(c.Get(ctx, key, out)).To(Succeed())
		return out
	}
	nodeSelector := func() map[string]string {
		dep := &appsv1.Deployment{}
		g.Expect(c.Get(ctx, key, dep)).To(Succeed())
		return dep.Spec.Template.Spec.NodeSelector
	}

	// A good revision: ready.
	start := time.Now()
	out, errOut, code := cliRun(ctx, kubeconfig, "reconcile", "web", "-n", "default", "--timeout", "90s")
	g.Expect(code).To(Equal(0), "stdout:\n%s\nstderr:\n%s\ndaemon:\n%s", out, errOut, daemonLog())
	t.Logf("reconcile of the good revision took %s:\n%s", time.Since(start).Round(100*time.Millisecond), out)
	g.Expect(out).To(HavePrefix("requested a reconcile of SyncTarget default/web\n"))
	// 1 created when the daemon's first sync took the request up, 1 unchanged when it came after.
	g.Expect(out).To(MatchRegexp(`\nSyncTarget default/web is ready: applied revision main@sha1:%s: 1 (created|unchanged)\n$`, good[:7]))
	g.Expect(errOut).To(BeEmpty())

	// A revision whose Deployment never becomes Available: rolled back, and reconcile says so.
	bad := repo.Commit(t, "main", map[string]string{"deploy/web.yaml": stDeployment("web", "no-such-node: anywhere")})
	g.Eventually(func(g Gomega) {
		g.Expect(latest(g).Status.LastAttemptedRevision).To(Equal("main@sha1:" + bad))
	}).WithTimeout(30*time.Second).WithPolling(200*time.Millisecond).Should(Succeed(), "the daemon has seen the bad revision")
	start = time.Now()
	cmd := exec.Command(binary, "reconcile", "web", "-n", "default", "--timeout", "90s", "--kubeconfig", kubeconfig)
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err = cmd.Run()
	t.Logf("reconcile of the bad revision took %s:\n%s%s", time.Since(start).Round(100*time.Millisecond), stdout.String(), stderr.String())
	var exitErr *exec.ExitError
	g.Expect(errors.As(err, &exitErr)).To(BeTrue(), "exits non-zero: %v\n%s", err, daemonLog())
	g.Expect(exitErr.ExitCode()).To(Equal(1))
	g.Expect(stderr.String()).To(MatchRegexp(`^converge: sync of default/web failed \(RolledBack\): revision main@sha1:%s failed: .*Deployment default/web.*; rolled back to main@sha1:%s \(.*\)\n$`, bad, good))
	// The apply is over at once (no line for it); the health wait lasts, and is shown.
	g.Expect(stdout.String()).To(ContainSubstring("waiting for 1 objects of main@sha1:" + bad[:7] + " to become ready\n"))
	g.Expect(nodeSelector()).To(BeEmpty(), "the good revision is back")

	out, errOut, code = cliRun(ctx, kubeconfig, "history", "web")
	g.Expect(code).To(Equal(0), errOut)
	rows := strings.Split(strings.TrimSpace(out), "\n")
	g.Expect(len(rows)).To(BeNumerically(">=", 4), out)
	g.Expect(strings.Fields(rows[1])[:2]).To(Equal([]string{"main@sha1:" + bad[:7], "RolledBack"}), out)

	// Pin the good revision: back to Ready, on the pinned commit.
	out, errOut, code = cliRun(ctx, kubeconfig, "rollback", "web", "--to", good[:7], "--timeout", "90s")
	g.Expect(code).To(Equal(0), "stdout:\n%s\nstderr:\n%s\ndaemon:\n%s", out, errOut, daemonLog())
	g.Expect(out).To(HavePrefix(fmt.Sprintf("pinned SyncTarget default/web to commit %s (converge resume restores branch main)\n", good)))
	g.Expect(out).To(ContainSubstring("SyncTarget default/web is ready: applied revision sha1:" + good[:7]))
	pinned := latest(g)
	g.Expect(pinned.Spec.Source.Ref).To(Equal(convergev1.GitRef{Commit: good}))
	g.Expect(pinned.Annotations).To(HaveKeyWithValue(PinnedFromAnnotation, `{"branch":"main"}`))
	g.Expect(pinned.Status.LastHealthyRevision).To(Equal("sha1:" + good))
	g.Expect(apimeta.IsStatusConditionTrue(pinned.Status.Conditions, convergev1.ReadyCondition)).To(BeTrue())
	g.Expect(nodeSelector()).To(BeEmpty())

	// Resume: the branch again, whose head is still the bad revision.
	out, errOut, code = cliRun(ctx, kubeconfig, "resume", "web", "--timeout", "90s")
	g.Expect(code).To(Equal(1), "stdout:\n%s\nstderr:\n%s", out, errOut)
	g.Expect(out).To(HavePrefix("resumed SyncTarget default/web: following branch main again\n"))
	g.Expect(errOut).To(ContainSubstring("(RolledBack): revision main@sha1:" + bad))
	resumed := latest(g)
	g.Expect(resumed.Spec.Source.Ref).To(Equal(convergev1.GitRef{Branch: "main"}))
	g.Expect(resumed.Annotations).NotTo(HaveKey(PinnedFromAnnotation))

	// Suspended: reconcile refuses at once.
	_, errOut, code = cliRun(ctx, kubeconfig, "suspend", "web")
	g.Expect(code).To(Equal(0), errOut)
	start = time.Now()
	_, errOut, code = cliRun(ctx, kubeconfig, "reconcile", "web")
	g.Expect(code).To(Equal(1))
	g.Expect(errOut).To(Equal("converge: SyncTarget default/web is suspended: run converge resume web -n default to let it sync again\n"))
	g.Expect(time.Since(start)).To(BeNumerically("<", 5*time.Second))
}

// TestReconcileClosedSyncWindow: a wait that the sync windows would outlast fails at once.
func TestReconcileClosedSyncWindow(t *testing.T) {
	g := NewWithT(t)
	st := &convergev1.SyncTarget{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web"}}
	st.Spec.SyncWindows = []convergev1.SyncWindow{{Kind: convergev1.AllowWindow, Schedule: "0 3 * * *",
		Duration: metav1.Duration{Duration: time.Hour}}}
	noon := time.Date(2025, 3, 14, 12, 0, 0, 0, time.UTC)
	g.Expect(closedWindowError(st, noon, noon.Add(5*time.Minute))).To(MatchError(
		"SyncTarget default/web is outside its sync windows until 2025-03-15T03:00:00Z: the daemon takes the request up then"))

	early := time.Date(2025, 3, 15, 2, 58, 0, 0, time.UTC)
	g.Expect(closedWindowError(st, early, early.Add(5*time.Minute))).To(Succeed(), "the window opens before the deadline")
	g.Expect(closedWindowError(st, early.Add(time.Hour), early.Add(time.Hour+time.Minute))).To(Succeed(), "inside the window")
	st.Spec.SyncWindows = nil
	g.Expect(closedWindowError(st, noon, noon.Add(5*time.Minute))).To(Succeed())
}

// TestReconcileProgressOnTerminal: on a terminal each step is one live line, rewritten
// in place, that stays behind with its time when the next step begins.
func TestReconcileProgressOnTerminal(t *testing.T) {
	var out strings.Builder
	now := stNow
	p := &progressLine{out: &out, tty: true, now: func() time.Time { return now }}
	_ = p.update(waitingForDaemon)
	now = now.Add(time.Second)
	p.redraw()
	_ = p.update(waitingForDaemon)
	now = now.Add(time.Second)
	_ = p.update("applying main@sha1:0a1b2c3")
	now = now.Add(12 * time.Second)
	p.redraw()
	_ = p.succeed("SyncTarget default/web is ready: applied revision main@sha1:0a1b2c3: 1 configured")
	want := "\r\x1b[K⠙ waiting for the daemon to take up the request (0s)" +
		"\r\x1b[K⠹ waiting for the daemon to take up the request (1s)" +
		"\r\x1b[K  waiting for the daemon to take up the request (2s)\n" +
		"\r\x1b[K⠸ applying main@sha1:0a1b2c3 (0s)" +
		"\r\x1b[K⠼ applying main@sha1:0a1b2c3 (12s)" +
		"\r\x1b[K  applying main@sha1:0a1b2c3 (12s)\n" +
		"✓ SyncTarget default/web is ready: applied revision main@sha1:0a1b2c3: 1 configured\n"
	if got := out.String(); got != want {
		t.Errorf("got  %q\nwant %q", got, want)
	}
}
