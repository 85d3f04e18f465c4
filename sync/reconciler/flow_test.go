package reconciler

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
	"github.com/converge-gitops/converge/sync/reconciler/reconcilertest"
)

// The reconcile flow driven with fakes: a fake client holds the SyncTarget and the objects
// it applies, a fake clock times it, and the source, renderer, applier and health are the
// fakes of reconcilertest. No API server: these run under -short, in milliseconds.

const (
	rev1 = "main@sha1:1111111111111111111111111111111111111111"
	rev2 = "main@sha1:2222222222222222222222222222222222222222"
	rev3 = "main@sha1:3333333333333333333333333333333333333333"
)

// flow is one SyncTarget, "shop/app", reconciled by a Reconciler made of fakes.
type flow struct {
	t       *testing.T
	g       *WithT
	c       client.Client
	clk     *clocktesting.FakeClock
	source  *reconcilertest.Fetcher
	objects *reconcilertest.Renderer
	health  *reconcilertest.Health
	r       *Reconciler
	key     client.ObjectKey
}

func newFlow(t *testing.T, revision string, mutate ...func(*convergev1.SyncTarget)) *flow {
	t.Helper()
	scheme := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(scheme)
	_ = convergev1.AddToScheme(scheme)
	st := &convergev1.SyncTarget{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "app"},
		Spec: convergev1.SyncTargetSpec{
			Source: convergev1.GitSource{URL: "https://git.example/shop.git", Ref: convergev1.GitRef{Branch: "main"},
				Interval: &metav1.Duration{Duration: time.Minute}},
			Prune:    true,
			Timeout:  &metav1.Duration{Duration: 5 * time.Minute},
			Rollback: &convergev1.RollbackSpec{Enabled: ptr.To(true)},
		}}
	for _, m := range mutate {
		m(st)
	}
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(st).WithStatusSubresource(st).Build()
	f := &flow{t: t, g: NewWithT(t), c: c, clk: clocktesting.NewFakeClock(time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)),
		source: reconcilertest.NewFetcher(revision), objects: reconcilertest.NewRenderer(),
		health: &reconcilertest.Health{}, key: client.ObjectKeyFromObject(st)}
	f.r = &Reconciler{Client: c, Fetcher: f.source, Renderer: f.objects, Health: f.health,
		Applier: reconcilertest.Applier{}, Clusters: reconcilertest.NewClusters(c), Clock: f.clk,
		FullSyncInterval: 10 * time.Minute}
	return f
}

// reconcile runs one reconcile and returns the SyncTarget as it is afterwards.
func (f *flow) reconcile() *convergev1.SyncTarget {
	f.t.Helper()
	_, err := f.r.Reconcile(context.Background(), ctrl.Request{NamespacedName: f.key})
	f.g.Expect(err).NotTo(HaveOccurred())
	st := &convergev1.SyncTarget{}
	f.g.Expect(f.c.Get(context.Background(), f.key, st)).To(Succeed())
	return st
}

// live returns the data of the ConfigMap name, nil when it does not exist.
func (f *flow) live(name string) map[string]any { return liveIn(f.c, name) }

// liveIn returns the data of the ConfigMap shop/name that c reads, nil when it does not
// exist.
func liveIn(c client.Client, name string) map[string]any {
	u := &unstructured.Unstructured{}
	u.SetAPIVersion("v1")
	u.SetKind("ConfigMap")
	if err := c.Get(context.Background(), client.ObjectKey{Namespace: "shop", Name: name}, u); err != nil {
		return nil
	}
	data, _ := u.Object["data"].(map[string]any)
	return data
}

// edit changes the value of the ConfigMap shop/name through c, as someone would by hand.
func (f *flow) edit(c client.Client, name, value string) {
	f.t.Helper()
	u := &unstructured.Unstructured{}
	u.SetAPIVersion("v1")
	u.SetKind("ConfigMap")
	f.g.Expect(c.Get(context.Background(), client.ObjectKey{Namespace: "shop", Name: name}, u)).To(Succeed())
	u.Object["data"] = map[string]any{"v": value}
	f.g.Expect(c.Update(context.Background(), u)).To(Succeed())
}

// substituteFromEnv makes a SyncTarget read its variables from the ConfigMap env.
func substituteFromEnv(st *convergev1.SyncTarget) {
	st.Spec.PostBuild = &convergev1.PostBuildSpec{SubstituteFrom: []convergev1.SubstituteReference{{Kind: "ConfigMap", Name: "env"}}}
}

