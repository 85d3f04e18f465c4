package ui

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/chromedp/chromedp"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
	"github.com/converge-gitops/converge/internal/browsertest"
	"github.com/converge-gitops/converge/internal/charttest"
)

// TestChartValuesAsRendered: a chart SyncTarget's page shows, when asked, the values its
// chart was rendered with at the revision it applied — inline values and a ConfigMap's
// shown, each value a Secret gave masked with the Secret's name, the chart's own values
// in the computed side — read against a real API server; in the browser too. A Git
// SyncTarget that deploys no chart says so.
func TestChartValuesAsRendered(t *testing.T) {
	c, _ := cluster(t)
	g := NewWithT(t)
	ctx := context.Background()
	repo := charttest.NewHTTPRepo()
	t.Cleanup(repo.Close)
	archive, err := charttest.Package("podinfo", charttest.Chart("podinfo", "6.5.1"))
	g.Expect(err).NotTo(HaveOccurred())
	repo.Add("podinfo", "6.5.1", archive)
	sum := sha256.Sum256(archive)

	st := fakeChartTarget("values-a", "web")
	st.Spec.Chart.Repository = repo.URL()
	st.Spec.Helm = &convergev1.HelmSpec{ReleaseName: "web",
		Values: &apiextensionsv1.JSON{Raw: []byte(`{"replicas":2,"message":"from inline"}`)},
		ValuesFrom: []convergev1.ValuesReference{
			{Kind: "ConfigMap", Name: "ui"},
			{Kind: "Secret", Name: "db"},
			{Kind: "Secret", Name: "api", ValuesKey: "key", TargetPath: "api.key"},
		}}
	applied := "6.5.1@sha256:" + hex.EncodeToString(sum[:])
	st.Status.LastAppliedRevision, st.Status.LastFetchedRevision = applied, applied
	created := createTarget(t, c, st)
	g.Expect(c.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "values-a", Name: "ui"},
		Data: map[string]string{"values.yaml": "theme: dark\n"}})).To(Succeed())
	g.Expect(c.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "values-a", Name: "db"},
		StringData: map[string]string{"values.yaml": "db:\n  password: db-pa55word\n"}})).To(Succeed())
	g.Expect(c.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "values-a", Name: "api"},
		StringData: map[string]string{"key": "api-key-7f3e"}})).To(Succeed())

	s := NewWithStore(Options{}, NewMemoryStore([]convergev1.SyncTarget{*created}, nil), c)
	page := get(t, s, "/targets/values-a/web").Body.String()
	g.Expect(page).To(ContainSubstring(`data-src="/targets/values-a/web/values">Values</button>`))
	rec := get(t, s, "/targets/values-a/web/values")
	g.Expect(rec.Code).To(Equal(http.StatusOK))
	body := rec.Body.String()
	g.Expect(body).To(ContainSubstring(`Rendered at <code title="` + applied + `">`))
	g.Expect(body).To(ContainSubstring("<summary>Supplied: what converge passes to the chart</summary><pre>api:\n  key: &#39;*** (from Secret/api[key])&#39;\n" +
		"db:\n  password: &#39;*** (from Secret/db[values.yaml])&#39;\nmessage: from inline\nreplicas: 2\ntheme: dark\n</pre>"))
	g.Expect(body).To(ContainSubstring("<summary>Computed: merged with the chart's own values</summary><pre>api:"))
	for _, v := range []string{"db-pa55word", "api-key-7f3e"} {
		g.Expect(body).NotTo(ContainSubstring(v))
	}

	plain := fakeTarget("values-a", "api", true)
	s2 := NewWithStore(Options{}, NewMemoryStore([]convergev1.SyncTarget{plain}, nil), c)
	g.Expect(get(t, s2, "/targets/values-a/api/values").Body.String()).To(ContainSubstring("it deploys no Helm chart"))

	if testing.Short() {
		return
	}
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	bctx := browsertest.New(t)
	g.Expect(chromedp.Do(bctx, chromedp.Navigate(srv.URL+"/targets/values-a/web"),
		chromedp.WaitVisible(chromedp.CSS(`button[data-load="#values"]`)))).To(Succeed())
	g.Expect(within(bctx, chromedp.Click(chromedp.CSS(`button[data-load="#values"]`)), chromedp.WaitVisible(chromedp.CSS("#values details.values-supplied pre")))).To(Succeed())
	text, err := chromedp.Run(bctx, chromedp.Evaluate[string](`document.querySelector('#values').innerText`))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(text).To(And(ContainSubstring("password: '*** (from Secret/db[values.yaml])'"), ContainSubstring("theme: dark")))
	g.Expect(text).NotTo(ContainSubstring("db-pa55word"))
	browsertest.Screenshot(t, bctx, "memory-values")
}
