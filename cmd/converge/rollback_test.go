package main

import (
	"context"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
)

// shaTwin shares its first 7 hex digits with shaGood.
const shaTwin = "0a1b2c3fffffffffffffffffffffffffffffffff"

func TestRollbackResolveRevision(t *testing.T) {
	st := &convergev1.SyncTarget{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web"},
		Status: convergev1.SyncTargetStatus{
			LastAppliedRevision: "main@sha1:" + shaGood,
			History: []convergev1.HistoryEntry{
				{Revision: "main@sha1:" + shaBad, Result: convergev1.SyncRolledBack},
				{Revision: "main@sha1:" + shaGood, Result: convergev1.SyncSucceeded},
				{Revision: "sha1:" + shaTwin, Result: convergev1.SyncSucceeded},
			},
		},
	}
	for _, tc := range []struct {
		to       string
		want     string
		wantErr  string
		wantCode int
	}{
		{to: "main@sha1:" + shaGood, want: shaGood},
		{to: "sha1:" + shaBad, want: shaBad},
		{to: shaNew, want: shaNew}, // a full SHA needs no history
		{to: "badc0ff", want: shaBad},
		{to: "BADC0FFEE", want: shaBad},
		{to: "0a1b2c3d", want: shaGood},
		{to: "0a1b2c3", wantCode: 1,
			wantErr: "0a1b2c3 is ambiguous in the history of default/web: it starts " + shaGood + ", " + shaTwin + "; give more digits"},
		{to: "1234567", wantCode: 1,
			wantErr: "no commit starting with 1234567 in the history of default/web (see converge history web)"},
		{to: "abc", wantCode: 2, wantErr: `--to "abc" is too short: give at least 7 hex digits of the commit`},
		{to: "main", wantCode: 2, wantErr: `--to "main" is neither a revision (main@sha1:<hex>) nor a commit SHA`},
		{to: "main@sha1:0a1b2c3", wantCode: 2, wantErr: `invalid revision "main@sha1:0a1b2c3": want sha1:<40 hex> or sha256:<64 hex>`},
	} {
		t.Run(tc.to, func(t *testing.T) {
			g := NewWithT(t)
			got, err := resolveRollbackCommit(st, tc.to)
			if tc.wantErr != "" {
				g.Expect(err).To(MatchError(tc.wantErr))
				g.Expect(exitCode(err)).To(Equal(tc.wantCode))
				return
			}
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(got).To(Equal(tc.want))
		})
	}
}

func TestRollbackPin(t *testing.T) {
	target := func(ref convergev1.GitRef, pinnedFrom string) *convergev1.SyncTarget {
		st := &convergev1.SyncTarget{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web"}}
		st.Spec.Source.Ref = ref
		if pinnedFrom != "" {
			st.Annotations = map[string]string{PinnedFromAnnotation: pinnedFrom}
		}
		return st
	}
	for _, tc := range []struct {
		name           string
		st             *convergev1.SyncTarget
		wantPinnedFrom string
		wantErr        string
	}{
		{name: "a branch is recorded", st: target(convergev1.GitRef{Branch: "main"}, ""), wantPinnedFrom: `{"branch":"main"}`},
		{name: "a semver range is recorded", st: target(convergev1.GitRef{SemVer: ">=1.0 <2"}, ""), wantPinnedFrom: `{"semver":"\u003e=1.0 \u003c2"}`},
		{name: "a commit pinned by hand is recorded", st: target(convergev1.GitRef{Commit: shaBad}, ""), wantPinnedFrom: `{"commit":"` + shaBad + `"}`},
		{name: "pinned again: the first recorded ref stays",
			st: target(convergev1.GitRef{Commit: shaBad}, `{"tag":"v1.2.0"}`), wantPinnedFrom: `{"tag":"v1.2.0"}`},
		{name: "a recorded ref on a SyncTarget that follows a branch again is refused",
			st:      target(convergev1.GitRef{Branch: "dev"}, `{"branch":"main"}`),
			wantErr: `SyncTarget default/web follows branch dev, not a pinned commit, yet records converge.dev/pinned-from={"branch":"main"}: remove the annotation (or run converge resume) first`},
		{name: "a broken annotation is refused", st: target(convergev1.GitRef{Commit: shaBad}, `main`),
			wantErr: "SyncTarget default/web: annotation converge.dev/pinned-from is not a ref: invalid character 'm' looking for beginning of value; fix or remove the annotation first"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			before := tc.st.DeepCopy()
			err := pin(tc.st, shaGood)
			if tc.wantErr != "" {
				g.Expect(err).To(MatchError(tc.wantErr))
				g.Expect(tc.st).To(Equal(before), "nothing changed")
				return
			}
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(tc.st.Spec.Source.Ref).To(Equal(convergev1.GitRef{Commit: shaGood}))
			g.Expect(tc.st.Annotations).To(Equal(map[string]string{PinnedFromAnnotation: tc.wantPinnedFrom}))
			g.Expect(recordedRef(tc.st)).To(Equal(mustPinnedFrom(t, tc.wantPinnedFrom)))
		})
	}
}

