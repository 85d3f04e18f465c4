package reconciler

import (
	"context"
	"fmt"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
	"github.com/converge-gitops/converge/sync/apply"
	"github.com/converge-gitops/converge/sync/reconciler/reconcilertest"
	"github.com/converge-gitops/converge/sync/render"
)

// journal records, in order, what the flow's applier applied and its health checker
// waited for: "apply Kind/name" and "wait Kind/name".
type journal struct{ lines []string }

func (j *journal) add(verb string, objects []*unstructured.Unstructured) {
	for _, o := range objects {
		j.lines = append(j.lines, verb+" "+o.GetKind()+"/"+o.GetName())
	}
}

// journalApplier is the fake applier, journalled.
type journalApplier struct {
	reconcilertest.Applier
	j *journal
}

func (a journalApplier) Apply(ctx context.Context, c client.Client, objects []*unstructured.Unstructured, live apply.Live,
	timeout time.Duration, opts apply.Options) (apply.Result, error) {
	a.j.add("apply", objects)
	return a.Applier.Apply(ctx, c, objects, live, timeout, opts)
}

// journalled makes f's applier and health checker write to a journal; a wait for an
// object named in failing fails.
func journalled(f *flow, failing ...string) *journal {
	j := &journal{}
	f.r.Applier = journalApplier{j: j}
	f.health.Hook = func(_ context.Context, objects []*unstructured.Unstructured) error {
		j.add("wait", objects)
		for _, o := range objects {
			for _, name := range failing {
				if o.GetName() == name {
					return fmt.Errorf("%s %s failed: BackoffLimitExceeded", o.GetKind(), name)
				}
			}
		}
		return nil
	}
	return j
}

// hookObject is a hook as the renderer gives it: annotated, and labelled to be found again.
func hookObject(kind, name string, annotations map[string]string) *unstructured.Unstructured {
	o := reconcilertest.Object(kind, "shop", name, nil)
	if kind == "Job" {
		o.SetAPIVersion("batch/v1")
		delete(o.Object, "data")
	}
	o.SetAnnotations(annotations)
	o.SetLabels(map[string]string{render.HookLabel: kind + "-" + name})
	return o
}

func exists(f *flow, kind, name string) bool {
	u := &unstructured.Unstructured{}
	u.SetAPIVersion("v1")
	if kind == "Job" {
		u.SetAPIVersion("batch/v1")
	}
	u.SetKind(kind)
	err := f.c.Get(context.Background(), client.ObjectKey{Namespace: "shop", Name: name}, u)
	f.g.Expect(err == nil || apierrors.IsNotFound(err)).To(BeTrue(), "%v", err)
	return err == nil
}

