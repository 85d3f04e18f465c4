package ui

import (
	"fmt"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	. "github.com/onsi/gomega"

	"github.com/converge-gitops/converge/internal/browsertest"
)

// TestInClusterLimitsInTheBrowser signs in through the in-cluster login page in Chromium,
// with one live update stream allowed per user: the first tab follows the cluster, a
// second one says that it is not live. Then a flood of bad tokens from the browser's
// address has its sign-in page say why it is refused.
func TestInClusterLimitsInTheBrowser(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a browser")
	}
	g := NewWithT(t)
	api := &recordingAPI{}
	s, _ := inClusterServer(api, &InCluster{MaxStreamsPerUser: 1, Now: (&fakeClock{t: fixedNow}).now}, fakeTarget("mine", "web", true), fakeTarget("mine", "db", false))
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)

	ctx := browsertest.New(t)
	g.Expect(within(ctx, chromedp.Navigate(srv.URL+"/"), chromedp.WaitVisible(chromedp.CSS(`input[name="token"]`)),
		chromedp.SetValue(chromedp.CSS(`input[name="token"]`), "good-alice"), chromedp.Submit(chromedp.CSS(`form[action="/login"]`)),
		chromedp.WaitVisible(chromedp.CSS("#targets")))).To(Succeed())
	live, err := chromedp.Run(ctx, chromedp.Poll[string](`document.body.dataset.live`, chromedp.WithPollingTimeout(10*time.Second)))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(live).To(Equal("on"))

	second, cancel := chromedp.NewContext(ctx)
	defer cancel()
	g.Expect(chromedp.Do(second)).To(Succeed(), "open the tab (a timeout on its first use would close it)")
	g.Expect(within(second, chromedp.Navigate(srv.URL+"/targets/mine/web"), chromedp.WaitVisible(chromedp.CSS(".timeline")))).To(Succeed())
	refused, err := chromedp.Run(second, chromedp.Poll[string](`document.body.dataset.live === "refused" ? "refused" : null`, chromedp.WithPollingTimeout(10*time.Second)))
	g.Expect(err).NotTo(HaveOccurred(), "a stream past the cap is refused, and the page says so")
	g.Expect(refused).To(Equal("refused"))
	conn, err := chromedp.Run(second, chromedp.Text(chromedp.CSS("#conn")))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(conn).To(Equal("not live"))
	browsertest.Screenshot(t, second, "incluster-stream-refused")

	for i := range defaultAuthBurst {
		from(s, "127.0.0.1:1", fmt.Sprintf("guess-%d", i), "GET", "/", nil)
	}
	g.Expect(within(ctx, chromedp.Navigate(srv.URL+"/login"), chromedp.WaitVisible(chromedp.CSS(`input[name="token"]`)),
		chromedp.SetValue(chromedp.CSS(`input[name="token"]`), "guess-again"), chromedp.Submit(chromedp.CSS(`form[action="/login"]`)),
		chromedp.WaitVisible(chromedp.CSS(`p.error`)))).To(Succeed())
	msg, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS("p.error")))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(msg).To(HavePrefix("too many sign-in attempts from your address: try again in"))
	browsertest.Screenshot(t, ctx, "incluster-login-rate-limited")
}
