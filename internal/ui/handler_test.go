package ui

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
	"github.com/converge-gitops/converge/internal/actions"
)

// testServer serves targets from memory; its client holds the same targets.
func testServer(t *testing.T, targets []convergev1.SyncTarget, events []corev1.Event, funcs *interceptor.Funcs) (*Server, client.Client) {
	t.Helper()
	b := fake.NewClientBuilder().WithScheme(scheme())
	for i := range targets {
		b = b.WithObjects(targets[i].DeepCopy())
	}
	if funcs != nil {
		b = b.WithInterceptorFuncs(*funcs)
	}
	c := b.Build()
	return NewWithStore(Options{Now: func() time.Time { return fixedNow }}, NewMemoryStore(targets, events), c), c
}

func get(t *testing.T, s http.Handler, target string) *httptest.ResponseRecorder {
	t.Helper()
	rec := httptest.NewRecorder()
	s.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, target, nil))
	return rec
}

func TestOverviewListsTargetsWithCountsAndGraph(t *testing.T) {
	g := NewWithT(t)
	s, _ := testServer(t, []convergev1.SyncTarget{
		fakeTarget("shop", "db", true), fakeTarget("shop", "web", false, "db"), fakeTarget("infra", "dns", true),
	}, nil, nil)
	rec := get(t, s, "/")
	g.Expect(rec.Code).To(Equal(http.StatusOK))
	body := rec.Body.String()
	g.Expect(body).To(ContainSubstring(`href="/targets/shop/web"`))
	g.Expect(body).To(ContainSubstring(`href="/targets/infra/dns"`))
	g.Expect(body).To(ContainSubstring(`<b>2</b> Ready`))
	g.Expect(body).To(ContainSubstring(`<b>1</b> Failed`))
	g.Expect(body).To(ContainSubstring(`<a href="https://github.com/acme/web/commit/` + sha(2) + `"><code>` + sha(2)[:7] + `</code></a>`))
	g.Expect(body).To(ContainSubstring("rolled back: Deployment web did not become ready"))
	g.Expect(body).To(ContainSubstring("10m ago"), "the last sync")
	g.Expect(body).To(MatchRegexp(`<svg[^>]*>`), "the dependsOn graph")
	g.Expect(body).To(ContainSubstring(`<a href="/targets/shop/db" class="node ready">`))
	g.Expect(body).NotTo(ContainSubstring(`href="/targets/infra/dns" class="node`), "a target without dependencies is not in the graph")
}

func TestOverviewFilters(t *testing.T) {
	s, _ := testServer(t, []convergev1.SyncTarget{
		fakeTarget("shop", "db", true), fakeTarget("shop", "web", false), fakeTarget("infra", "dns", true),
	}, nil, nil)
	for _, tc := range []struct {
		query      string
		want, not  []string
		wantCounts string
	}{
		{query: "?ns=shop", want: []string{"/targets/shop/db", "/targets/shop/web"}, not: []string{"/targets/infra/dns"}},
		{query: "?state=Failed", want: []string{"/targets/shop/web"}, not: []string{"/targets/shop/db", "/targets/infra/dns"}},
		{query: "?q=DNS", want: []string{"/targets/infra/dns"}, not: []string{"/targets/shop/db", "/targets/shop/web"}},
		{query: "?q=did+not+become", want: []string{"/targets/shop/web"}, not: []string{"/targets/shop/db"}},
	} {
		t.Run(tc.query, func(t *testing.T) {
			g := NewWithT(t)
			body := get(t, s, "/"+tc.query).Body.String()
			rows := body[strings.Index(body, "<tbody>"):]
			for _, w := range tc.want {
				g.Expect(rows).To(ContainSubstring(`href="` + w + `"`))
			}
			for _, n := range tc.not {
				g.Expect(rows).NotTo(ContainSubstring(`href="` + n + `"`))
			}
		})
	}
}