// TestFlowChartHooksRunInHelmsOrderAroundTheApply: a chart's pre-install hooks run before
// the set is applied, by weight then name (a ConfigMap hook is not waited for, Jobs are),
// Argo CD's Sync hooks right after the apply, the post-install hooks once the set is
// healthy; hook-succeeded removes a hook, the default policy keeps it until its next run;
// no hook is in the inventory.
func TestFlowChartHooksRunInHelmsOrderAroundTheApply(t *testing.T) {
	f := newFlow(t, rev1, func(st *convergev1.SyncTarget) { st.Spec.Helm = &convergev1.HelmSpec{} })
	j := journalled(f)
	pre := func(weight string) map[string]string {
		return map[string]string{"helm.sh/hook": "pre-install,pre-upgrade", "helm.sh/hook-weight": weight}
	}
	f.objects.Set(rev1,
		configMap("web", "one"),
		hookObject("Job", "b-migrate", pre("0")),
		hookObject("Job", "a-migrate", map[string]string{"helm.sh/hook": "pre-install", "helm.sh/hook-weight": "0",
			"helm.sh/hook-delete-policy": "hook-succeeded"}),
		hookObject("ConfigMap", "z-settings", pre("-5")),
		hookObject("Job", "seed", map[string]string{"argocd.argoproj.io/hook": "Sync"}),
		hookObject("Job", "smoke", map[string]string{"helm.sh/hook": "post-install"}),
	)
	st := f.reconcile()
	f.g.Expect(newestResult(st)).To(Equal(convergev1.SyncSucceeded), "%v", st.Status.Conditions)
	f.g.Expect(j.lines).To(Equal([]string{
		"apply ConfigMap/z-settings",
		"apply Job/a-migrate", "wait Job/a-migrate",
		"apply Job/b-migrate", "wait Job/b-migrate",
		"apply ConfigMap/web",
		"apply Job/seed", "wait Job/seed",
		"wait ConfigMap/web",
		"apply Job/smoke", "wait Job/smoke",
	}))
	f.g.Expect(exists(f, "Job", "a-migrate")).To(BeFalse(), "hook-succeeded removes the hook")
	f.g.Expect(exists(f, "Job", "b-migrate")).To(BeTrue(), "before-hook-creation keeps it until its next run")
	f.g.Expect(st.Status.Inventory.Entries).To(HaveLen(1), "hooks are not part of the set")
	var ran []string
	for _, h := range st.Status.History[0].Hooks {
		f.g.Expect(h.Duration).NotTo(BeNil())
		ran = append(ran, h.Event+" "+h.Kind+"/"+h.Name+" "+string(h.Result))
	}
	f.g.Expect(ran).To(Equal([]string{
		"pre-install ConfigMap/z-settings Succeeded", "pre-install Job/a-migrate Succeeded", "pre-install Job/b-migrate Succeeded",
		"sync Job/seed Succeeded", "post-install Job/smoke Succeeded",
	}), "the history entry says which hooks ran, in order, and how they ended")

	f.source.Push(rev2)
	f.objects.Set(rev2, configMap("web", "two"), hookObject("Job", "b-migrate", pre("0")))
	j.lines = nil
	st = f.reconcile()
	f.g.Expect(newestResult(st)).To(Equal(convergev1.SyncSucceeded), "%v", st.Status.Conditions)
	f.g.Expect(j.lines).To(Equal([]string{"apply Job/b-migrate", "wait Job/b-migrate", "apply ConfigMap/web", "wait ConfigMap/web"}),
		"an upgrade runs the pre-upgrade hooks only")
}

// TestFlowFailedHookRunsSyncFailThenRollsBack: a PreSync hook that fails fails the
// revision before its set is applied; the SyncFail hook runs, then the last healthy
// revision is deployed again.
func TestFlowFailedHookRunsSyncFailThenRollsBack(t *testing.T) {
	f := newFlow(t, rev1)
	f.objects.Set(rev1, configMap("web", "one"))
	st := f.reconcile()
	f.g.Expect(st.Status.LastHealthyRevision).To(Equal(rev1))

	j := journalled(f, "migrate")
	f.source.Push(rev2)
	f.objects.Set(rev2, configMap("web", "two"),
		hookObject("Job", "migrate", map[string]string{"argocd.argoproj.io/hook": "PreSync",
			"argocd.argoproj.io/hook-delete-policy": "HookFailed"}),
		hookObject("Job", "page", map[string]string{"argocd.argoproj.io/hook": "SyncFail"}))
	st = f.reconcile()
	f.g.Expect(readyReason(st)).To(Equal(convergev1.RolledBackReason), "%v", st.Status.Conditions)
	f.g.Expect(st.Status.History[0].Message).To(ContainSubstring("pre-upgrade hook Job shop/migrate"))
	f.g.Expect(j.lines).To(Equal([]string{
		"apply Job/migrate", "wait Job/migrate",
		"apply Job/page", "wait Job/page",
		"apply ConfigMap/web", "wait ConfigMap/web",
	}), "the sync-fail hook runs before the rollback")
	f.g.Expect(f.live("web")).To(HaveKeyWithValue("v", "one"))
	hooks := st.Status.History[0].Hooks
	f.g.Expect(hooks).To(HaveLen(2))
	f.g.Expect(hooks[0]).To(And(HaveField("Event", "pre-upgrade"), HaveField("Name", "migrate"), HaveField("Result", convergev1.SyncFailed),
		HaveField("Message", ContainSubstring("BackoffLimitExceeded"))))
	f.g.Expect(hooks[1]).To(And(HaveField("Name", "page"), HaveField("Result", convergev1.SyncSucceeded), HaveField("Message", "")))
	f.g.Expect(exists(f, "Job", "migrate")).To(BeFalse(), "HookFailed removes the failed hook")
	f.g.Expect(exists(f, "Job", "page")).To(BeTrue())
}

