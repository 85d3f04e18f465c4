package e2e

import (
	"io/fs"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
	"github.com/converge-gitops/converge/internal/testcharts"
)

// podinfoFiles is the podinfo chart, unmodified, at deploy/.
func podinfoFiles(t *testing.T) map[string]string {
	files := map[string]string{}
	chart := testcharts.FS(testcharts.Podinfo)
	err := fs.WalkDir(chart, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(chart, p)
		files["deploy/"+p] = string(b)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// TestChartFromGit: the real podinfo chart kept in Git is deployed by the daemon with its
// pre-install hook Job run to completion first, `converge build --target` and `converge
// diff --target` render it as the daemon does, a values change in Git rolls the
// Deployment, and a revision whose pre-upgrade hook fails is rolled back.
func TestChartFromGit(t *testing.T) {
	run(t, 42, "Helm chart kept in Git", parallel, func(s *scenario) {
		g := NewWithT(t)
		r := s.repo("chart")
		files := podinfoFiles(t)
		files["values-prod.yaml"] = "replicaCount: 2\nhooks:\n  preInstall:\n    job:\n      enabled: true\n"
		rev := r.commit(files)
		st := s.syncTarget("podinfo", r, func(st *convergev1.SyncTarget) {
			st.Spec.Helm = &convergev1.HelmSpec{ReleaseName: "web", ValuesFiles: []string{"../values-prod.yaml"},
				Values: &apiextensionsv1.JSON{Raw: []byte(`{"ui":{"message":"from converge"}}`)}}
		})
		s.latency("chart in Git → healthy", s.waitHealthy(st, rev, 90*time.Second))
		dep := &appsv1.Deployment{}
		object(g, s.app, "web-podinfo", dep)
		g.Expect(*dep.Spec.Replicas).To(BeEquivalentTo(2))
		g.Expect(dep.Labels).To(HaveKeyWithValue(convergev1.NameLabel, "podinfo"))

		build := s.cli(60*time.Second, "build", "--target", "podinfo", "-n", s.ns)
		g.Expect(build.code).To(Equal(0), build.String())
		g.Expect(build.stdout).To(ContainSubstring("name: web-podinfo"))
		diff := s.cli(60*time.Second, "diff", "--target", "podinfo", "-n", s.ns)
		g.Expect(diff.code).To(Equal(0), "nothing to change: %s", diff.String())

		files["values-prod.yaml"] = "replicaCount: 3\n"
		rev = r.commit(files)
		s.waitHealthy(st, rev, 90*time.Second)
		object(g, s.app, "web-podinfo", dep)
		g.Expect(*dep.Spec.Replicas).To(BeEquivalentTo(3))

		// A pre-upgrade hook Job whose Pod can go to no node: its deadline fails it.
		files["values-prod.yaml"] = "replicaCount: 4\n"
		files["deploy/templates/check.yaml"] = `apiVersion: batch/v1
kind: Job
metadata:
  name: check
  annotations: {"helm.sh/hook": pre-upgrade, "helm.sh/hook-delete-policy": hook-failed}
spec:
  backoffLimit: 0
  activeDeadlineSeconds: 2
  template:
    spec:
      restartPolicy: Never
      nodeSelector: {no-such-node: "true"}
      containers: [{name: check, image: example.com/check:1}]
`
		bad := r.commit(files)
		s.eventually(st, 120*time.Second, func(g Gomega, st *convergev1.SyncTarget) {
			g.Expect(st.Status.LastAttemptedRevision).To(Equal(bad))
			g.Expect(ready(st).Reason).To(Equal(convergev1.RolledBackReason), ready(st).Message)
		})
		object(g, s.app, "web-podinfo", dep)
		g.Expect(*dep.Spec.Replicas).To(BeEquivalentTo(3), "the failed hook ran before the rest: nothing of it applied")
		gone(g, s.app, "check", &batchv1.Job{})
	})
}
