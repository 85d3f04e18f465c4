package reconciler

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clocktesting "k8s.io/utils/clock/testing"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
	"github.com/converge-gitops/converge/sources"
	"github.com/converge-gitops/converge/sources/charts"
	"github.com/converge-gitops/converge/sync/remote"
	"github.com/converge-gitops/converge/sync/render"
	"github.com/converge-gitops/converge/sync/target"
)

func TestClassify(t *testing.T) {
	gr := schema.GroupResource{Resource: "configmaps"}
	for _, tc := range []struct {
		name   string
		phase  phase
		err    error
		reason string
		then   then
		rolls  bool
	}{
		{name: "invalid source stalls", phase: phaseResolve, err: fmt.Errorf("x: %w", sources.ErrInvalidSource),
			reason: convergev1.FetchFailedReason, then: stall},
		{name: "unreachable source waits for the poller", phase: phaseResolve, err: sources.ErrUnreachable,
			reason: convergev1.FetchFailedReason, then: waitSource},
		{name: "missing ref waits for the poller", phase: phaseResolve, err: sources.ErrRefNotFound,
			reason: convergev1.FetchFailedReason, then: waitSource},
		{name: "unreadable credentials secret is retried", phase: phaseResolve, err: apierrors.NewNotFound(gr, "creds"),
			reason: convergev1.FetchFailedReason, then: retry},
		{name: "checkout failure is retried", phase: phaseCheckout, err: sources.ErrTimeout,
			reason: convergev1.FetchFailedReason, then: retry},
		{name: "a commit over the caps fails the revision", phase: phaseCheckout, err: sources.ErrLimitExceeded,
			reason: convergev1.FetchFailedReason, then: failRevision},
		{name: "a signature that does not verify fails the revision", phase: phaseVerify,
			err:    &sources.VerificationError{Object: "commit 0a1b", Reason: "is not signed"},
			reason: convergev1.VerificationFailedReason, then: failRevision},
		{name: "trusted keys that cannot work stall", phase: phaseVerify, err: fmt.Errorf("x: %w", sources.ErrInvalidSource),
			reason: convergev1.VerificationFailedReason, then: stall},
		{name: "a missing trusted keys secret is retried", phase: phaseVerify, err: apierrors.NewNotFound(gr, "keys"),
			reason: convergev1.VerificationFailedReason, then: retry},
		{name: "fetching the signed objects is retried", phase: phaseVerify, err: sources.ErrUnreachable,
			reason: convergev1.VerificationFailedReason, then: retry},
		{name: "render failure fails the revision", phase: phaseRender, err: render.ErrKustomize,
			reason: convergev1.BuildFailedReason, then: failRevision},
		{name: "an undecryptable file fails the revision", phase: phaseRender, err: &render.Error{File: "s.yaml", Err: fmt.Errorf("%w: MAC mismatch", render.ErrDecryption)},
			reason: convergev1.DecryptionFailedReason, then: failRevision},
		{name: "a missing decryption Secret is retried", phase: phaseRender,
			err:    &render.Error{Err: fmt.Errorf("%w: reading the decryption Secret: %w", render.ErrDecryption, apierrors.NewNotFound(gr, "keys"))},
			reason: convergev1.DecryptionFailedReason, then: retry},
		{name: "apply refused rolls back", phase: phaseApply, err: apierrors.NewInvalid(schema.GroupKind{Kind: "ConfigMap"}, "a", nil),
			reason: convergev1.ApplyFailedReason, then: failRevision, rolls: true},
		{name: "apply forbidden rolls back", phase: phaseApply, err: apierrors.NewForbidden(gr, "a", errors.New("no")),
			reason: convergev1.ApplyFailedReason, then: failRevision, rolls: true},
		{name: "API server unavailable is retried", phase: phaseApply, err: apierrors.NewServiceUnavailable("down"),
			reason: convergev1.ApplyFailedReason, then: retry},
		{name: "an internal error of the API server is the object's (invalid typed patch)", phase: phaseApply,
			err:    apierrors.NewInternalError(errors.New("failed to create typed patch object")),
			reason: convergev1.ApplyFailedReason, then: failRevision, rolls: true},
		{name: "API server throttling is retried", phase: phaseApply, err: apierrors.NewTooManyRequests("slow down", 1),
			reason: convergev1.ApplyFailedReason, then: retry},
		{name: "apply deadline fails the revision", phase: phaseApply, err: context.DeadlineExceeded,
			reason: convergev1.ApplyFailedReason, then: failRevision, rolls: true},
		{name: "failed deletes are retried", phase: phasePrune, err: fmt.Errorf("%w: x", errRetryPrune),
			reason: convergev1.PruneFailedReason, then: retry},
		{name: "unhealthy rolls back", phase: phaseHealth, err: errors.New("health check timed out"),
			reason: convergev1.HealthCheckFailedReason, then: failRevision, rolls: true},
		{name: "status write failure is retried", phase: phaseStatus, err: errors.New("conflict"),
			reason: convergev1.ApplyFailedReason, then: retry},
		{name: "an invalid source at checkout stalls", phase: phaseCheckout, err: fmt.Errorf("x: %w", sources.ErrInvalidSource),
			reason: convergev1.FetchFailedReason, then: stall},
		{name: "a checkout over a cap fails the revision", phase: phaseCheckout,
			err:    fmt.Errorf("x: %w", &sources.LimitError{Limit: "MaxFiles", Max: 1}),
			reason: convergev1.FetchFailedReason, then: failRevision},
		{name: "a bad chart archive fails the revision", phase: phaseCheckout, err: fmt.Errorf("x: %w", charts.ErrBadArchive),
			reason: convergev1.FetchFailedReason, then: failRevision},
		{name: "a substitution failure fails the revision with its reason", phase: phaseRender,
			err:    &render.Error{Err: fmt.Errorf("%w: FOO is not set", render.ErrSubstitution)},
			reason: convergev1.SubstitutionFailedReason, then: failRevision},
		{name: "a remote cluster away is retried, not rolled back", phase: phaseApply,
			err:    fmt.Errorf("apply: %w", &remote.UnreachableError{Cluster: "ns/kubeconfig", Err: errors.New("no route")}),
			reason: convergev1.ApplyFailedReason, then: retry},
		{name: "a remote server that is no API server is retried", phase: phaseApply,
			err:    &remote.NotAPIServerError{Host: "10.0.0.1", Code: 302, Redirect: true},
			reason: convergev1.ApplyFailedReason, then: retry},
		{name: "an invalid source when resolving stalls", phase: phaseResolve,
			err:    &sources.Error{Op: "list refs of", URL: "https://x", Kind: sources.ErrInvalidSource},
			reason: convergev1.FetchFailedReason, then: stall},
		{name: "a checkout cap when resolving waits for the source: no revision to fail", phase: phaseResolve,
			err:    fmt.Errorf("x: %w", sources.ErrLimitExceeded),
			reason: convergev1.FetchFailedReason, then: waitSource},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			f := classify(tc.phase, tc.err)
			g.Expect(f.reason).To(Equal(tc.reason))
			g.Expect(f.then).To(Equal(tc.then))
			g.Expect(f.rollsBack()).To(Equal(tc.rolls))
			g.Expect(f.err).To(Equal(tc.err))
		})
	}
}