func TestOverviewPages(t *testing.T) {
	g := NewWithT(t)
	s, _ := testServer(t, fakeTargets(2*pageSize+1), nil, nil)
	rows := func(body string) int { return strings.Count(body, "<tr><td>") }

	first := get(t, s, "/").Body.String()
	g.Expect(rows(first)).To(Equal(pageSize))
	g.Expect(first).To(ContainSubstring(`<b>1001</b> total`), "the counts cover every page")
	g.Expect(first).To(ContainSubstring(`SyncTargets 1–500 of 1001`))
	g.Expect(first).To(ContainSubstring(`href="?page=2" rel="next"`))
	g.Expect(first).NotTo(ContainSubstring(`rel="prev"`))
	g.Expect(first).To(ContainSubstring(`href="/targets/team-0/app-0000"`))

	last := get(t, s, "/?page=3").Body.String()
	g.Expect(rows(last)).To(Equal(1))
	g.Expect(last).To(ContainSubstring(`href="/targets/team-9/app-0999"`), "sorted by namespace (team-10 before team-2), then name")
	g.Expect(last).To(ContainSubstring(`href="?page=2" rel="prev"`))
	g.Expect(last).NotTo(ContainSubstring(`rel="next"`))
	g.Expect(get(t, s, "/?page=99").Body.String()).To(Equal(last), "past the end is the last page")

	filtered := get(t, s, "/?ns=team-1").Body.String()
	g.Expect(rows(filtered)).To(Equal(100))
	g.Expect(filtered).NotTo(ContainSubstring(`class="pages"`), "one page needs no links")
}

func TestRowFragment(t *testing.T) {
	g := NewWithT(t)
	s, _ := testServer(t, []convergev1.SyncTarget{fakeTarget("shop", "web", false)}, nil, nil)
	rec := get(t, s, "/fragments/row/shop/web")
	g.Expect(rec.Code).To(Equal(http.StatusOK))
	g.Expect(rec.Body.String()).To(HavePrefix(`<tr><td><a href="/targets/shop/web">`))
	g.Expect(get(t, s, "/fragments/row/shop/web?state=Ready").Code).To(Equal(http.StatusNoContent), "filtered out")
	g.Expect(get(t, s, "/fragments/row/shop/gone").Code).To(Equal(http.StatusNoContent), "deleted")
	g.Expect(get(t, s, "/fragments/overview").Body.String()).To(ContainSubstring(`<b>1</b> Failed`))
}

func TestTargetPage(t *testing.T) {
	g := NewWithT(t)
	st := fakeTarget("shop", "web", true)
	st.Status.Inventory = &convergev1.ResourceInventory{Entries: []convergev1.InventoryEntry{{ID: "shop_web-config__ConfigMap", Version: "v1"}}}
	s, c := testServer(t, []convergev1.SyncTarget{st}, []corev1.Event{fakeEvent("shop", "web", "Succeeded", "applied revision abc")}, nil)
	g.Expect(c.Create(context.Background(), &corev1.ConfigMap{ObjectMeta: metaNS("shop", "web-config")})).To(Succeed())
	rec := get(t, s, "/targets/shop/web")
	g.Expect(rec.Code).To(Equal(http.StatusOK))
	body := rec.Body.String()
	g.Expect(body).To(ContainSubstring("https://github.com/acme/web.git"))
	g.Expect(body).To(ContainSubstring("branch main"))
	g.Expect(body).To(ContainSubstring(`<span class="badge rolledback">RolledBack</span>`), "the history")
	g.Expect(body).To(ContainSubstring("+1 ~3 -0"))
	g.Expect(body).To(ContainSubstring("2.0s"))
	g.Expect(body).To(ContainSubstring(`data-action="rollback" data-to="main@sha1:` + sha(1) + `"`))
	g.Expect(body).NotTo(ContainSubstring(`data-to="main@sha1:`+sha(2)+`"`), "no rollback to the applied revision")
	g.Expect(body).To(ContainSubstring(`<span class="tns">shop</span>`), "the tree")
	g.Expect(body).To(ContainSubstring(`<span class="tkind">ConfigMap</span>`))
	g.Expect(body).To(MatchRegexp(`<span class="badge ok">Current</span> <a class="obj" href="/targets/shop/web/objects/[^"]+">web-config</a>`))
	g.Expect(body).To(ContainSubstring("applied revision abc"), "the events")
	g.Expect(body).To(ContainSubstring(`data-src="/targets/shop/web/diff"`))

	live := get(t, s, "/targets/shop/web/live")
	g.Expect(live.Code).To(Equal(http.StatusOK))
	g.Expect(live.Body.String()).To(ContainSubstring(`<span class="tkind">ConfigMap</span>`))
	g.Expect(live.Body.String()).NotTo(ContainSubstring("<html"))

	missing := get(t, s, "/targets/shop/nope")
	g.Expect(missing.Code).To(Equal(http.StatusNotFound))
	g.Expect(missing.Body.String()).To(ContainSubstring("SyncTarget shop/nope not found"))
}