func mustPinnedFrom(t *testing.T, raw string) convergev1.GitRef {
	t.Helper()
	ref, err := parsePinnedFrom(raw)
	if err != nil {
		t.Fatal(err)
	}
	return ref
}

// cliProcess is a CLI command running in the background.
type cliProcess struct {
	out, errOut syncedBuffer
	done        chan error
}

func cliStart(ctx context.Context, kubeconfig string, args ...string) *cliProcess {
	p := &cliProcess{done: make(chan error, 1)}
	cmd := newRootCommand()
	cmd.SetArgs(append(args, "--kubeconfig", kubeconfig))
	cmd.SetOut(&p.out)
	cmd.SetErr(&p.errOut)
	go func() { p.done <- cmd.ExecuteContext(ctx) }()
	return p
}

// TestRollbackResumeSuspendAgainstAPIServer runs rollback, resume, suspend, history and
// reconcile against a real API server, the test writing the status the daemon would.
func TestRollbackResumeSuspendAgainstAPIServer(t *testing.T) {
	t.Parallel()
	a := startAPIServer(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	key := client.ObjectKey{Namespace: "default", Name: "web"}
	good, bad := "main@sha1:"+shaGood, "main@sha1:"+shaBad
	rolledBack := "revision " + bad + " failed: health check failed; rolled back to " + good + " (1 configured)"
	a.create(t, &convergev1.SyncTarget{
		ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name,
			Labels: map[string]string{"team": "shop"}, Annotations: map[string]string{"owner": "someone"}},
		Spec: convergev1.SyncTargetSpec{
			Source: convergev1.GitSource{URL: "https://git.example.com/shop.git", Ref: convergev1.GitRef{Branch: "main"}},
			Path:   "deploy",
		},
		Status: convergev1.SyncTargetStatus{
			Conditions: []metav1.Condition{
				cond(convergev1.ReadyCondition, metav1.ConditionFalse, convergev1.RolledBackReason, rolledBack),
				cond(convergev1.HealthyCondition, metav1.ConditionFalse, convergev1.RolledBackReason, rolledBack),
			},
			LastAppliedRevision: good, LastHealthyRevision: good, LastAttemptedRevision: bad, LastFetchedRevision: bad,
			History: []convergev1.HistoryEntry{
				{Revision: bad, StartedAt: metav1.NewTime(time.Now().Add(-10*time.Minute - 30*time.Second)), FinishedAt: &metav1.Time{Time: time.Now().Add(-10*time.Minute - 20*time.Second)},
					Result: convergev1.SyncRolledBack, Configured: 1, Message: rolledBack},
				{Revision: good, StartedAt: metav1.NewTime(time.Now().Add(-150*time.Minute - 30*time.Second)), FinishedAt: &metav1.Time{Time: time.Now().Add(-150*time.Minute - 10*time.Second)},
					Result: convergev1.SyncSucceeded, Created: 1, Message: "applied revision " + good + ": 1 created"},
			},
		},
	})
	get := func(g Gomega) *convergev1.SyncTarget {
		st := &convergev1.SyncTarget{}
		g.Expect(a.c.Get(ctx, key, st)).To(Succeed())
		return st
	}

	t.Run("history", func(t *testing.T) {
		g := NewWithT(t)
		out, errOut, code := cliRun(ctx, a.kubeconfig, "history", "web")
		g.Expect(code).To(Equal(0), errOut)
		lines := strings.Split(strings.TrimSpace(out), "\n")
		g.Expect(lines).To(HaveLen(3))
		g.Expect(strings.Fields(lines[0])).To(Equal([]string{"REVISION", "RESULT", "STARTED", "DURATION", "CHANGES", "MESSAGE"}))
		g.Expect(strings.Fields(lines[1])).To(HaveExactElements("main@sha1:badc0ff", "RolledBack", "10m", "10s", "+0", "~1", "-0",
			"revision", "main@sha1:badc0ff", "failed:", "health", "check", "failed;", "rolled", "back", "to", "main@sha1:0a1b2c3", "(1", "configured)"))
		g.Expect(strings.Fields(lines[2])[:7]).To(Equal([]string{"main@sha1:0a1b2c3", "Succeeded", "150m", "20s", "+1", "~0", "-0"}))

		out, errOut, code = cliRun(ctx, a.kubeconfig, "history", "web", "-o", "json")
		g.Expect(code).To(Equal(0), errOut)
		g.Expect(out).To(HavePrefix("[\n"))
		g.Expect(out).To(ContainSubstring(`"result": "RolledBack"`))

		_, errOut, code = cliRun(ctx, a.kubeconfig, "history", "nope")
		g.Expect(code).To(Equal(1))
		g.Expect(errOut).To(Equal("converge: SyncTarget default/nope not found\n"))
		_, _, code = cliRun(ctx, a.kubeconfig, "history")
		g.Expect(code).To(Equal(2))
	})

	t.Run("rollback pins and records the ref it followed", func(t *testing.T) {
		g := NewWithT(t)
		out, errOut, code := cliRun(ctx, a.kubeconfig, "rollback", "web", "--to", "0a1b2c3", "--wait=false")
		g.Expect(code).To(Equal(0), errOut)
		g.Expect(out).To(Equal("pinned SyncTarget default/web to commit " + shaGood + " (converge resume restores branch main)\n"))
		st := get(g)
		g.Expect(st.Spec.Source.Ref).To(Equal(convergev1.GitRef{Commit: shaGood}))
		g.Expect(st.Annotations).To(HaveKeyWithValue(PinnedFromAnnotation, `{"branch":"main"}`))
		g.Expect(st.Annotations).To(HaveKey(convergev1.RequestedAtAnnotation), "a revision rolled back before is retried")
		g.Expect(st.Annotations).To(HaveKeyWithValue("owner", "someone"))
		g.Expect(st.Labels).To(Equal(map[string]string{"team": "shop"}))
		g.Expect(st.Spec.Path).To(Equal("deploy"))

		// Pinned again: the ref recorded first stays.
		out, errOut, code = cliRun(ctx, a.kubeconfig, "rollback", "web", "--to", bad, "--wait=false")
		g.Expect(code).To(Equal(0), errOut)
		g.Expect(out).To(ContainSubstring("(converge resume restores branch main)"))
		st = get(g)
		g.Expect(st.Spec.Source.Ref).To(Equal(convergev1.GitRef{Commit: shaBad}))
		g.Expect(st.Annotations).To(HaveKeyWithValue(PinnedFromAnnotation, `{"branch":"main"}`))

		var completions strings.Builder
		complete := newRootCommand()
		complete.SetArgs([]string{"__complete", "rollback", "web", "--kubeconfig", a.kubeconfig, "--to", ""})
		complete.SetOut(&completions)
		g.Expect(complete.ExecuteContext(ctx)).To(Succeed())
		g.Expect(strings.SplitN(completions.String(), "\n", 4)[:3]).To(Equal([]string{bad + "\tRolledBack 10m ago", good + "\tSucceeded 150m ago", ":36"}),
			"--to completes the revisions of the history, newest first")

		_, errOut, code = cliRun(ctx, a.kubeconfig, "rollback", "web", "--to", "1234567", "--wait=false")
		g.Expect(code).To(Equal(1))
		g.Expect(errOut).To(Equal("converge: rolling back default/web: no commit starting with 1234567 in the history of default/web (see converge history web)\n"))
		_, errOut, code = cliRun(ctx, a.kubeconfig, "rollback", "web")
		g.Expect(code).To(Equal(2), "--to is required")
		g.Expect(errOut).To(HavePrefix("converge: --to REVISION is required"))
		g.Expect(get(g).Spec.Source.Ref).To(Equal(convergev1.GitRef{Commit: shaBad}), "a failed rollback changes nothing")
	})

	t.Run("suspend, and rollback refuses a suspended target", func(t *testing.T) {
		g := NewWithT(t)
		out, errOut, code := cliRun(ctx, a.kubeconfig, "suspend", "web")
		g.Expect(code).To(Equal(0), errOut)
		g.Expect(out).To(Equal("suspended SyncTarget default/web\n"))
		g.Expect(get(g).Spec.Suspend).To(BeTrue())

		out, _, code = cliRun(ctx, a.kubeconfig, "get", "web")
		g.Expect(code).To(Equal(0))
		g.Expect(strings.Fields(strings.Split(out, "\n")[1])[1]).To(Equal("Suspended"))

		_, errOut, code = cliRun(ctx, a.kubeconfig, "rollback", "web", "--to", good)
		g.Expect(code).To(Equal(1))
		g.Expect(errOut).To(ContainSubstring("SyncTarget default/web is suspended"))
		g.Expect(get(g).Spec.Source.Ref).To(Equal(convergev1.GitRef{Commit: shaBad}))

		_, errOut, code = cliRun(ctx, a.kubeconfig, "reconcile", "web")
		g.Expect(code).To(Equal(1))
		g.Expect(errOut).To(Equal("converge: SyncTarget default/web is suspended: run converge resume web -n default to let it sync again\n"))
	})

	t.Run("resume restores the recorded ref and un-suspends", func(t *testing.T) {
		g := NewWithT(t)
		out, errOut, code := cliRun(ctx, a.kubeconfig, "resume", "web", "--wait=false")
		g.Expect(code).To(Equal(0), errOut)
		g.Expect(out).To(Equal("resumed SyncTarget default/web: following branch main again, no longer suspended\n"))
		st := get(g)
		g.Expect(st.Spec.Source.Ref).To(Equal(convergev1.GitRef{Branch: "main"}))
		g.Expect(st.Spec.Suspend).To(BeFalse())
		g.Expect(st.Annotations).NotTo(HaveKey(PinnedFromAnnotation))
		g.Expect(st.Annotations).To(HaveKeyWithValue("owner", "someone"))

		out, errOut, code = cliRun(ctx, a.kubeconfig, "resume", "web", "--wait=false")
		g.Expect(code).To(Equal(0), errOut)
		g.Expect(out).To(Equal("resumed SyncTarget default/web: neither pinned nor suspended; requested a reconcile\n"))
	})

	// requestToken waits for a requestedAt other than before and returns it.
	requestToken := func(g Gomega, before string) string {
		var token string
		g.Eventually(func(g Gomega) {
			token = get(g).Annotations[convergev1.RequestedAtAnnotation]
			g.Expect(token).NotTo(Equal(before))
		}).WithTimeout(10 * time.Second).Should(Succeed())
		return token
	}

	t.Run("rollback waits through what the daemon writes", func(t *testing.T) {
		g := NewWithT(t)
		before := get(g).Annotations[convergev1.RequestedAtAnnotation]
		p := cliStart(ctx, a.kubeconfig, "rollback", "web", "--to", "sha1:"+shaGood, "--timeout", "60s")
		token := requestToken(g, before)
		g.Eventually(p.out.String).WithTimeout(10 * time.Second).Should(HaveSuffix("waiting for the daemon to take up the request\n"))

		a.writeStatus(t, key, func(st *convergev1.SyncTarget) {
			apimeta.SetStatusCondition(&st.Status.Conditions, cond(convergev1.ReconcilingCondition, metav1.ConditionTrue,
				convergev1.FetchFailedReason, "git ls-remote https://git.example.com/shop.git: connection refused"))
		})
		g.Eventually(p.out.String).WithTimeout(10 * time.Second).Should(
			HaveSuffix("FetchFailed: git ls-remote https://git.example.com/shop.git: connection refused (retrying)\n"))

		a.writeStatus(t, key, func(st *convergev1.SyncTarget) {
			st.Status.LastHandledReconcileAt = token
			apimeta.SetStatusCondition(&st.Status.Conditions, cond(convergev1.ReconcilingCondition, metav1.ConditionTrue,
				convergev1.ProgressingReason, "applying sha1:"+shaGood))
		})
		g.Eventually(p.out.String).WithTimeout(10 * time.Second).Should(HaveSuffix("applying sha1:0a1b2c3\n"))
		g.Consistently(p.done).WithTimeout(300*time.Millisecond).ShouldNot(Receive(), "not done while Reconciling")

		msg := "applied revision sha1:" + shaGood + ": 1 configured"
		a.writeStatus(t, key, func(st *convergev1.SyncTarget) {
			apimeta.RemoveStatusCondition(&st.Status.Conditions, convergev1.ReconcilingCondition)
			apimeta.SetStatusCondition(&st.Status.Conditions, cond(convergev1.ReadyCondition, metav1.ConditionTrue, convergev1.SucceededReason, msg))
		})
		g.Eventually(p.done).WithTimeout(10 * time.Second).Should(Receive(BeNil()))
		g.Expect(p.out.String()).To(Equal("pinned SyncTarget default/web to commit " + shaGood + " (converge resume restores branch main)\n" +
			"waiting for the daemon to take up the request\n" +
			"FetchFailed: git ls-remote https://git.example.com/shop.git: connection refused (retrying)\n" +
			"applying sha1:0a1b2c3\n" +
			"SyncTarget default/web is ready: applied revision sha1:0a1b2c3: 1 configured\n"))
		g.Expect(p.errOut.String()).To(BeEmpty())
	})

	t.Run("reconcile reports a failed sync with the reason", func(t *testing.T) {
		g := NewWithT(t)
		before := get(g).Annotations[convergev1.RequestedAtAnnotation]
		p := cliStart(ctx, a.kubeconfig, "reconcile", "web", "--timeout", "60s")
		token := requestToken(g, before)
		a.writeStatus(t, key, func(st *convergev1.SyncTarget) {
			st.Status.LastHandledReconcileAt = token
			st.Status.LastAttemptedRevision = "sha1:" + shaGood
			apimeta.SetStatusCondition(&st.Status.Conditions, cond(convergev1.ReconcilingCondition, metav1.ConditionTrue,
				convergev1.ProgressingReason, "applying sha1:"+shaGood))
		})
		g.Eventually(p.out.String).WithTimeout(10 * time.Second).Should(HaveSuffix("applying sha1:0a1b2c3\n"))
		failed := "revision sha1:" + shaGood + " failed: health check failed: 1 of 1 object failed: apps/v1 Deployment default/web (Failed)"
		a.writeStatus(t, key, func(st *convergev1.SyncTarget) {
			apimeta.RemoveStatusCondition(&st.Status.Conditions, convergev1.ReconcilingCondition)
			apimeta.SetStatusCondition(&st.Status.Conditions, cond(convergev1.ReadyCondition, metav1.ConditionFalse,
				convergev1.HealthCheckFailedReason, "the Ready message is not the one shown"))
			st.Status.History = append([]convergev1.HistoryEntry{{Revision: "sha1:" + shaGood, StartedAt: metav1.Now(),
				Result: convergev1.SyncFailed, Message: failed}}, st.Status.History...)
		})
		var err error
		g.Eventually(p.done).WithTimeout(10 * time.Second).Should(Receive(&err))
		g.Expect(exitCode(err)).To(Equal(1))
		g.Expect(err).To(MatchError("sync of default/web failed (HealthCheckFailed): " + failed))
	})

	t.Run("reconcile times out with the last message", func(t *testing.T) {
		g := NewWithT(t)
		start := time.Now()
		out, errOut, code := cliRun(ctx, a.kubeconfig, "reconcile", "web", "--timeout", "1s")
		g.Expect(code).To(Equal(1))
		g.Expect(time.Since(start)).To(BeNumerically("<", 10*time.Second))
		g.Expect(out).To(Equal("requested a reconcile of SyncTarget default/web\nwaiting for the daemon to take up the request\n"))
		g.Expect(errOut).To(Equal("converge: timed out after 1s waiting for SyncTarget default/web: " +
			"waiting for the daemon to take up the request (is converge serve running, and does it watch this SyncTarget?)\n"))
	})
}