// condition is a condition's status and reason, "" when it is absent.
func condition(st *convergev1.SyncTarget, typ string) string {
	c := apimeta.FindStatusCondition(st.Status.Conditions, typ)
	if c == nil {
		return ""
	}
	return string(c.Status) + "/" + c.Reason
}

func TestSummarize(t *testing.T) {
	now := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	started := now.Add(-1500 * time.Millisecond)
	a := func() *attempt { return &attempt{started: started, created: 2, configured: 1, deleted: 3} }
	transient := errors.New("the API server is away")
	interval := time.Minute
	for _, tc := range []struct {
		name                               string
		o                                  outcome
		ready, reconciling, stalled, healt string
		final                              bool
		history                            convergev1.SyncResult
		event                              string
		requeue                            ctrl.Result
		err                                error
	}{
		{name: "succeeded", o: outcome{kind: succeeded, revision: revR, message: "applied", attempt: a()},
			ready: "True/Succeeded", healt: "True/Succeeded", final: true, history: convergev1.SyncSucceeded,
			event: "Normal/Succeeded", requeue: ctrl.Result{RequeueAfter: interval}},
		{name: "rolled back", o: outcome{kind: rolledBack, reason: convergev1.RolledBackReason, revision: revR, attempt: a()},
			ready: "False/RolledBack", healt: "False/RolledBack", final: true, history: convergev1.SyncRolledBack,
			event: "Warning/RolledBack", requeue: ctrl.Result{RequeueAfter: interval}},
		{name: "health failed, nothing to roll back to", o: fromFailure(classify(phaseHealth, errors.New("x")), revR, a(), "m"),
			ready: "False/HealthCheckFailed", healt: "False/HealthCheckFailed", final: true, history: convergev1.SyncFailed,
			event: "Warning/HealthCheckFailed", requeue: ctrl.Result{RequeueAfter: interval}},
		{name: "build failed", o: fromFailure(classify(phaseRender, errors.New("x")), revR, a(), "m"),
			ready: "False/BuildFailed", final: true, history: convergev1.SyncFailed,
			event: "Warning/BuildFailed", requeue: ctrl.Result{RequeueAfter: interval}},
		{name: "source unreachable", o: fromFailure(classify(phaseResolve, sources.ErrUnreachable), "", nil, "m"),
			ready: "False/FetchFailed", reconciling: "True/FetchFailed", event: "Warning/FetchFailed",
			requeue: ctrl.Result{RequeueAfter: interval}},
		{name: "transient apply failure", o: fromFailure(classify(phaseApply, apierrors.NewServiceUnavailable("x")), revR, a(), "m"),
			ready: "False/ApplyFailed", reconciling: "True/ApplyFailed", event: "Warning/ApplyFailed",
			err: apierrors.NewServiceUnavailable("x")},
		{name: "invalid source", o: func() outcome {
			o := fromFailure(classify(phaseResolve, sources.ErrInvalidSource), "", nil, "m")
			o.after = interval
			return o
		}(), ready: "False/FetchFailed", stalled: "True/FetchFailed", final: true, event: "Warning/FetchFailed",
			requeue: ctrl.Result{RequeueAfter: interval}},
		{name: "invalid spec", o: outcome{kind: stalled, reason: convergev1.InvalidSpecReason, message: "m"},
			ready: "False/InvalidSpec", stalled: "True/InvalidSpec", final: true, event: "Warning/InvalidSpec"},
		{name: "superseded", o: outcome{kind: superseded, reason: supersededReason, revision: revR, attempt: a()},
			reconciling: "True/Superseded", ready: "Unknown/Superseded", history: convergev1.SyncFailed,
			event: "Normal/Superseded", requeue: ctrl.Result{RequeueAfter: time.Millisecond}},
		{name: "dependency not ready", o: outcome{kind: waitingDependency, reason: convergev1.DependencyNotReadyReason, after: 5 * time.Second},
			ready: "False/DependencyNotReady", reconciling: "True/DependencyNotReady", requeue: ctrl.Result{RequeueAfter: 5 * time.Second}},
		{name: "outside the sync windows", o: outcome{kind: outsideWindow, reason: convergev1.OutsideSyncWindowReason, after: time.Second},
			ready: "False/OutsideSyncWindow", requeue: ctrl.Result{RequeueAfter: time.Second}},
		{name: "fetching", o: outcome{kind: progressing, reason: convergev1.ProgressingReason, after: 250 * time.Millisecond},
			ready: "Unknown/Progressing", reconciling: "True/Progressing", requeue: ctrl.Result{RequeueAfter: 250 * time.Millisecond}},
		{name: "polling", o: outcome{kind: polling, reason: convergev1.ProgressingReason, after: 250 * time.Millisecond},
			requeue: ctrl.Result{RequeueAfter: 250 * time.Millisecond}},
		{name: "idle", o: outcome{kind: idle}, requeue: ctrl.Result{RequeueAfter: interval}},
		{name: "drift restored", o: outcome{kind: idle, restored: 2}, event: "Normal/DriftCorrected",
			requeue: ctrl.Result{RequeueAfter: interval}},
		{name: "restoring drift failed", o: outcome{kind: idle, reason: convergev1.ApplyFailedReason, err: transient},
			event: "Warning/ApplyFailed", err: transient},
		{name: "suspended", o: outcome{kind: suspended}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			st := syncTarget(func(st *convergev1.SyncTarget) { st.Generation, st.Status.ObservedGeneration = 3, 2 })
			fx := summarize(st, tc.o, now, interval)
			g.Expect(condition(st, convergev1.ReadyCondition)).To(Equal(tc.ready), "Ready")
			g.Expect(condition(st, convergev1.ReconcilingCondition)).To(Equal(tc.reconciling), "Reconciling")
			g.Expect(condition(st, convergev1.StalledCondition)).To(Equal(tc.stalled), "Stalled")
			g.Expect(condition(st, convergev1.HealthyCondition)).To(Equal(tc.healt), "Healthy")
			g.Expect(st.Status.ObservedGeneration == 3).To(Equal(tc.final), "observedGeneration set only when final")
			g.Expect(fx.result).To(Equal(tc.history))
			if tc.history == "" {
				g.Expect(st.Status.History).To(BeEmpty())
			} else {
				g.Expect(st.Status.History).To(HaveLen(1))
				e := st.Status.History[0]
				g.Expect(e.Result).To(Equal(tc.history))
				g.Expect(e.Revision).To(Equal(tc.o.revision))
				g.Expect(e.Duration.Duration).To(Equal(1500*time.Millisecond), "kept to the millisecond")
				g.Expect([]int32{e.Created, e.Configured, e.Deleted}).To(Equal([]int32{2, 1, 3}))
			}
			event := ""
			if fx.eventReason != "" {
				event = fx.eventType + "/" + fx.eventReason
			}
			g.Expect(event).To(Equal(tc.event))
			g.Expect(fx.requeue).To(Equal(tc.requeue))
			if tc.err == nil {
				g.Expect(fx.err).ToNot(HaveOccurred())
			} else {
				g.Expect(fx.err).To(Equal(tc.err))
			}
		})
	}
}

