package actions

import (
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
)

var (
	digestA = "sha256:" + strings.Repeat("a", 64)
	digestB = "sha256:e8d3f31" + strings.Repeat("b", 57)
	digestC = "sha256:e8d3f31" + strings.Repeat("c", 57)
)

func chartTarget(repository, version string, history ...string) *convergev1.SyncTarget {
	st := &convergev1.SyncTarget{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web"},
		Spec: convergev1.SyncTargetSpec{Chart: &convergev1.ChartSource{Repository: repository, Name: "podinfo", Version: version}}}
	for _, h := range history {
		st.Status.History = append(st.Status.History, convergev1.HistoryEntry{Revision: h})
	}
	if len(history) > 0 {
		st.Status.LastAppliedRevision = history[0]
	}
	return st
}

// TestRollbackOfAChartPinsItsVersionAndResumeRestoresTheRange: the revision converge
// history prints (short digest), a bare version or a full revision name one chart
// revision; pinning sets the exact version (an OCI chart's digest), and resume puts the
// range back.
func TestRollbackOfAChartPinsItsVersionAndResumeRestoresTheRange(t *testing.T) {
	g := NewWithT(t)
	st := chartTarget("https://charts.example", ">=6.5 <7", "6.6.0@"+digestA, "6.5.1@"+digestB, "6.5.0@"+digestC)
	for _, to := range []string{"6.5.1@sha256:e8d3f31b", "6.5.1", "6.5.1@" + digestB, " 6.5.1@e8d3f31 "} {
		r, err := ResolveChartRevision(st, to)
		g.Expect(err).NotTo(HaveOccurred(), to)
		g.Expect(r.String()).To(Equal("6.5.1@"+digestB), to)
	}
	_, err := ResolveChartRevision(st, "6.5@sha256:e8d3f31")
	g.Expect(err).To(MatchError(ContainSubstring("no chart revision 6.5@sha256:e8d3f31 in the history of shop/web")))
	_, err = ResolveChartRevision(st, "6.5.1@sha256:e8d")
	g.Expect(err).To(BeAssignableToTypeOf(&InputError{}), "a digest prefix too short to name one")

	twice := chartTarget("https://charts.example", "*", "6.5.1@"+digestB, "6.5.1@"+digestC)
	_, err = ResolveChartRevision(twice, "6.5.1@e8d3f31")
	g.Expect(err).To(MatchError(ContainSubstring("ambiguous")))

	pinned, err := pinTo(st, "6.5.1@sha256:e8d3f31")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(pinned).To(Equal("6.5.1@" + digestB + ", keeping today's chart values: the history kept none for it"))
	g.Expect(st.Spec.Chart.Version).To(Equal("6.5.1"))
	g.Expect(st.Spec.Chart.Digest).To(BeEmpty())
	what, restores := Pinned(st)
	g.Expect([]string{what, restores}).To(Equal([]string{"chart", "version >=6.5 <7"}))

	_, err = pinTo(st, "6.5.0")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(st.Spec.Chart.Version).To(Equal("6.5.0"), "a second rollback pins again")
	g.Expect(st.Annotations[PinnedChartAnnotation]).To(Equal(`{"version":">=6.5 <7"}`), "and keeps what was asked before any pin")

	did, err := Unpin(st)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(did).To(Equal([]string{"following version >=6.5 <7 again"}))
	g.Expect(st.Spec.Chart.Version).To(Equal(">=6.5 <7"))
	g.Expect(st.Annotations).NotTo(HaveKey(PinnedChartAnnotation))
}

func TestRollbackOfAnOCIChartPinsItsDigest(t *testing.T) {
	g := NewWithT(t)
	st := chartTarget("oci://registry.example/charts", "6.x", "6.6.0@"+digestA, "6.5.1@"+digestB)
	pinned, err := pinTo(st, "6.5.1")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(pinned).To(HavePrefix("6.5.1@" + digestB))
	g.Expect(st.Spec.Chart.Digest).To(Equal(digestB))
	g.Expect(st.Spec.Chart.Version).To(BeEmpty(), "version and digest exclude each other")
	did, err := Unpin(st)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(did).To(Equal([]string{"following version 6.x again"}))
	g.Expect(*st.Spec.Chart).To(HaveField("Version", "6.x"))
	g.Expect(st.Spec.Chart.Digest).To(BeEmpty())
}

// TestRollbackOfAChartPinsTheValuesItWasDeployedWith: a rollback gives the chart the
// inline values the history kept for the revision, and resume the values from before;
// values the history did not keep stay as they are.
func TestRollbackOfAChartPinsTheValuesItWasDeployedWith(t *testing.T) {
	g := NewWithT(t)
	st := chartTarget("https://charts.example", "1.x", "1.1.0@"+digestA, "1.0.0@"+digestB, "0.9.0@"+digestC)
	st.Spec.Helm = &convergev1.HelmSpec{Values: &apiextensionsv1.JSON{Raw: []byte(`{"message":"two"}`)}}
	st.Status.History[0].Values = &apiextensionsv1.JSON{Raw: []byte(`{"message":"two"}`)}
	st.Status.History[1].Values = &apiextensionsv1.JSON{Raw: []byte(`{"message":"one"}`)}

	pinned, err := pinTo(st, "1.0.0")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(pinned).To(Equal("1.0.0@" + digestB + " with the chart values it was deployed with"))
	g.Expect(string(st.Spec.Helm.Values.Raw)).To(Equal(`{"message":"one"}`))
	_, restores := Pinned(st)
	g.Expect(restores).To(Equal("version 1.x and the chart values from before"))

	pinned, err = pinTo(st, "0.9.0")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(pinned).To(HaveSuffix(", keeping today's chart values: the history kept none for it"))
	g.Expect(string(st.Spec.Helm.Values.Raw)).To(Equal(`{"message":"one"}`))

	did, err := Unpin(st)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(did).To(Equal([]string{"following version 1.x again", "the chart values from before the rollback restored"}))
	g.Expect(string(st.Spec.Helm.Values.Raw)).To(Equal(`{"message":"two"}`), "the values before the first rollback")
	g.Expect(st.Annotations).NotTo(HaveKey(PinnedValuesAnnotation))

	none := chartTarget("https://charts.example", "1.x", "1.1.0@"+digestA, "1.0.0@"+digestB)
	none.Status.History[1].Values = &apiextensionsv1.JSON{Raw: []byte(`{"message":"one"}`)}
	_, err = pinTo(none, "1.0.0")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(none.Annotations).To(HaveKeyWithValue(PinnedValuesAnnotation, "null"))
	_, err = Unpin(none)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(none.Spec.Helm.Values).To(BeNil(), "no values before, none after")
}
