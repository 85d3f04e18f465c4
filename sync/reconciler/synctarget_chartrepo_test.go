package reconciler_test

import (
	"context"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
	"github.com/converge-gitops/converge/internal/charttest"
)

func packaged(t *testing.T, name, version string) []byte {
	t.Helper()
	b, err := charttest.Package(name, charttest.Chart(name, version))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// chartTarget creates a SyncTarget following chart of repository.
func (f *fixture) chartTarget(name string, chart convergev1.ChartSource, values string) *convergev1.SyncTarget {
	f.t.Helper()
	chart.Interval = &metav1.Duration{Duration: time.Second}
	st := &convergev1.SyncTarget{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: f.ns},
		Spec: convergev1.SyncTargetSpec{Chart: &chart, TargetNamespace: f.app, Prune: true,
			Helm:    &convergev1.HelmSpec{ReleaseName: "shop"},
			Timeout: &metav1.Duration{Duration: 40 * time.Second}},
	}
	if values != "" {
		st.Spec.Helm.Values = &apiextensionsv1.JSON{Raw: []byte(values)}
	}
	if err := k8s.Create(context.Background(), st); err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(func() { _ = k8s.Delete(context.Background(), st) })
	return st
}

// TestChartFromHTTPRepositoryFollowsASemverRange: a chart of an HTTP repository is deployed
// at the newest version its range matches, a new matching version published later is found
// by polling and deployed as a new revision, and one outside the range is not.
func TestChartFromHTTPRepositoryFollowsASemverRange(t *testing.T) {
	f := newFixture(t)
	repo := charttest.NewHTTPRepo()
	t.Cleanup(repo.Close)
	repo.Add("shop", "1.0.0", packaged(t, "shop", "1.0.0"))
	repo.Add("shop", "1.1.0", packaged(t, "shop", "1.1.0"))
	st := f.chartTarget("chart-http", convergev1.ChartSource{Repository: repo.URL(), Name: "shop", Version: ">=1.0 <2"},
		`{"message":"from the spec"}`)
	eventually(t, st, func(g Gomega, st *convergev1.SyncTarget) {
		g.Expect(ready(st).Status).To(BeEquivalentTo("True"), ready(st).Message)
		g.Expect(st.Status.LastHealthyRevision).To(HavePrefix("1.1.0@sha256:"))
	})
	g := NewWithT(t)
	g.Expect(f.liveData(g, &corev1.ConfigMap{}, "shop")).To(Equal(map[string]string{"message": "from the spec", "version": "1.1.0"}))

	repo.Add("shop", "2.0.0", packaged(t, "shop", "2.0.0"))
	repo.Add("shop", "1.2.0", packaged(t, "shop", "1.2.0"))
	eventually(t, st, func(g Gomega, st *convergev1.SyncTarget) {
		g.Expect(st.Status.LastHealthyRevision).To(HavePrefix("1.2.0@sha256:"))
	})
	g.Expect(f.liveData(g, &corev1.ConfigMap{}, "shop")).To(HaveKeyWithValue("version", "1.2.0"))
	g.Expect(get(g, st).Status.History[0].Revision).To(HavePrefix("1.2.0@"))
}

// TestChartFromOCIRegistryByDigest: a chart pushed to an OCI registry is deployed by the
// digest it is pinned to, whatever newer versions the registry holds.
func TestChartFromOCIRegistryByDigest(t *testing.T) {
	f := newFixture(t)
	reg := charttest.NewOCIRegistry()
	t.Cleanup(reg.Close)
	pinned, err := reg.Push("shop", "1.0.0", packaged(t, "shop", "1.0.0"))
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	_, err = reg.Push("shop", "1.1.0", packaged(t, "shop", "1.1.0"))
	NewWithT(t).Expect(err).NotTo(HaveOccurred())
	st := f.chartTarget("chart-oci", convergev1.ChartSource{Repository: reg.Repository(), Name: "shop", Digest: pinned}, "")
	eventually(t, st, func(g Gomega, st *convergev1.SyncTarget) {
		g.Expect(ready(st).Status).To(BeEquivalentTo("True"), ready(st).Message)
		g.Expect(st.Status.LastHealthyRevision).To(Equal("1.0.0@" + pinned))
	})
	g := NewWithT(t)
	g.Expect(f.liveData(g, &corev1.ConfigMap{}, "shop")).To(HaveKeyWithValue("version", "1.0.0"))
	g.Expect(strings.HasPrefix(pinned, "sha256:")).To(BeTrue())
}