// A stall is reported by an event once, not at every look.
func TestSummarizeStalledEventOnce(t *testing.T) {
	g := NewWithT(t)
	st := syncTarget()
	o := outcome{kind: stalled, reason: convergev1.InvalidSpecReason, message: "bad"}
	g.Expect(summarize(st, o, time.Now(), time.Minute).eventReason).To(Equal(convergev1.InvalidSpecReason))
	g.Expect(summarize(st, o, time.Now(), time.Minute).eventReason).To(BeEmpty())
	o.message = "worse"
	g.Expect(summarize(st, o, time.Now(), time.Minute).eventReason).To(Equal(convergev1.InvalidSpecReason))
}

// A success clears a Stalled left by an earlier spec.
func TestSummarizeSuccessClearsStalled(t *testing.T) {
	g := NewWithT(t)
	st := syncTarget()
	summarize(st, outcome{kind: stalled, reason: convergev1.InvalidSpecReason}, time.Now(), time.Minute)
	summarize(st, outcome{kind: succeeded, revision: revR, attempt: &attempt{}}, time.Now(), time.Minute)
	g.Expect(condition(st, convergev1.StalledCondition)).To(BeEmpty())
	g.Expect(condition(st, convergev1.ReadyCondition)).To(Equal("True/Succeeded"))
}

