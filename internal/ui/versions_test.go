package ui

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/chromedp/chromedp"
	. "github.com/onsi/gomega"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
	"github.com/converge-gitops/converge/internal/browsertest"
	"github.com/converge-gitops/converge/internal/charttest"
)

// TestChartVersionsInRange: a chart SyncTarget's page lists, when asked, the versions of
// its repository its range allows, newest first, the deployed one and the newer ones
// marked; a version outside the range is not listed.
func TestChartVersionsInRange(t *testing.T) {
	g := NewWithT(t)
	repo := charttest.NewHTTPRepo()
	t.Cleanup(repo.Close)
	for _, v := range []string{"6.4.0", "6.5.1", "6.6.0", "7.0.0"} {
		archive, err := charttest.Package("podinfo", charttest.Chart("podinfo", v))
		g.Expect(err).NotTo(HaveOccurred())
		repo.Add("podinfo", v, archive)
	}
	st := fakeChartTarget("shop", "web")
	st.Spec.Chart.Repository = repo.URL()
	s, _ := testServer(t, []convergev1.SyncTarget{st}, nil, nil)

	rec := get(t, s, "/targets/shop/web/versions")
	g.Expect(rec.Code).To(Equal(http.StatusOK))
	g.Expect(rec.Body.String()).To(Equal(`<ul class="versions" aria-label="Versions in range &gt;=6.5 &lt;7">` +
		`<li class="v-newer"><code>6.6.0</code> · newer</li><li class="v-deployed"><code>6.5.1</code> · deployed</li></ul>`))
	plain := fakeTarget("shop", "api", true)
	s, _ = testServer(t, []convergev1.SyncTarget{plain}, nil, nil)
	g.Expect(get(t, s, "/targets/shop/api/versions").Body.String()).To(ContainSubstring("it deploys no chart of a chart repository"))

	if testing.Short() {
		return
	}
	s, _ = testServer(t, []convergev1.SyncTarget{st}, nil, nil)
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	ctx := browsertest.New(t)
	g.Expect(chromedp.Do(ctx, chromedp.Navigate(srv.URL+"/targets/shop/web"), chromedp.WaitVisible(chromedp.CSS("button[data-load]")))).To(Succeed())
	g.Expect(within(ctx, chromedp.Click(chromedp.CSS("button[data-load]")), chromedp.WaitVisible(chromedp.CSS("ul.versions")))).To(Succeed())
	text, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.querySelector('#versions').innerText`))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(text).To(And(ContainSubstring("6.6.0 · newer"), ContainSubstring("6.5.1 · deployed")))
	browsertest.Screenshot(t, ctx, "memory-versions")
}
