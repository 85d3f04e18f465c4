package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
)

// hookJob is a Job that completes on a kwok node, annotated as given.
func hookJob(name, annotations string) string {
	meta := "name: " + name
	if strings.HasSuffix(name, "-") {
		meta = "generateName: " + name
	}
	return `apiVersion: batch/v1
kind: Job
metadata:
  ` + meta + `
  annotations: {` + annotations + `}
spec:
  backoffLimit: 0
  template:
    spec:
      restartPolicy: Never
      containers: [{name: run, image: example.com/run:1}]
`
}

// failingJob is a Job whose Pod can go to no node: its deadline fails it.
func failingJob(name, annotations string) string {
	return strings.Replace(hookJob(name, annotations), "backoffLimit: 0", "backoffLimit: 0\n  activeDeadlineSeconds: 2", 1) +
		"      nodeSelector: {no-such-node: \"true\"}\n"
}

// Scenario 63: plain YAML written for Argo CD and for Helm's hooks, as teams moving in
// from Argo CD keep it (argocd-example-apps' helm-hooks and sync-waves): a Helm
// pre-install Job named by generateName, an Argo CD PreSync schema migration deleted when
// it succeeds, a PostSync smoke test, objects in sync waves. Every hook runs, none is in
// the inventory; a revision whose PreSync Job fails runs its SyncFail Job and is rolled
// back, its objects never applied.
func TestArgoCDHooksAndWavesInPlainYAML(t *testing.T) {
	run(t, 63, "Argo CD hooks and waves in plain YAML", parallel, func(s *scenario) {
		g := NewWithT(t)
		r := s.repo("hooks")
		files := map[string]string{
			"deploy/upgrade-sql-schema.yaml": hookJob("upgrade-sql-schema-", `"helm.sh/hook": pre-install`),
			"deploy/schema.yaml": hookJob("schema", `"argocd.argoproj.io/hook": PreSync, `+
				`"argocd.argoproj.io/hook-delete-policy": HookSucceeded`),
			"deploy/smoke.yaml": hookJob("smoke", `"argocd.argoproj.io/hook": PostSync`),
			"deploy/page.yaml":  hookJob("page", `"argocd.argoproj.io/hook": SyncFail`),
			"deploy/app.yaml": `apiVersion: v1
kind: ConfigMap
metadata: {name: settings, annotations: {"argocd.argoproj.io/sync-wave": "-1"}}
data: {value: one}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: app, annotations: {"argocd.argoproj.io/sync-wave": "2"}}
data: {value: one}
`,
		}
		rev := r.commit(files)
		// The hooks, the waves and the health wait share the revision's timeout: a loaded
		// machine's kwok Jobs may take a while each.
		st := s.syncTarget("hooks", r, func(st *convergev1.SyncTarget) {
			st.Spec.Timeout = &metav1.Duration{Duration: 3 * time.Minute}
		})
		s.latency("plain YAML with hooks → healthy", s.waitHealthy(st, rev, 4*time.Minute))

		jobs := func(g Gomega) map[string]batchv1.Job {
			list := &batchv1.JobList{}
			g.Expect(suite.k8s.List(context.Background(), list, client.InNamespace(s.app))).To(Succeed())
			out := map[string]batchv1.Job{}
			for _, j := range list.Items {
				out[j.Name] = j
			}
			return out
		}
		have := jobs(g)
		g.Expect(have).To(HaveKey(HavePrefix("upgrade-sql-schema-")), "the generateName Job ran")
		g.Expect(have).To(HaveKey("smoke"), "the PostSync Job ran and stays (BeforeHookCreation)")
		g.Expect(have).NotTo(HaveKey("schema"), "HookSucceeded removed the PreSync Job")
		g.Expect(have).NotTo(HaveKey("page"), "SyncFail runs only when a revision fails")
		for name, j := range have {
			g.Expect(j.Status.Succeeded).To(BeEquivalentTo(1), name)
		}
		for _, e := range get(g, st).Status.Inventory.Entries {
			g.Expect(e.ID).NotTo(ContainSubstring("Job"), "no hook is in the inventory")
		}
		g.Expect(configMapValue(g, s.app, "app")).To(Equal("one"))

		files["deploy/schema.yaml"] = failingJob("schema", `"argocd.argoproj.io/hook": PreSync`)
		files["deploy/app.yaml"] = strings.ReplaceAll(files["deploy/app.yaml"], "value: one", "value: two")
		bad := r.commit(files)
		s.eventually(st, 4*time.Minute, func(g Gomega, st *convergev1.SyncTarget) {
			g.Expect(st.Status.LastAttemptedRevision).To(Equal(bad))
			g.Expect(ready(st).Reason).To(Equal(convergev1.RolledBackReason), ready(st).Message)
			g.Expect(ready(st).Message).To(ContainSubstring("pre-upgrade hook Job"))
		})
		g.Expect(jobs(g)).To(HaveKey("page"), "the SyncFail Job ran")
		g.Expect(configMapValue(g, s.app, "app")).To(Equal("one"), "the failed revision's objects were never applied")
		cm := &corev1.ConfigMap{}
		object(g, s.app, "settings", cm)
		g.Expect(cm.Data).To(HaveKeyWithValue("value", "one"))
	})
}