func TestHistoryIsCappedNewestFirst(t *testing.T) {
	g := NewWithT(t)
	st := &convergev1.SyncTarget{}
	limit := int32(3)
	st.Spec.HistoryLimit = &limit
	for i := range 5 {
		addHistory(st, convergev1.HistoryEntry{Revision: fmt.Sprintf("main@sha1:%d", i), Result: convergev1.SyncSucceeded})
	}
	g.Expect(st.Status.History).To(HaveLen(3))
	g.Expect(st.Status.History[0].Revision).To(Equal("main@sha1:4"))
	g.Expect(st.Status.History[2].Revision).To(Equal("main@sha1:2"))

	st.Spec.HistoryLimit = nil // the default, 10
	for i := range 12 {
		addHistory(st, convergev1.HistoryEntry{Revision: fmt.Sprint(i)})
	}
	g.Expect(st.Status.History).To(HaveLen(convergev1.DefaultHistoryLimit))
	g.Expect(st.Status.Attempts).To(BeEquivalentTo(17), "every attempt counted, past the cap")
	g.Expect(target.ReleaseRevision(st)).To(Equal(18), "a chart's .Release.Revision keeps growing")

	old := &convergev1.SyncTarget{Status: convergev1.SyncTargetStatus{History: st.Status.History}}
	addHistory(old, convergev1.HistoryEntry{Revision: "next"})
	g.Expect(old.Status.Attempts).To(BeEquivalentTo(convergev1.DefaultHistoryLimit+1),
		"a status written before the counter counts from its history")
}