// TestFlowHookNeverWritesAnObjectConvergeDidNotCreate: a hook named like an object of
// another SyncTarget, or like one no SyncTarget created, fails its revision and leaves the
// object as it was; its delete policy finds nothing of theirs to delete.
func TestFlowHookNeverWritesAnObjectConvergeDidNotCreate(t *testing.T) {
	for _, tc := range []struct {
		name   string
		labels map[string]string
		want   string
	}{
		{"another SyncTarget's", map[string]string{convergev1.NameLabel: "other", convergev1.NamespaceLabel: "team-b"},
			"is managed by SyncTarget team-b/other"},
		{"no SyncTarget's", nil, "exists and no converge SyncTarget created it"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFlow(t, rev1)
			theirs := configMap("shared", "theirs")
			theirs.SetLabels(tc.labels)
			f.g.Expect(f.c.Create(context.Background(), theirs)).To(Succeed())
			f.objects.Set(rev1, configMap("web", "one"),
				hookObject("ConfigMap", "shared", map[string]string{"helm.sh/hook": "pre-install",
					"helm.sh/hook-delete-policy": "before-hook-creation,hook-failed"}))
			st := f.reconcile()
			f.g.Expect(readyReason(st)).To(Equal(convergev1.HookFailedReason), "%v", st.Status.Conditions)
			f.g.Expect(st.Status.History[0].Message).To(ContainSubstring(tc.want))
			f.g.Expect(f.live("shared")).To(HaveKeyWithValue("v", "theirs"), "the object is not written, nor deleted")
			f.g.Expect(f.live("web")).To(BeNil(), "the revision stopped before its apply")
		})
	}
}

// TestFlowSyncWavesApplyInOrder: objects of lower sync waves are applied and healthy
// before the next wave is applied; a wave that does not become healthy stops the apply
// and the revision rolls back.
func TestFlowSyncWavesApplyInOrder(t *testing.T) {
	f := newFlow(t, rev1)
	j := journalled(f, "db")
	wave := func(o *unstructured.Unstructured, w string) *unstructured.Unstructured {
		o.SetAnnotations(map[string]string{"argocd.argoproj.io/sync-wave": w})
		return o
	}
	f.objects.Set(rev1, wave(configMap("web", "one"), "5"), wave(configMap("schema", "one"), "-1"), configMap("cache", "one"))
	st := f.reconcile()
	f.g.Expect(newestResult(st)).To(Equal(convergev1.SyncSucceeded), "%v", st.Status.Conditions)
	f.g.Expect(j.lines).To(Equal([]string{
		"apply ConfigMap/schema", "wait ConfigMap/schema",
		"apply ConfigMap/cache", "wait ConfigMap/cache",
		"apply ConfigMap/web",
		"wait ConfigMap/web", "wait ConfigMap/schema", "wait ConfigMap/cache",
	}))
	f.g.Expect(st.Status.History[0].Created).To(Equal(int32(3)), "every wave's work is counted")

	j.lines = nil
	f.source.Push(rev2)
	f.objects.Set(rev2, wave(configMap("web", "two"), "5"), wave(configMap("db", "two"), "-1"))
	st = f.reconcile()
	f.g.Expect(readyReason(st)).To(Equal(convergev1.RolledBackReason), "%v", st.Status.Conditions)
	f.g.Expect(st.Status.History[0].Message).To(ContainSubstring("sync wave -1 did not become ready"))
	f.g.Expect(j.lines).To(Equal([]string{
		"apply ConfigMap/db", "wait ConfigMap/db",
		"apply ConfigMap/schema", "wait ConfigMap/schema",
		"apply ConfigMap/cache", "wait ConfigMap/cache",
		"apply ConfigMap/web",
		"wait ConfigMap/web", "wait ConfigMap/schema", "wait ConfigMap/cache",
	}), "wave 5 of the failed revision is never applied; the rollback applies the healthy one's waves")
	f.g.Expect(f.live("web")).To(HaveKeyWithValue("v", "one"))
}
