package e2e

import (
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
	"github.com/converge-gitops/converge/internal/charttest"
	"github.com/converge-gitops/converge/internal/testcharts"
)

// podinfoFiles is the podinfo chart, unmodified, at deploy/.
func podinfoFiles(t *testing.T) map[string]string {
	files, err := testcharts.Files(testcharts.Podinfo, "deploy")
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

// TestChartFromRepository: the daemon deploys a chart of a loopback HTTP chart repository at
// the newest version its range matches, and a version published later, found by polling.
// `converge diff --target` fetches the same chart and finds nothing to change. `converge
// rollback --to VERSION` pins the chart back to a version of its history, and `converge
// resume` lets it follow its range again.
func TestChartFromRepository(t *testing.T) {
	run(t, 44, "Helm chart from a chart repository", parallel, func(s *scenario) {
		g := NewWithT(t)
		repo := charttest.NewHTTPRepo()
		t.Cleanup(repo.Close)
		publish := func(v string) {
			b, err := charttest.Package("shop", charttest.Chart("shop", v))
			g.Expect(err).NotTo(HaveOccurred())
			repo.Add("shop", v, b)
		}
		publish("1.0.0")
		st := &convergev1.SyncTarget{
			ObjectMeta: metav1.ObjectMeta{Name: "shop", Namespace: s.ns},
			Spec: convergev1.SyncTargetSpec{
				Chart: &convergev1.ChartSource{Repository: repo.URL(), Name: "shop", Version: "1.x",
					Interval: &metav1.Duration{Duration: 2 * time.Second}},
				Helm: &convergev1.HelmSpec{ReleaseName: "shop",
					Values: &apiextensionsv1.JSON{Raw: []byte(`{"message":"one"}`)}},
				TargetNamespace: s.app, Prune: true, Timeout: &metav1.Duration{Duration: 30 * time.Second},
			},
		}
		s.create(st)
		t.Cleanup(func() { _ = suite.k8s.Delete(t.Context(), st) })
		s.eventually(st, 90*time.Second, func(g Gomega, st *convergev1.SyncTarget) {
			g.Expect(st.Status.LastHealthyRevision).To(HavePrefix("1.0.0@sha256:"), ready(st).Message)
		})
		cm := &corev1.ConfigMap{}
		object(g, s.app, "shop", cm)
		g.Expect(cm.Data).To(HaveKeyWithValue("version", "1.0.0"))
		g.Expect(cm.Data).To(HaveKeyWithValue("message", "one"))
		diff := s.cli(60*time.Second, "diff", "--target", "shop", "-n", s.ns)
		g.Expect(diff.code).To(Equal(0), "nothing to change: %s", diff.String())

		publish("1.1.0")
		start := time.Now()
		s.eventually(st, 90*time.Second, func(g Gomega, st *convergev1.SyncTarget) {
			g.Expect(st.Status.LastHealthyRevision).To(HavePrefix("1.1.0@sha256:"), ready(st).Message)
		})
		s.latency("chart published → healthy", time.Since(start))
		object(g, s.app, "shop", cm)
		g.Expect(cm.Data).To(HaveKeyWithValue("version", "1.1.0"))

		// New values: the same chart version deployed again.
		latest := get(g, st)
		latest.Spec.Helm.Values = &apiextensionsv1.JSON{Raw: []byte(`{"message":"two"}`)}
		g.Expect(suite.k8s.Update(t.Context(), latest)).To(Succeed())
		g.Eventually(func(g Gomega) {
			object(g, s.app, "shop", cm)
			g.Expect(cm.Data).To(HaveKeyWithValue("message", "two"))
		}).WithTimeout(90 * time.Second).Should(Succeed())

		back := s.cli(120*time.Second, "rollback", "shop", "-n", s.ns, "--to", "1.0.0")
		g.Expect(back.code).To(Equal(0), back.String())
		g.Expect(back.stdout).To(ContainSubstring("pinned SyncTarget " + s.ns + "/shop to chart 1.0.0@sha256:"))
		g.Expect(back.stdout).To(ContainSubstring("with the chart values it was deployed with"))
		g.Expect(back.stdout).To(ContainSubstring("(converge resume restores version 1.x and the chart values from before)"))
		s.eventually(st, 90*time.Second, func(g Gomega, st *convergev1.SyncTarget) {
			g.Expect(st.Spec.Chart.Version).To(Equal("1.0.0"))
			g.Expect(st.Status.LastHealthyRevision).To(HavePrefix("1.0.0@sha256:"), ready(st).Message)
		})
		g.Eventually(func(g Gomega) {
			object(g, s.app, "shop", cm)
			g.Expect(cm.Data).To(HaveKeyWithValue("version", "1.0.0"), "the pinned version is deployed")
			g.Expect(cm.Data).To(HaveKeyWithValue("message", "one"), "with the values it was deployed with")
		}).WithTimeout(90 * time.Second).Should(Succeed())

		resumed := s.cli(120*time.Second, "resume", "shop", "-n", s.ns)
		g.Expect(resumed.code).To(Equal(0), resumed.String())
		s.eventually(st, 90*time.Second, func(g Gomega, st *convergev1.SyncTarget) {
			g.Expect(st.Spec.Chart.Version).To(Equal("1.x"))
			g.Expect(st.Status.LastHealthyRevision).To(HavePrefix("1.1.0@sha256:"), ready(st).Message)
		})
		g.Eventually(func(g Gomega) {
			object(g, s.app, "shop", cm)
			g.Expect(cm.Data).To(HaveKeyWithValue("message", "two"), "resume restores the values")
		}).WithTimeout(90 * time.Second).Should(Succeed())
	})
}

// TestChartFromOCIRegistry: the daemon deploys a chart pushed to an OCI registry (in
// process, on loopback), by version range, and moves to a version pushed later.
func TestChartFromOCIRegistry(t *testing.T) {
	run(t, 45, "Helm chart from an OCI registry", parallel, func(s *scenario) {
		g := NewWithT(t)
		reg := charttest.NewOCIRegistry()
		t.Cleanup(reg.Close)
		push := func(v string) {
			b, err := charttest.Package("shop", charttest.Chart("shop", v))
			g.Expect(err).NotTo(HaveOccurred())
			_, err = reg.Push("shop", v, b)
			g.Expect(err).NotTo(HaveOccurred())
		}
		push("2.0.0")
		st := &convergev1.SyncTarget{
			ObjectMeta: metav1.ObjectMeta{Name: "shop-oci", Namespace: s.ns},
			Spec: convergev1.SyncTargetSpec{
				Chart: &convergev1.ChartSource{Repository: reg.Repository(), Name: "shop", Version: "2.x",
					Interval: &metav1.Duration{Duration: 2 * time.Second}},
				Helm:            &convergev1.HelmSpec{ReleaseName: "shop-oci"},
				TargetNamespace: s.app, Prune: true, Timeout: &metav1.Duration{Duration: 30 * time.Second},
			},
		}
		s.create(st)
		t.Cleanup(func() { _ = suite.k8s.Delete(t.Context(), st) })
		s.eventually(st, 90*time.Second, func(g Gomega, st *convergev1.SyncTarget) {
			g.Expect(st.Status.LastHealthyRevision).To(HavePrefix("2.0.0@sha256:"), ready(st).Message)
		})
		push("2.1.0")
		s.eventually(st, 90*time.Second, func(g Gomega, st *convergev1.SyncTarget) {
			g.Expect(st.Status.LastHealthyRevision).To(HavePrefix("2.1.0@sha256:"), ready(st).Message)
		})
		cm := &corev1.ConfigMap{}
		object(g, s.app, "shop-oci", cm)
		g.Expect(cm.Data).To(HaveKeyWithValue("version", "2.1.0"))

		// Pinned back by the revision as converge history prints it: version and short digest.
		first := ""
		for _, h := range get(g, st).Status.History {
			if strings.HasPrefix(h.Revision, "2.0.0@") {
				first = h.Revision
			}
		}
		g.Expect(first).NotTo(BeEmpty())
		back := s.cli(120*time.Second, "rollback", "shop-oci", "-n", s.ns, "--to", first[:len("2.0.0@sha256:")+7])
		g.Expect(back.code).To(Equal(0), back.String())
		s.eventually(st, 90*time.Second, func(g Gomega, st *convergev1.SyncTarget) {
			g.Expect(st.Spec.Chart.Digest).To(Equal(strings.TrimPrefix(first, "2.0.0@")), "an OCI chart is pinned by digest")
			g.Expect(st.Status.LastHealthyRevision).To(Equal(first), ready(st).Message)
		})
		object(g, s.app, "shop-oci", cm)
		g.Expect(cm.Data).To(HaveKeyWithValue("version", "2.0.0"))
	})
}