// TestClusterShown: the target page and the overview name the kubeconfig Secret a
// SyncTarget deploys with, and a local one is "in-cluster" on its page and unmarked in the list.
func TestClusterShown(t *testing.T) {
	g := NewWithT(t)
	remote := fakeTarget("shop", "web", true)
	remote.Spec.KubeConfig = &convergev1.KubeConfigReference{SecretRef: convergev1.KubeConfigSecretReference{Name: "prod-eu"}}
	s, _ := testServer(t, []convergev1.SyncTarget{remote, fakeTarget("shop", "db", true)}, nil, nil)

	page := get(t, s, "/targets/shop/web")
	g.Expect(page.Code).To(Equal(http.StatusOK))
	g.Expect(page.Body.String()).To(ContainSubstring(`<dt>Cluster<dd><code class="cluster">prod-eu</code> · kubeconfig Secret`))
	local := get(t, s, "/targets/shop/db")
	g.Expect(local.Code).To(Equal(http.StatusOK))
	g.Expect(local.Body.String()).To(ContainSubstring(`<dt>Cluster<dd><code class="cluster">in-cluster</code>`))

	overview := get(t, s, "/").Body.String()
	g.Expect(overview).To(ContainSubstring(`<small class="cluster">→ cluster <a href="/?cluster=prod-eu">prod-eu</a></small>`))
	g.Expect(strings.Count(overview, `<small class="cluster">`)).To(Equal(1), "only the remote target is marked")
}

func TestSecurityHeadersAndNoInlineCode(t *testing.T) {
	g := NewWithT(t)
	s, _ := testServer(t, []convergev1.SyncTarget{fakeTarget("shop", "web", true, "db")}, nil, nil)
	for _, path := range []string{"/", "/targets/shop/web"} {
		rec := get(t, s, path)
		csp := rec.Header().Get("Content-Security-Policy")
		g.Expect(csp).To(ContainSubstring("default-src 'self'"))
		g.Expect(csp).NotTo(ContainSubstring("unsafe-inline"))
		g.Expect(rec.Header().Get("X-Frame-Options")).To(Equal("DENY"))
		body := rec.Body.String()
		g.Expect(regexp.MustCompile(`<script(?:\s[^>]*)?>`).FindAllString(body, -1)).To(Equal([]string{`<script src="/static/app.js" defer>`}))
		g.Expect(body).NotTo(MatchRegexp(`\sstyle=|<style|\son[a-z]+=`), "no inline style or handler")
		g.Expect(body).NotTo(MatchRegexp(`(src|href)="(https?:)?//[^"]*\.(js|css|woff2?)`), "nothing from elsewhere")
	}
	for _, f := range []string{"/static/app.js", "/static/app.css"} {
		g.Expect(get(t, s, f).Code).To(Equal(http.StatusOK), f)
	}
}

func TestHostAndAccessToken(t *testing.T) {
	g := NewWithT(t)
	s := NewWithStore(Options{AccessToken: "s3cret", AllowedHosts: []string{"127.0.0.1:8080"}}, NewMemoryStore(nil, nil), nil)
	req := httptest.NewRequest(http.MethodGet, "http://evil.example:8080/", nil)
	rec := httptest.NewRecorder()
	s.ServeHTTP(rec, req)
	g.Expect(rec.Code).To(Equal(http.StatusMisdirectedRequest), "DNS rebinding: another host name")

	rec = get(t, s, "http://127.0.0.1:8080/")
	g.Expect(rec.Code).To(Equal(http.StatusUnauthorized))

	rec = get(t, s, "http://127.0.0.1:8080/?token=wrong")
	g.Expect(rec.Code).To(Equal(http.StatusUnauthorized))

	rec = get(t, s, "http://127.0.0.1:8080/?ns=a&token=s3cret")
	g.Expect(rec.Code).To(Equal(http.StatusSeeOther))
	g.Expect(rec.Header().Get("Location")).To(Equal("/?ns=a"), "the token leaves the URL")
	g.Expect(get(t, s, "http://127.0.0.1:8080//evil.example/?token=s3cret").Header().Get("Location")).To(Equal("/"), "never to another host")
	cookie := rec.Result().Cookies()[0]
	g.Expect(cookie.HttpOnly).To(BeTrue())
	g.Expect(cookie.SameSite).To(Equal(http.SameSiteStrictMode))

	req = httptest.NewRequest(http.MethodGet, "http://127.0.0.1:8080/", nil)
	req.AddCookie(cookie)
	rec = httptest.NewRecorder()
	s.ServeHTTP(rec, req)
	g.Expect(rec.Code).To(Equal(http.StatusOK))

	// A browser that came from elsewhere (the page converge ui --open writes is a file)
	// would not send a SameSite=Strict cookie along a redirect: it gets a page of this
	// origin that goes on by itself.
	req = httptest.NewRequest(http.MethodGet, "http://127.0.0.1:8080/?ns=a&token=s3cret", nil)
	req.Header.Set("Sec-Fetch-Site", "cross-site")
	rec = httptest.NewRecorder()
	s.ServeHTTP(rec, req)
	g.Expect(rec.Code).To(Equal(http.StatusOK))
	g.Expect(rec.Result().Cookies()).To(HaveLen(1))
	g.Expect(rec.Body.String()).To(ContainSubstring(`<meta http-equiv="refresh" content="0; url=/?ns=a">`))
	g.Expect(rec.Body.String()).NotTo(ContainSubstring("s3cret"))
	g.Expect(rec.Header().Get("Cache-Control")).To(Equal("no-store"))
}