func TestStatesForget(t *testing.T) {
	g := NewWithT(t)
	var s states
	a, b := client.ObjectKey{Namespace: "ns", Name: "a"}, client.ObjectKey{Namespace: "ns", Name: "b"}
	s.get(a).lastWrite = "1"
	s.get(b).fetched = revisionSeen{revision: revR, at: time.Now()}
	g.Expect(s.get(a).lastWrite).To(Equal("1"), "state is kept between reconciles")
	s.forget(a)
	g.Expect(s.len()).To(Equal(1), "forget drops the whole entry")
	g.Expect(s.get(a).lastWrite).To(BeEmpty())
}

// fakeCommits tells the commit time of every revision (a pure test's Fetcher).
type fakeCommits struct {
	Fetcher
	at time.Time
}

func (f fakeCommits) CommitTime(*convergev1.SyncTarget, string) (time.Time, bool) { return f.at, true }

// samples is how many observations a histogram holds, and their sum.
func samples(g Gomega, h prometheus.Histogram) (uint64, float64) {
	m := &dto.Metric{}
	g.Expect(h.Write(m)).To(Succeed())
	return m.GetHistogram().GetSampleCount(), m.GetHistogram().GetSampleSum()
}

// The latencies to healthy are observed once per revision: from its first fetch, and
// from its commit; a full sync of the same revision again, or a rollback, adds nothing.
func TestLatenciesToHealthyOncePerRevision(t *testing.T) {
	g := NewWithT(t)
	now := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	r := &Reconciler{Clock: clocktesting.NewFakeClock(now), Fetcher: fakeCommits{at: now.Add(-90 * time.Second)}}
	ru := r.newRun(syncTarget())
	ru.state.fetched = revisionSeen{revision: revR, at: now.Add(-30 * time.Second)}
	seen0, seenSum0 := samples(g, seenToHealthy)
	commit0, commitSum0 := samples(g, commitToHealthy)

	first := outcome{kind: succeeded, revision: revR, attempt: &attempt{started: now.Add(-time.Second), firstHealthy: true}}
	ru.observe(first, convergev1.SyncSucceeded, now)
	seen, seenSum := samples(g, seenToHealthy)
	commit, commitSum := samples(g, commitToHealthy)
	g.Expect(seen - seen0).To(BeEquivalentTo(1))
	g.Expect(seenSum-seenSum0).To(BeNumerically("~", 30, 0.001), "from the first fetch")
	g.Expect(commit - commit0).To(BeEquivalentTo(1))
	g.Expect(commitSum-commitSum0).To(BeNumerically("~", 90, 0.001), "from the commit")

	again := outcome{kind: succeeded, revision: revR, attempt: &attempt{started: now.Add(-time.Second)}}
	ru.observe(again, convergev1.SyncSucceeded, now.Add(time.Hour))
	ru.observe(outcome{kind: rolledBack, revision: revR, attempt: &attempt{started: now}}, convergev1.SyncRolledBack, now)
	seenAfter, _ := samples(g, seenToHealthy)
	commitAfter, _ := samples(g, commitToHealthy)
	g.Expect(seenAfter).To(Equal(seen), "a full sync or a rollback is no new deploy")
	g.Expect(commitAfter).To(Equal(commit))
}

// TestHistoryKeepsSmallChartValues: a chart's history entry keeps its inline values (or {}
// when it has none) up to 4 KiB; larger ones, and plain YAML, keep none.
func TestHistoryKeepsSmallChartValues(t *testing.T) {
	g := NewWithT(t)
	st := &convergev1.SyncTarget{}
	g.Expect(recordedValues(st)).To(BeNil(), "plain YAML")
	st.Spec.Helm = &convergev1.HelmSpec{}
	g.Expect(recordedValues(st)).To(Equal(&apiextensionsv1.JSON{Raw: []byte("{}")}))
	st.Spec.Helm.Values = &apiextensionsv1.JSON{Raw: []byte(`{"message":"one"}`)}
	g.Expect(recordedValues(st)).To(Equal(st.Spec.Helm.Values))
	st.Spec.Helm.Values = &apiextensionsv1.JSON{Raw: []byte(`{"blob":"` + strings.Repeat("x", maxRecordedValues) + `"}`)}
	g.Expect(recordedValues(st)).To(BeNil(), "too large for the status")
}
