package hooks

import (
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

func hook(kind, name, events, weight, policy string) *unstructured.Unstructured {
	o := &unstructured.Unstructured{}
	o.SetAPIVersion("v1")
	if kind == "Job" {
		o.SetAPIVersion("batch/v1")
	}
	o.SetKind(kind)
	o.SetName(name)
	a := map[string]string{"helm.sh/hook": events}
	if weight != "" {
		a[hookWeightAnnotation] = weight
	}
	if policy != "" {
		a[hookDeleteAnnotation] = policy
	}
	o.SetAnnotations(a)
	return o
}

func TestForOrdersByWeightThenKindThenName(t *testing.T) {
	plain := &unstructured.Unstructured{}
	plain.SetKind("ConfigMap")
	rest, hs := Split([]*unstructured.Unstructured{
		hook("Job", "b", "pre-install,pre-upgrade", "5", ""),
		plain,
		hook("ConfigMap", "z", "pre-upgrade", "-1", ""),
		hook("Job", "a", "pre-upgrade", "5", ""),
		hook("ConfigMap", "c", "post-upgrade", "", ""),
	})
	if len(rest) != 1 || len(hs) != 4 {
		t.Fatalf("split %d/%d", len(rest), len(hs))
	}
	var got []string
	for _, h := range For(hs, "pre-upgrade") {
		got = append(got, h.GetKind()+"/"+h.GetName())
	}
	want := []string{"ConfigMap/z", "Job/a", "Job/b"}
	if len(got) != len(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("got %v, want %v", got, want)
		}
	}
}

func TestPoliciesDefaultToBeforeHookCreation(t *testing.T) {
	if p := hookPolicies(hook("Job", "a", "pre-install", "", "")); !p[beforeHookCreation] || len(p) != 1 {
		t.Fatalf("default policies %v", p)
	}
	if p := hookPolicies(hook("Job", "a", "pre-install", "", "hook-succeeded, hook-failed")); p[beforeHookCreation] || !p[hookSucceeded] || !p[hookFailed] {
		t.Fatalf("policies %v", p)
	}
}

func TestHookDoneReadsJobsAndPods(t *testing.T) {
	job := hook("Job", "a", "pre-install", "", "")
	if done, err := hookDone(job); done || err != nil {
		t.Fatalf("a Job without conditions: %v %v", done, err)
	}
	_ = unstructured.SetNestedSlice(job.Object, []any{map[string]any{"type": "Failed", "status": "True", "reason": "DeadlineExceeded"}}, "status", "conditions")
	if _, err := hookDone(job); err == nil {
		t.Fatal("a failed Job is not reported")
	}
	_ = unstructured.SetNestedSlice(job.Object, []any{map[string]any{"type": "Complete", "status": "True"}}, "status", "conditions")
	if done, err := hookDone(job); !done || err != nil {
		t.Fatalf("a complete Job: %v %v", done, err)
	}
	pod := hook("Pod", "p", "test", "", "")
	_ = unstructured.SetNestedField(pod.Object, "Succeeded", "status", "phase")
	if done, err := hookDone(pod); !done || err != nil {
		t.Fatalf("a succeeded Pod: %v %v", done, err)
	}
	_ = unstructured.SetNestedField(pod.Object, "Failed", "status", "phase")
	if _, err := hookDone(pod); err == nil {
		t.Fatal("a failed Pod is not reported")
	}
}
