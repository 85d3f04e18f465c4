package ui

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	. "github.com/onsi/gomega"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
	"github.com/converge-gitops/converge/internal/browsertest"
)

// fakeSet is a SyncTargetSet of three regions rolled out in two steps, half way: eu
// is Ready, us rolls out, ap waits its turn; its SyncTargets are the set's targets.
func fakeSet(ns, name string) (convergev1.SyncTargetSet, []convergev1.SyncTarget) {
	set := convergev1.SyncTargetSet{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	set.Spec.Generators = []convergev1.Generator{
		{List: &convergev1.ListGenerator{Elements: []map[string]string{{"region": "eu"}, {"region": "us"}, {"region": "ap"}}}},
		{Matrix: &convergev1.MatrixGenerator{Generators: []convergev1.BaseGenerator{
			{Clusters: &convergev1.ClustersGenerator{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"env": "prod"}}}},
			{GitDirectories: &convergev1.GitDirectoriesGenerator{Source: convergev1.GitSource{URL: "https://bot:t0ken@github.com/acme/fleet.git",
				Ref: convergev1.GitRef{Branch: "main"}}, Include: []string{"apps/*"}, Exclude: []string{"apps/legacy"}}},
		}}},
	}
	set.Spec.Template = convergev1.SyncTargetTemplate{Metadata: convergev1.SyncTargetTemplateMeta{Name: "web-{{ .region }}"},
		Spec: apiextensionsv1.JSON{Raw: []byte(`{}`)}}
	set.Spec.Strategy = &convergev1.RolloutStrategy{MaxConcurrent: new(int32(1)), Steps: []convergev1.RolloutStep{
		{MatchLabels: map[string]string{"region": "eu"}}, {MatchLabels: map[string]string{"region": "us"}}}}
	t := metav1.NewTime(fixedNow.Add(-time.Minute))
	set.Status.Conditions = []metav1.Condition{
		{Type: convergev1.ReadyCondition, Status: metav1.ConditionFalse, Reason: convergev1.RolloutProgressingReason,
			Message: "step 2 of 3: 0 of 1 Ready", LastTransitionTime: t},
		{Type: convergev1.ReconcilingCondition, Status: metav1.ConditionTrue, Reason: convergev1.RolloutProgressingReason, LastTransitionTime: t}}
	set.Status.CurrentStep = 1
	set.Status.Targets = []convergev1.GeneratedTarget{
		{Name: "web-ap", Step: 2, Pending: true}, {Name: "web-eu", Ready: metav1.ConditionTrue, Step: 0},
		{Name: "web-us", Ready: metav1.ConditionFalse, Step: 1}, {Name: "web-gone", Step: 2}}
	var targets []convergev1.SyncTarget
	for i, region := range []string{"eu", "us", "ap"} {
		st := fakeTarget(ns, "web-"+region, i == 0)
		st.Labels = map[string]string{convergev1.SetLabel: name, "region": region}
		targets = append(targets, st)
	}
	return set, targets
}

// TestSetPageShowsGeneratorsStepsAndTargets: a set's page says what generates its
// SyncTargets, how its rollout goes and where it stands, with each SyncTarget's state; the
// overview and a generated SyncTarget's page link to it; credentials in a generator's URL
// never show; a set that is not there is a 404 that names it.
func TestSetPageShowsGeneratorsStepsAndTargets(t *testing.T) {
	g := NewWithT(t)
	set, targets := fakeSet("shop", "regions")
	s, _ := testServer(t, append(targets, fakeTarget("shop", "db", true)), nil, nil)
	s.store.(*MemoryStore).AddSets(set)

	rec := get(t, s, "/sets/shop/regions")
	g.Expect(rec.Code).To(Equal(http.StatusOK))
	body := rec.Body.String()
	g.Expect(body).To(ContainSubstring("list of 3 parameter sets"))
	g.Expect(body).To(ContainSubstring("matrix: every pair of (clusters: cluster Secrets matching env=prod of the namespace) × " +
		"(directories of https://github.com/acme/fleet.git (branch main) matching apps/*, except apps/legacy)"))
	g.Expect(body).NotTo(ContainSubstring("t0ken"))
	g.Expect(body).To(ContainSubstring("2 steps, each waiting until the ones before are Ready; at most 1 not Ready at once"))
	g.Expect(body).To(MatchRegexp(`<li class="step s-done"><b>Step 1</b> <code>region=eu</code> · 1 of 1 Ready`))
	g.Expect(body).To(MatchRegexp(`<li class="step s-current"><b>Step 2</b> <code>region=us</code> · 0 of 1 Ready · <span class="where">rolling out</span>`))
	g.Expect(body).To(MatchRegexp(`<li class="step s-waiting"><b>Step 3</b> <code>the SyncTargets no step matches</code> · 0 of 2 Ready`))
	g.Expect(body).To(MatchRegexp(`<a href="/targets/shop/web-eu">web-eu</a><td><b class="badge ready">Ready</b>`))
	g.Expect(body).To(MatchRegexp(`<a href="/targets/shop/web-ap">web-ap</a><td><b class="badge failed">Failed</b> <span class="badge busy">waiting for its step</span>`))
	g.Expect(body).To(ContainSubstring(`web-gone <small>(not there)</small>`))
	g.Expect(body).NotTo(ContainSubstring("/targets/shop/db"), "a SyncTarget of no set is not the set's")

	overview := get(t, s, "/").Body.String()
	g.Expect(overview).To(ContainSubstring(`of set <a href="/sets/shop/regions">regions</a>`))
	g.Expect(get(t, s, "/targets/shop/web-us").Body.String()).To(ContainSubstring(`<a class="set" href="/sets/shop/regions">regions</a> generated it`))

	missing := get(t, s, "/sets/shop/nope")
	g.Expect(missing.Code).To(Equal(http.StatusNotFound))
	g.Expect(missing.Body.String()).To(ContainSubstring("SyncTargetSet shop/nope not found"))
}