// post sends an action as the page's script does.
func post(t *testing.T, s http.Handler, path string, form url.Values, header map[string]string) (int, actionResult) {
	t.Helper()
	req := httptest.NewRequest(http.MethodPost, "http://127.0.0.1:8080"+path, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	for k, v := range header {
		req.Header.Set(k, v)
	}
	rec := httptest.NewRecorder()
	s.ServeHTTP(rec, req)
	var res actionResult
	if err := json.Unmarshal(rec.Body.Bytes(), &res); err != nil {
		t.Fatalf("answer %q: %v", rec.Body, err)
	}
	return rec.Code, res
}

var fromPage = map[string]string{ActionHeader: "1", "Origin": "http://127.0.0.1:8080", "Sec-Fetch-Site": "same-origin"}

func TestActions(t *testing.T) {
	key := client.ObjectKey{Namespace: "shop", Name: "web"}
	for _, tc := range []struct {
		action string
		form   url.Values
		want   string
		check  func(g Gomega, st *convergev1.SyncTarget)
	}{
		{action: "reconcile", want: "requested a reconcile of SyncTarget shop/web", check: func(g Gomega, st *convergev1.SyncTarget) {
			g.Expect(st.Annotations).To(HaveKey(convergev1.RequestedAtAnnotation))
		}},
		{action: "suspend", want: "suspended SyncTarget shop/web", check: func(g Gomega, st *convergev1.SyncTarget) {
			g.Expect(st.Spec.Suspend).To(BeTrue())
		}},
		{action: "rollback", form: url.Values{"to": {"main@sha1:" + sha(1)}}, want: "pinned SyncTarget shop/web to commit " + sha(1) + " (resume restores branch main)",
			check: func(g Gomega, st *convergev1.SyncTarget) {
				g.Expect(st.Spec.Source.Ref).To(Equal(convergev1.GitRef{Commit: sha(1)}))
				g.Expect(st.Annotations).To(HaveKeyWithValue(actions.PinnedFromAnnotation, `{"branch":"main"}`))
				g.Expect(st.Annotations).To(HaveKey(convergev1.RequestedAtAnnotation))
			}},
	} {
		t.Run(tc.action, func(t *testing.T) {
			g := NewWithT(t)
			s, c := testServer(t, []convergev1.SyncTarget{fakeTarget("shop", "web", true)}, nil, nil)
			code, res := post(t, s, "/targets/shop/web/"+tc.action, tc.form, fromPage)
			g.Expect(res.Message).To(Equal(tc.want))
			g.Expect(code).To(Equal(http.StatusOK))
			st := &convergev1.SyncTarget{}
			g.Expect(c.Get(context.Background(), key, st)).To(Succeed())
			tc.check(g, st)
		})
	}
}

// TestChartRollbackPinsTheChartRevision: rolling a chart SyncTarget back from the page
// pins its chart to the version of that history entry, and resume puts the range back.
func TestChartRollbackPinsTheChartRevision(t *testing.T) {
	g := NewWithT(t)
	s, c := testServer(t, []convergev1.SyncTarget{fakeChartTarget("shop", "web")}, nil, nil)
	to := "6.5.0@sha256:2" + chartDigest[1:]
	code, res := post(t, s, "/targets/shop/web/rollback", url.Values{"to": {to}}, fromPage)
	g.Expect(code).To(Equal(http.StatusOK), res.Message)
	g.Expect(res.Message).To(Equal("pinned SyncTarget shop/web to chart " + to +
		", keeping today's chart values: the history kept none for it (resume restores version >=6.5 <7)"))
	st := &convergev1.SyncTarget{}
	key := client.ObjectKey{Namespace: "shop", Name: "web"}
	g.Expect(c.Get(context.Background(), key, st)).To(Succeed())
	g.Expect(st.Spec.Chart.Version).To(Equal("6.5.0"))
	g.Expect(st.Annotations).To(HaveKeyWithValue(actions.PinnedChartAnnotation, `{"version":">=6.5 <7"}`))

	code, res = post(t, s, "/targets/shop/web/resume", nil, fromPage)
	g.Expect(code).To(Equal(http.StatusOK), res.Message)
	g.Expect(res.Message).To(Equal("resumed SyncTarget shop/web: following version >=6.5 <7 again"))
	g.Expect(c.Get(context.Background(), key, st)).To(Succeed())
	g.Expect(st.Spec.Chart.Version).To(Equal(">=6.5 <7"))
}

func TestResumeUnpins(t *testing.T) {
	g := NewWithT(t)
	st := fakeTarget("shop", "web", true)
	st.Spec.Suspend = true
	st.Spec.Source.Ref = convergev1.GitRef{Commit: sha(1)}
	st.Annotations = map[string]string{actions.PinnedFromAnnotation: `{"branch":"main"}`}
	s, c := testServer(t, []convergev1.SyncTarget{st}, nil, nil)
	code, res := post(t, s, "/targets/shop/web/resume", nil, fromPage)
	g.Expect(code).To(Equal(http.StatusOK))
	g.Expect(res.Message).To(Equal("resumed SyncTarget shop/web: following branch main again, no longer suspended"))
	got := &convergev1.SyncTarget{}
	g.Expect(c.Get(context.Background(), client.ObjectKey{Namespace: "shop", Name: "web"}, got)).To(Succeed())
	g.Expect(got.Spec.Source.Ref).To(Equal(convergev1.GitRef{Branch: "main"}))
	g.Expect(got.Spec.Suspend).To(BeFalse())
}

func TestActionsRefuseCrossSiteRequests(t *testing.T) {
	for name, header := range map[string]map[string]string{
		"no action header (a plain form post)": {"Origin": "http://127.0.0.1:8080"},
		"another origin":                       {ActionHeader: "1", "Origin": "https://evil.example"},
		"another site":                         {ActionHeader: "1", "Sec-Fetch-Site": "cross-site"},
	} {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			s, c := testServer(t, []convergev1.SyncTarget{fakeTarget("shop", "web", true)}, nil, nil)
			code, _ := post(t, s, "/targets/shop/web/suspend", nil, header)
			g.Expect(code).To(Equal(http.StatusForbidden))
			st := &convergev1.SyncTarget{}
			g.Expect(c.Get(context.Background(), client.ObjectKey{Namespace: "shop", Name: "web"}, st)).To(Succeed())
			g.Expect(st.Spec.Suspend).To(BeFalse(), "nothing done")
		})
	}
}