// createEnv creates the ConfigMap env on the daemon's cluster, its variable stage set.
func (f *flow) createEnv(stage string) *corev1.ConfigMap {
	f.t.Helper()
	env := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "env"}, Data: map[string]string{"stage": stage}}
	f.g.Expect(f.c.Create(context.Background(), env)).To(Succeed())
	return env
}

func configMap(name, value string) *unstructured.Unstructured {
	return reconcilertest.Object("ConfigMap", "shop", name, map[string]any{"v": value})
}

func unhealthy(o *unstructured.Unstructured) *unstructured.Unstructured {
	o.SetAnnotations(map[string]string{reconcilertest.UnhealthyAnnotation: "CrashLoopBackOff"})
	return o
}

func newestResult(st *convergev1.SyncTarget) convergev1.SyncResult {
	if len(st.Status.History) == 0 {
		return ""
	}
	return st.Status.History[0].Result
}

func readyReason(st *convergev1.SyncTarget) string {
	for _, c := range st.Status.Conditions {
		if c.Type == convergev1.ReadyCondition {
			return c.Reason
		}
	}
	return ""
}

func TestFlowDeploysANewRevision(t *testing.T) {
	f := newFlow(t, rev1)
	f.objects.Set(rev1, configMap("web", "one"))

	st := f.reconcile()
	f.g.Expect(st.Status.LastHealthyRevision).To(Equal(rev1))
	f.g.Expect(newestResult(st)).To(Equal(convergev1.SyncSucceeded))
	f.g.Expect(f.live("web")).To(Equal(map[string]any{"v": "one"}))

	// A new commit: applied, what left Git pruned.
	f.source.Push(rev2)
	f.objects.Set(rev2, configMap("api", "two"))
	st = f.reconcile()
	f.g.Expect(st.Status.LastHealthyRevision).To(Equal(rev2))
	f.g.Expect(f.live("api")).To(Equal(map[string]any{"v": "two"}))
	f.g.Expect(f.live("web")).To(BeNil(), "pruned: it left Git")
	f.g.Expect(st.Status.History).To(HaveLen(2))

	// Nothing new: an idle reconcile renders nothing.
	renders := f.objects.Renders()
	st = f.reconcile()
	f.g.Expect(f.objects.Renders()).To(Equal(renders))
	f.g.Expect(st.Status.History).To(HaveLen(2))
}

func TestFlowRollsAFailedRevisionBack(t *testing.T) {
	f := newFlow(t, rev1)
	f.objects.Set(rev1, configMap("web", "one"))
	f.reconcile()

	f.source.Push(rev2)
	f.objects.Set(rev2, configMap("web", "two"), unhealthy(configMap("extra", "two")))
	st := f.reconcile()

	f.g.Expect(newestResult(st)).To(Equal(convergev1.SyncRolledBack))
	f.g.Expect(readyReason(st)).To(Equal(convergev1.RolledBackReason))
	f.g.Expect(st.Status.LastHealthyRevision).To(Equal(rev1))
	f.g.Expect(st.Status.LastAppliedRevision).To(Equal(rev1))
	f.g.Expect(f.live("web")).To(Equal(map[string]any{"v": "one"}), "the healthy revision's objects are back")
	f.g.Expect(f.live("extra")).To(BeNil(), "what the failed revision added is pruned")

	// The failed revision is not retried while the source points at it.
	renders := f.objects.Renders()
	st = f.reconcile()
	f.g.Expect(f.objects.Renders()).To(Equal(renders))
	f.g.Expect(newestResult(st)).To(Equal(convergev1.SyncRolledBack))
}

func TestFlowRollbackOutlastingTheIntervalIsNotCutShort(t *testing.T) {
	f := newFlow(t, rev1)
	f.objects.Set(rev1, configMap("web", "one"))
	f.reconcile()

	f.source.Push(rev2)
	f.objects.Set(rev2, unhealthy(configMap("web", "two")))
	waits := 0
	f.health.Hook = func(ctx context.Context, objects []*unstructured.Unstructured) error {
		waits++
		if waits == 1 {
			return errors.New("web: CrashLoopBackOff") // the new revision fails
		}
		// The rollback's rollout lasts three intervals; meanwhile the source still points
		// at the failed revision, which must not count as a newer one.
		before := f.source.Resolves()
		f.stepUntil(func() bool { return f.source.Resolves() >= before+3 || ctx.Err() != nil })
		return ctx.Err()
	}
	st := f.reconcile()
	f.g.Expect(waits).To(Equal(2))
	f.g.Expect(newestResult(st)).To(Equal(convergev1.SyncRolledBack), st.Status.Conditions)
	f.g.Expect(st.Status.LastHealthyRevision).To(Equal(rev1))
}