// TestSetInTheBrowser shows a set's page in Chromium, from the overview's link.
func TestSetInTheBrowser(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a browser")
	}
	g := NewWithT(t)
	set, targets := fakeSet("shop", "regions")
	s, _ := testServer(t, targets, nil, nil)
	s.store.(*MemoryStore).AddSets(set)
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)

	ctx := browsertest.New(t)
	g.Expect(chromedp.Do(ctx, chromedp.Navigate(srv.URL+"/"), chromedp.WaitVisible(chromedp.CSS("#targets")))).To(Succeed())
	browsertest.Screenshot(t, ctx, "memory-overview-sets")
	g.Expect(within(ctx, chromedp.Click(chromedp.CSS(`small.set a`)), chromedp.WaitVisible(chromedp.CSS("ol.steps")))).To(Succeed())
	text, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.querySelector("ol.steps").innerText`))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(text).To(ContainSubstring("Step 2 region=us · 0 of 1 Ready · rolling out"))
	browsertest.Screenshot(t, ctx, "memory-set")
}

// TestInClusterSetPageTellsNothingToOthers: a user who may not get the SyncTargetSets of
// a namespace gets the same refusal whether a set is there or not; one who may sees it.
func TestInClusterSetPageTellsNothingToOthers(t *testing.T) {
	c, cfg := cluster(t)
	g := NewWithT(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for _, ns := range []string{"set-a", "set-b"} {
		g.Expect(c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})).To(Succeed())
		set, _ := fakeSet(ns, "regions")
		set.Status = convergev1.SyncTargetSetStatus{}
		g.Expect(c.Create(ctx, &set)).To(Succeed())
	}
	g.Expect(c.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: "set-a", Name: "bob"}})).To(Succeed())
	grantOn(t, c, "set-a", "bob", "sets", "synctargetsets", "get", "list", "watch")
	grant(t, c, "set-a", "bob", "read", "get", "list", "watch")
	cs, err := kubernetes.NewForConfig(cfg)
	g.Expect(err).NotTo(HaveOccurred())
	tr, err := cs.CoreV1().ServiceAccounts("set-a").CreateToken(ctx, "bob", &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	g.Expect(err).NotTo(HaveOccurred())
	token := tr.Status.Token
	s, err := New(ctx, Options{Config: cfg, InCluster: &InCluster{Client: c, CacheTTL: time.Nanosecond}})
	g.Expect(err).NotTo(HaveOccurred())

	g.Eventually(func() int { return as(s, token, "GET", "/sets/set-a/regions", nil).Code }).Should(Equal(http.StatusOK))
	there := as(s, token, "GET", "/sets/set-b/regions", nil)
	absent := as(s, token, "GET", "/sets/set-b/absent", nil)
	g.Expect(there.Code).To(Equal(http.StatusForbidden))
	g.Expect(absent.Code).To(Equal(http.StatusForbidden))
	g.Expect(there.Body.String()).To(ContainSubstring("may not get synctargetsets in namespace set-b"))
	g.Expect(there.Body.String()).To(Equal(absent.Body.String()), "the same answer whether it is there or not")
}

// TestOverviewFiltersBySetAndCluster: the overview narrows to one set's SyncTargets, or to
// one cluster's, and offers both in its filter.
func TestOverviewFiltersBySetAndCluster(t *testing.T) {
	g := NewWithT(t)
	_, targets := fakeSet("shop", "regions")
	remote := fakeTarget("shop", "edge", true)
	remote.Spec.KubeConfig = &convergev1.KubeConfigReference{SecretRef: convergev1.KubeConfigSecretReference{Name: "prod-eu"}}
	s, _ := testServer(t, append(targets, fakeTarget("shop", "db", true), remote), nil, nil)

	all := get(t, s, "/").Body.String()
	g.Expect(all).To(ContainSubstring(`<select name="set"><option value="">any</option><option>regions</option></select>`))
	g.Expect(all).To(ContainSubstring(`<option>in-cluster</option><option>prod-eu</option>`))
	g.Expect(all).To(ContainSubstring(`→ cluster <a href="/?cluster=prod-eu">prod-eu</a>`))

	set := get(t, s, "/?set=regions").Body.String()
	g.Expect(set).To(ContainSubstring(`href="/targets/shop/web-eu"`))
	g.Expect(set).NotTo(ContainSubstring(`href="/targets/shop/db"`))
	g.Expect(set).NotTo(ContainSubstring(`href="/targets/shop/edge"`))

	cluster := get(t, s, "/?cluster=prod-eu").Body.String()
	g.Expect(cluster).To(ContainSubstring(`href="/targets/shop/edge"`))
	g.Expect(cluster).NotTo(ContainSubstring(`href="/targets/shop/db"`))
	local := get(t, s, "/?cluster=in-cluster").Body.String()
	g.Expect(local).To(ContainSubstring(`href="/targets/shop/db"`))
	g.Expect(local).NotTo(ContainSubstring(`href="/targets/shop/edge"`))
}

// fakePreviews is a set of pull request previews: #7 has its preview web-pr-7 (Ready),
// #9 from a fork waits for its label, #11 has a link the page must not follow.
func fakePreviews(ns string) (convergev1.SyncTargetSet, []convergev1.SyncTarget) {
	set := convergev1.SyncTargetSet{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "previews"}}
	set.Spec.Generators = []convergev1.Generator{{PullRequests: &convergev1.PullRequestsGenerator{
		Provider: convergev1.GitHubForge, Repository: "acme/web", TargetBranches: []string{"main"},
		Labels: []string{"preview"}, ServiceAccountName: "previewer"}}}
	set.Spec.Template = convergev1.SyncTargetTemplate{Metadata: convergev1.SyncTargetTemplateMeta{Name: "web-pr-{{ .number }}"},
		Spec: apiextensionsv1.JSON{Raw: []byte(`{}`)}}
	t := metav1.NewTime(fixedNow.Add(-time.Minute))
	set.Status.Conditions = []metav1.Condition{{Type: convergev1.ReadyCondition, Status: metav1.ConditionTrue,
		Reason: convergev1.SucceededReason, Message: "1 SyncTargets Ready", LastTransitionTime: t}}
	set.Status.Targets = []convergev1.GeneratedTarget{{Name: "web-pr-7", Ready: metav1.ConditionTrue}}
	set.Status.PullRequests = []convergev1.PullRequestState{
		{Number: 7, URL: "https://github.com/acme/web/pull/7", Author: "dana", Branch: "feature/checkout",
			HeadSHA: "0123456789abcdef0123456789abcdef01234567", SyncTargets: []string{"web-pr-7"}},
		{Number: 9, URL: "https://github.com/acme/web/pull/9", Author: "visitor", Branch: "typo",
			Waiting: `from a fork: waits for a maintainer to add the label "preview-approved"`},
		{Number: 11, URL: "javascript:alert(1)", Author: "<b>eve</b>", Branch: "x", Waiting: "a draft (includeDrafts is false)"},
	}
	st := fakeTarget(ns, "web-pr-7", true)
	st.Labels = map[string]string{convergev1.SetLabel: "previews"}
	return set, []convergev1.SyncTarget{st}
}

// TestSetPageShowsPullRequests: a set of previews lists its pull requests with their links,
// their previews and their states, or why they wait; a link that is not http(s) is no link
// and what the forge says is text.
func TestSetPageShowsPullRequests(t *testing.T) {
	g := NewWithT(t)
	set, targets := fakePreviews("shop")
	s, _ := testServer(t, targets, nil, nil)
	s.store.(*MemoryStore).AddSets(set)
	body := get(t, s, "/sets/shop/previews").Body.String()
	g.Expect(body).To(ContainSubstring("open pull requests of acme/web on github into main labelled preview, previews run as previewer"))
	g.Expect(body).To(MatchRegexp(`<a href="https://github.com/acme/web/pull/7" rel="noopener noreferrer">#7</a><td>dana<td><code>feature/checkout</code> <small>0123456</small><td><a href="/targets/shop/web-pr-7">web-pr-7</a> <b class="badge ready">Ready</b>`))
	g.Expect(body).To(ContainSubstring(`<span class="badge busy">waiting</span> <span class="msg">from a fork: waits for a maintainer to add the label &#34;preview-approved&#34;</span>`))
	g.Expect(body).NotTo(ContainSubstring("javascript:"))
	g.Expect(body).To(ContainSubstring("<td>#11<td>&lt;b&gt;eve&lt;/b&gt;"))
}

// TestPreviewsInTheBrowser shows a set of previews in Chromium.
func TestPreviewsInTheBrowser(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a browser")
	}
	g := NewWithT(t)
	set, targets := fakePreviews("shop")
	s, _ := testServer(t, targets, nil, nil)
	s.store.(*MemoryStore).AddSets(set)
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	ctx := browsertest.New(t)
	g.Expect(chromedp.Do(ctx, chromedp.Navigate(srv.URL+"/sets/shop/previews"), chromedp.WaitVisible(chromedp.CSS("table.prs")))).To(Succeed())
	text, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.querySelector("table.prs").innerText`))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(text).To(ContainSubstring("#7"))
	g.Expect(text).To(ContainSubstring("waits for a maintainer"))
	browsertest.Screenshot(t, ctx, "memory-previews")
}