func TestActionForbiddenSaysWhoMayNotDoWhat(t *testing.T) {
	g := NewWithT(t)
	forbid := &interceptor.Funcs{Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
		return apierrors.NewForbidden(schema.GroupResource{Group: "converge.dev", Resource: "synctargets"}, obj.GetName(),
			errorString(`User "alice" cannot patch resource "synctargets" in API group "converge.dev" in the namespace "shop"`))
	}}
	s, _ := testServer(t, []convergev1.SyncTarget{fakeTarget("shop", "web", true)}, nil, forbid)
	for _, action := range []string{"reconcile", "suspend", "rollback"} {
		code, res := post(t, s, "/targets/shop/web/"+action, url.Values{"to": {"main@sha1:" + sha(1)}}, fromPage)
		g.Expect(code).To(Equal(http.StatusForbidden), action)
		g.Expect(res.OK).To(BeFalse())
		g.Expect(res.Message).To(Equal("you (user alice) may not patch synctargets in namespace shop"), action)
	}
}

func TestActionBadRevision(t *testing.T) {
	g := NewWithT(t)
	s, _ := testServer(t, []convergev1.SyncTarget{fakeTarget("shop", "web", true)}, nil, nil)
	code, res := post(t, s, "/targets/shop/web/rollback", url.Values{"to": {"xyz"}}, fromPage)
	g.Expect(code).To(Equal(http.StatusBadRequest))
	g.Expect(res.Message).To(ContainSubstring(`"xyz" is neither a revision`))
}

