package hooks

import (
	"context"
	"errors"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
	"github.com/converge-gitops/converge/sync/apply"
)

func object(kind, name string, annotations map[string]string) *unstructured.Unstructured {
	o := &unstructured.Unstructured{}
	o.SetAPIVersion("v1")
	if kind == "Job" {
		o.SetAPIVersion("batch/v1")
	}
	o.SetKind(kind)
	o.SetName(name)
	o.SetAnnotations(annotations)
	return o
}

func names(hs []Hook) []string {
	var out []string
	for _, h := range hs {
		out = append(out, h.Object.GetKind()+"/"+h.Object.GetName())
	}
	return out
}

func TestSplitReadsHelmsAndArgoCDsAnnotations(t *testing.T) {
	g := NewWithT(t)
	rest, hs := Split([]*unstructured.Unstructured{
		object("ConfigMap", "plain", nil),
		object("Job", "migrate", map[string]string{"helm.sh/hook": "pre-install, pre-upgrade", WeightAnnotation: "5",
			DeleteAnnotation: "hook-succeeded,hook-failed"}),
		object("Job", "schema", map[string]string{"argocd.argoproj.io/hook": "PreSync",
			ArgoDeleteAnnotation: "HookSucceeded", ArgoWaveAnnotation: "-2"}),
		object("Job", "seed", map[string]string{"argocd.argoproj.io/hook": "Sync"}),
		object("Job", "smoke", map[string]string{"argocd.argoproj.io/hook": "PostSync"}),
		object("Job", "page", map[string]string{"argocd.argoproj.io/hook": "SyncFail"}),
		object("ConfigMap", "skipped", map[string]string{"argocd.argoproj.io/hook": "Skip"}),
		// Argo CD reads its own annotation and not Helm's when an object has both.
		object("Job", "both", map[string]string{"argocd.argoproj.io/hook": "PostSync", "helm.sh/hook": "pre-install",
			WeightAnnotation: "9"}),
	})
	g.Expect(names(hs)).To(Equal([]string{"Job/migrate", "Job/schema", "Job/seed", "Job/smoke", "Job/page", "Job/both"}))
	g.Expect(rest).To(HaveLen(1), "a plain object is the set's; a skipped one is nobody's")

	g.Expect(hs[0].Events).To(Equal([]string{PreInstall, PreUpgrade}))
	g.Expect(hs[0].Weight).To(Equal(5))
	g.Expect(hs[0].Policies).To(Equal(map[string]bool{HookSucceeded: true, HookFailed: true}))
	g.Expect(hs[1].Events).To(Equal([]string{PreInstall, PreUpgrade, PreRollback}), "PreSync runs at every sync")
	g.Expect(hs[1].Weight).To(Equal(-2), "an Argo CD hook's wave orders it")
	g.Expect(hs[1].Policies).To(Equal(map[string]bool{HookSucceeded: true}))
	g.Expect(hs[2].Events).To(Equal([]string{Sync}))
	g.Expect(hs[2].Policies).To(Equal(map[string]bool{BeforeHookCreation: true}), "the default policy")
	g.Expect(hs[3].Events).To(Equal([]string{PostInstall, PostUpgrade, PostRollback}))
	g.Expect(hs[4].Events).To(Equal([]string{SyncFail}))
	g.Expect(hs[5].Events).To(Equal([]string{PostInstall, PostUpgrade, PostRollback}))
	g.Expect(hs[5].Weight).To(Equal(0))

	g.Expect(names(For(hs, PreUpgrade))).To(Equal([]string{"Job/schema", "Job/migrate"}), "by weight")
	g.Expect(names(For(hs, PostRollback))).To(Equal([]string{"Job/both", "Job/smoke"}), "by name")
	g.Expect(For(hs, "test")).To(BeEmpty())
}

// TestForIsWeightThenNameThenKind: Helm sorts hooks by kind, then stably by weight and
// name: the kind decides only between hooks of equal weight and name; kinds Helm does not
// know come last, by name.
func TestForIsWeightThenNameThenKind(t *testing.T) {
	g := NewWithT(t)
	pre := map[string]string{"helm.sh/hook": PreInstall}
	_, hs := Split([]*unstructured.Unstructured{
		object("Job", "a", pre),
		object("Widget", "a", pre),
		object("ServiceAccount", "b", pre),
		object("ConfigMap", "a", pre),
		object("Gadget", "a", pre),
		object("Secret", "a", pre),
		object("Job", "z", map[string]string{"helm.sh/hook": PreInstall, WeightAnnotation: "-1"}),
	})
	g.Expect(names(For(hs, PreInstall))).To(Equal([]string{
		"Job/z", "Secret/a", "ConfigMap/a", "Job/a", "Gadget/a", "Widget/a", "ServiceAccount/b"}))
}

func TestWaitRulesJudgeAPodByItsEnd(t *testing.T) {
	g := NewWithT(t)
	widget := convergev1.CustomHealthCheck{APIVersion: "example.com/v1", Kind: "Widget", Current: "true"}
	runningPod := convergev1.CustomHealthCheck{APIVersion: "v1", Kind: "Pod", Current: "self.status.phase == 'Running'"}
	g.Expect(WaitRules([]convergev1.CustomHealthCheck{runningPod, widget})).To(Equal([]convergev1.CustomHealthCheck{podDone, jobDone, widget}),
		"a SyncTarget's own rule for Pods gives way to the hook's; its other rules stay")
}

// TestRunSaysWhyAHookFailed: a hook Job or Pod that failed is reported with the reason its
// status gives, not the health checker's rule.
func TestRunSaysWhyAHookFailed(t *testing.T) {
	g := NewWithT(t)
	job := object("Job", "migrate", map[string]string{"helm.sh/hook": PreInstall})
	job.Object["status"] = map[string]any{"conditions": []any{
		map[string]any{"type": "Failed", "status": "True", "reason": "DeadlineExceeded", "message": "Job was active longer than specified deadline"}}}
	pod := object("Pod", "check", map[string]string{"helm.sh/hook": PreInstall, WeightAnnotation: "1"})
	pod.Object["status"] = map[string]any{"phase": "Failed"}
	c := fake.NewClientBuilder().WithObjects(job, pod).Build()
	r := Runner{Client: c,
		Apply: func(context.Context, []*unstructured.Unstructured) (apply.Result, error) { return apply.Result{}, nil },
		Wait: func(context.Context, []*unstructured.Unstructured, []*unstructured.Unstructured) error {
			return errors.New("health check failed: 1 of 1 object failed")
		},
		Poll: time.Millisecond,
	}
	for _, tc := range []struct {
		hook *unstructured.Unstructured
		want string
	}{
		{job, "pre-install hook Job /migrate: job failed: DeadlineExceeded Job was active longer than specified deadline"},
		{pod, "pre-install hook Pod /check: pod failed"},
	} {
		h, _ := Parse(tc.hook)
		h.Policies = map[string]bool{} // keep the object: its status is what is read
		err := r.Run(t.Context(), []Hook{h}, PreInstall)
		g.Expect(err).To(MatchError(ErrFailed))
		g.Expect(err.Error()).To(HaveSuffix(tc.want))
	}
}