func TestFlowNewerRevisionSupersedesAWait(t *testing.T) {
	f := newFlow(t, rev1)
	f.objects.Set(rev1, configMap("web", "one"))
	f.reconcile()

	f.source.Push(rev2)
	f.objects.Set(rev2, configMap("web", "two"))
	f.objects.Set(rev3, configMap("web", "three"))
	f.health.Hook = func(ctx context.Context, _ []*unstructured.Unstructured) error {
		f.health.Hook = nil
		f.source.Push(rev3) // pushed while rev2 rolls out
		f.stepUntil(func() bool { return ctx.Err() != nil })
		return ctx.Err()
	}
	st := f.reconcile()
	f.g.Expect(st.Status.History[0].Revision).To(Equal(rev2))
	f.g.Expect(st.Status.History[0].Message).To(ContainSubstring("superseded by " + rev3))
	f.g.Expect(newestResult(st)).NotTo(Equal(convergev1.SyncRolledBack), "a superseded revision is not rolled back")

	st = f.reconcile()
	f.g.Expect(st.Status.LastHealthyRevision).To(Equal(rev3))
	f.g.Expect(f.live("web")).To(Equal(map[string]any{"v": "three"}))
}

func TestFlowRestoresDriftAfterARollback(t *testing.T) {
	f := newFlow(t, rev1)
	f.objects.Set(rev1, configMap("web", "one"))
	f.reconcile()
	f.source.Push(rev2)
	f.objects.Set(rev2, unhealthy(configMap("web", "two")))
	f.g.Expect(newestResult(f.reconcile())).To(Equal(convergev1.SyncRolledBack))

	// Someone edits the object by hand; the full sync puts the healthy revision back,
	// not the refused one, and adds no history.
	f.edit(f.c, "web", "edited")

	f.clk.Step(11 * time.Minute) // past FullSyncInterval
	st := f.reconcile()
	f.g.Expect(f.live("web")).To(Equal(map[string]any{"v": "one"}))
	f.g.Expect(st.Status.History).To(HaveLen(2))
	f.g.Expect(st.Status.LastAppliedRevision).To(Equal(rev1))
}

func TestFlowForgetsADeletedTarget(t *testing.T) {
	f := newFlow(t, rev1)
	f.objects.Set(rev1, configMap("web", "one"))
	f.reconcile()
	f.g.Expect(f.r.states.len()).To(Equal(1))

	st := &convergev1.SyncTarget{}
	f.g.Expect(f.c.Get(context.Background(), f.key, st)).To(Succeed())
	st.Finalizers = nil
	f.g.Expect(f.c.Update(context.Background(), st)).To(Succeed())
	f.g.Expect(f.c.Delete(context.Background(), st)).To(Succeed())
	_, err := f.r.Reconcile(context.Background(), ctrl.Request{NamespacedName: f.key})
	f.g.Expect(err).NotTo(HaveOccurred())
	f.g.Expect(f.r.states.len()).To(Equal(0))
	f.g.Expect(f.source.Forgotten()).To(ConsistOf(f.key))
}

// A value read from a Secret for spec.postBuild and quoted back by a failure (here the
// health check's message) reaches neither the status, the history nor the returned error.
func TestFlowKeepsSecretVariablesOutOfMessages(t *testing.T) {
	f := newFlow(t, rev1, func(st *convergev1.SyncTarget) {
		st.Spec.PostBuild = &convergev1.PostBuildSpec{SubstituteFrom: []convergev1.SubstituteReference{{Kind: "Secret", Name: "db"}}}
		st.Spec.Rollback = &convergev1.RollbackSpec{Enabled: ptr.To(false)}
	})
	db := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "db"},
		Data: map[string][]byte{"password": []byte("hunter2-very-secret")}}
	f.g.Expect(f.c.Create(context.Background(), db)).To(Succeed())
	o := configMap("web", "${password}")
	o.SetAnnotations(map[string]string{reconcilertest.UnhealthyAnnotation: "refused password ${password}"})
	f.objects.Set(rev1, o)

	st := f.reconcile()
	f.g.Expect(f.live("web")).To(Equal(map[string]any{"v": "hunter2-very-secret"}), "the variable was substituted")
	f.g.Expect(newestResult(st)).To(Equal(convergev1.SyncFailed))
	text := fmt.Sprint(st.Status.Conditions, st.Status.History)
	f.g.Expect(text).To(ContainSubstring("refused password [redacted]"))
	f.g.Expect(text).NotTo(ContainSubstring("hunter2-very-secret"))
}