type errorString string

func (e errorString) Error() string { return string(e) }

func TestHistoryOffersEachOtherCommitOnce(t *testing.T) {
	g := NewWithT(t)
	st := fakeTarget("shop", "web", true)
	// Pinned by a rollback: the applied revision names the commit without the branch.
	st.Status.LastAppliedRevision = "sha1:" + sha(1)
	st.Status.History = append([]convergev1.HistoryEntry{{Revision: "sha1:" + sha(1), Result: convergev1.SyncSucceeded}}, st.Status.History...)
	var offered []string
	for _, e := range historyOf(&st, fixedNow) {
		if e.Rollback {
			offered = append(offered, e.Revision.Short)
		}
	}
	g.Expect(offered).To(Equal([]string{sha(2)[:7], sha(3)[:7]}))
}

// TestChartTargets: a SyncTarget of a chart repository shows its chart (repository without
// credentials, name, version constraint) and the chart version deployed with a short
// digest, never its values; a chart in Git shows where the chart is.
func TestChartTargets(t *testing.T) {
	g := NewWithT(t)
	inGit := fakeTarget("shop", "api", true)
	inGit.Spec.Path, inGit.Spec.Helm = "charts/api", &convergev1.HelmSpec{}
	s, _ := testServer(t, []convergev1.SyncTarget{fakeChartTarget("shop", "web"), inGit}, nil, nil)

	rec := get(t, s, "/targets/shop/web")
	g.Expect(rec.Code).To(Equal(http.StatusOK))
	body := rec.Body.String()
	g.Expect(body).To(ContainSubstring(`<dt>Chart<dd><code class="chart-name">podinfo</code> from <code class="chart-repo">https://charts.example.com/stable</code> · version <code class="chart-version">&gt;=6.5 &lt;7</code>`))
	g.Expect(body).To(ContainSubstring(`<dt>Deployed chart<dd><code title="6.5.1@sha256:` + chartDigest + `">6.5.1 · sha256:0123456</code>`))
	g.Expect(body).To(ContainSubstring(`<code title="6.5.0@sha256:2`+chartDigest[1:]+`">6.5.0 · sha256:2123456</code>`), "the history")
	g.Expect(body).NotTo(ContainSubstring("<dt>Source"))
	g.Expect(body).To(ContainSubstring(`data-action="rollback" data-to="6.5.0@sha256:2`+chartDigest[1:]+`"`), "a chart revision can be rolled back to")
	g.Expect(body).NotTo(ContainSubstring(`data-action="rollback" data-to="6.5.1@sha256:`+chartDigest+`"`), "not the one deployed")
	g.Expect(body).NotTo(ContainSubstring("chart-pa55"))
	g.Expect(body).NotTo(ContainSubstring("values-s3cret"))
	g.Expect(body).NotTo(ContainSubstring("auth"))

	rec = get(t, s, "/targets/shop/api")
	g.Expect(rec.Code).To(Equal(http.StatusOK))
	g.Expect(rec.Body.String()).To(ContainSubstring(`<code>https://github.com/acme/api.git</code> · branch main · <span class="helm">Helm chart at charts/api</span>`))

	rec = get(t, s, "/")
	g.Expect(rec.Code).To(Equal(http.StatusOK))
	body = rec.Body.String()
	g.Expect(body).To(ContainSubstring(`<small class="src">chart podinfo &gt;=6.5 &lt;7 · https://charts.example.com/stable</small>`))
	g.Expect(body).To(ContainSubstring(`<small class="src">Helm chart at charts/api</small>`))
	g.Expect(body).To(ContainSubstring(`<code>6.5.1 · sha256:0123456</code>`))
	g.Expect(body).NotTo(ContainSubstring("chart-pa55"))

	rec = get(t, s, "/?q=podinfo")
	g.Expect(rec.Body.String()).To(ContainSubstring(`href="/targets/shop/web"`))
	g.Expect(rec.Body.String()).NotTo(ContainSubstring(`href="/targets/shop/api"`))
}