// stepUntil steps the clock, half a poll of the source at a time, until done: the health
// wait's looks at the source run on the clock.
func (f *flow) stepUntil(done func() bool) {
	f.g.Eventually(func() bool {
		f.clk.Step(30 * time.Second)
		return done()
	}).Should(BeTrue())
}

// TestFlowFailedRevisionRolledBackAfterItsRollbackFailed is invariant 3 (a failed revision
// ends rolled back): a rollback that fails for a while (here the healthy revision's
// render, as when the API server or the source is away) is tried again while the source
// still points at the refused revision, not left undone with the failed one applied.
func TestFlowFailedRevisionRolledBackAfterItsRollbackFailed(t *testing.T) {
	f := newFlow(t, rev1)
	f.objects.Set(rev1, configMap("web", "one"))
	f.reconcile()

	f.source.Push(rev2)
	f.objects.Set(rev2, configMap("web", "two"), unhealthy(configMap("extra", "two")))
	f.objects.Break(rev1, fmt.Errorf("reading: %w", errors.New("connection refused")))
	st := f.reconcile()
	f.g.Expect(st.Status.LastAppliedRevision).To(Equal(rev2), "the rollback failed: the failed revision is still applied")
	f.g.Expect(readyReason(st)).To(Equal(convergev1.HealthCheckFailedReason))
	f.g.Expect(f.live("web")).To(Equal(map[string]any{"v": "two"}))

	f.objects.Break(rev1, nil)
	st = f.reconcile()
	f.g.Expect(st.Status.LastAppliedRevision).To(Equal(rev1), "the rollback is tried again")
	f.g.Expect(readyReason(st)).To(Equal(convergev1.RolledBackReason))
	f.g.Expect(f.live("web")).To(Equal(map[string]any{"v": "one"}))
	f.g.Expect(f.live("extra")).To(BeNil(), "what the failed revision added is pruned")
	f.g.Expect(st.Status.History[0].Revision).To(Equal(rev2), "no new history entry")

	// Settled: the next reconciles hold the healthy revision, nothing rendered again.
	renders := f.objects.Renders()
	f.reconcile()
	f.g.Expect(f.objects.Renders()).To(Equal(renders))
}

// TestFlowStatusWritesAreFenced: a status write of a replica that read the SyncTarget
// before another replica wrote its status fails with a conflict and leaves that status
// as it is; one that only an annotation written meanwhile makes stale goes through.
func TestFlowStatusWritesAreFenced(t *testing.T) {
	f := newFlow(t, rev1)
	f.r.APIReader = f.c
	f.objects.Set(rev1, configMap("web", "one"))
	f.reconcile()
	ctx := context.Background()

	read := func() *convergev1.SyncTarget {
		st := &convergev1.SyncTarget{}
		f.g.Expect(f.c.Get(ctx, f.key, st)).To(Succeed())
		return st
	}
	// An annotation written since the read: the write goes through.
	mine := read()
	written := *mine.Status.DeepCopy()
	other := read()
	other.Annotations = map[string]string{convergev1.PushedAtAnnotation: "2026-12-03T10:00:00Z"}
	f.g.Expect(f.c.Update(ctx, other)).To(Succeed())
	mine.Status.LastFetchedRevision = rev2
	f.g.Expect(f.r.writeStatus(ctx, mine, written)).To(Succeed())
	f.g.Expect(read().Status.LastFetchedRevision).To(Equal(rev2))

	// Another replica's status written since the read: refused, the other's status kept.
	mine = read()
	written = *mine.Status.DeepCopy()
	other = read()
	other.Status.LastFetchedRevision = rev3
	f.g.Expect(f.c.Status().Update(ctx, other)).To(Succeed())
	mine.Status.LastFetchedRevision = rev1
	err := f.r.writeStatus(ctx, mine, written)
	f.g.Expect(err).To(MatchError(ContainSubstring("written by another replica")))
	f.g.Expect(read().Status.LastFetchedRevision).To(Equal(rev3))
}
