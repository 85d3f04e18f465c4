package fleet

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/validation"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
	"github.com/converge-gitops/converge/internal/forgetest"
	"github.com/converge-gitops/converge/sources/forge"
)

// listedPRs is a PullRequests that answers a fixed listing.
type listedPRs struct {
	l     PullRequestListing
	asked int
}

func (f *listedPRs) List(context.Context, client.ObjectKey, *convergev1.PullRequestsGenerator) (PullRequestListing, error) {
	f.asked++
	return f.l, nil
}

func pr(n int, branch string, updated time.Time, mod func(*forge.PullRequest)) forge.PullRequest {
	p := forge.PullRequest{Number: n, HeadBranch: branch, BaseBranch: "main", Author: "maintainer",
		HeadSHA: strings.Repeat("ab", 20), HeadRef: "refs/pull/" + itoa(n) + "/head",
		URL: "https://forge.example/o/r/pull/" + itoa(n), UpdatedAt: updated}
	if mod != nil {
		mod(&p)
	}
	return p
}

func itoa(n int) string { return strconv.Itoa(n) }

func TestPullRequestsYieldTrustedRecentPreviews(t *testing.T) {
	g := NewWithT(t)
	now := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	ago := func(d time.Duration) time.Time { return now.Add(-d) }
	cap2 := int32(2)
	gen := &convergev1.PullRequestsGenerator{Provider: convergev1.GitHubForge, Repository: "o/r",
		TargetBranches: []string{"main"}, MaxPreviews: &cap2, TTL: &metav1.Duration{Duration: 72 * time.Hour},
		ServiceAccountName: "previews"}
	lister := &listedPRs{l: PullRequestListing{Every: time.Minute, Writers: map[string]bool{"maintainer": true, "visitor": false},
		PRs: []forge.PullRequest{
			pr(1, "feature/one", ago(time.Hour), nil),
			pr(2, "from-fork", ago(time.Minute), func(p *forge.PullRequest) { p.Fork = true; p.Author = "visitor" }),
			pr(3, "fork-approved", ago(2*time.Minute), func(p *forge.PullRequest) {
				p.Fork = true
				p.Author = "visitor"
				p.Labels = []string{"preview-approved", "area/ui"}
			}),
			pr(4, "draft", ago(time.Minute), func(p *forge.PullRequest) { p.Draft = true }),
			pr(5, "no-write", ago(time.Minute), func(p *forge.PullRequest) { p.Author = "visitor" }),
			pr(6, "into-release", ago(time.Minute), func(p *forge.PullRequest) { p.BaseBranch = "release" }),
			pr(7, "stale", ago(100*time.Hour), nil),
			pr(8, "recent", ago(30*time.Second), nil),
		}}}
	got, err := Generate(context.Background(), Env{Namespace: "shop", Set: "previews", PullRequests: lister,
		Now: func() time.Time { return now }}, []convergev1.Generator{{PullRequests: gen}})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(got.Recheck).To(Equal(time.Minute))

	var numbers []string
	for _, p := range got.Params {
		numbers = append(numbers, p["number"])
	}
	// Trusted and current: 1, 3 (fork, approved) and 8; the cap keeps the two most
	// recently updated, 8 and 3.
	g.Expect(numbers).To(Equal([]string{"3", "8"}))

	waiting := map[int64]string{}
	for _, s := range got.PullRequests {
		waiting[s.Number] = s.Waiting
	}
	g.Expect(waiting).NotTo(HaveKey(int64(6)), "a pull request into another branch is not the generator's")
	g.Expect(waiting[1]).To(ContainSubstring("2 previews at most"))
	g.Expect(waiting[2]).To(ContainSubstring(`from a fork: waits for a maintainer to add the label "preview-approved"`))
	g.Expect(waiting[3]).To(BeEmpty())
	g.Expect(waiting[4]).To(ContainSubstring("draft"))
	g.Expect(waiting[5]).To(ContainSubstring("no write access"))
	g.Expect(waiting[7]).To(ContainSubstring("ttl"))
	g.Expect(waiting[8]).To(BeEmpty())
}

func TestBitbucketDeploysOnlyItsOwnBranches(t *testing.T) {
	g := NewWithT(t)
	gen := &convergev1.PullRequestsGenerator{Provider: convergev1.BitbucketForge, Repository: "ws/r", ServiceAccountName: "p"}
	now := time.Now()
	lister := &listedPRs{l: PullRequestListing{PRs: []forge.PullRequest{
		pr(1, "own", now, func(p *forge.PullRequest) { p.Author = "anyone" }),
		pr(2, "fork", now, func(p *forge.PullRequest) { p.Fork = true }),
	}}}
	got, err := Generate(context.Background(), Env{PullRequests: lister}, []convergev1.Generator{{PullRequests: gen}})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(got.Params).To(HaveLen(1))
	g.Expect(got.Params[0]["number"]).To(Equal("1"))
	g.Expect(got.PullRequests[1].Waiting).To(ContainSubstring("Bitbucket pull requests from forks are not deployed"))
}

func TestPullRequestParametersAreData(t *testing.T) {
	g := NewWithT(t)
	hostile := `{{ .token }}"; $(rm -rf /) ` + "`id`\n" + `{{ template "x" }}`
	p := pullRequestParams(pr(42, hostile, time.Now(), func(p *forge.PullRequest) {
		p.Author = "{{ printf \"%s\" .url }}"
		p.Labels = []string{"z", "a,b"}
	}))
	g.Expect(p["number"]).To(Equal("42"))
	g.Expect(p["shortSHA"]).To(Equal("abababab"))
	g.Expect(p["labels"]).To(Equal("a,b,z"))
	g.Expect(validation.IsDNS1123Label(p["slug"])).To(BeEmpty(), p["slug"])

	set := &convergev1.SyncTargetSet{ObjectMeta: metav1.ObjectMeta{Name: "previews", Namespace: "shop"}}
	set.Spec.Template.Metadata.Name = "preview-{{ .number }}"
	set.Spec.Template.Metadata.Annotations = map[string]string{"branch": "{{ .branch }}", "author": "{{ .author }}"}
	spec, _ := json.Marshal(map[string]any{"targetNamespace": "preview-{{ .number }}-{{ .slug }}",
		"source": map[string]any{"url": "https://forge.example/o/r.git", "ref": map[string]any{"name": "{{ .headRef }}"}}})
	set.Spec.Template.Spec = apiextensionsv1.JSON{Raw: spec}
	out, err := Render(context.Background(), set, []Params{p}, Limits{})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(out).To(HaveLen(1))
	g.Expect(out[0].Name).To(Equal("preview-42"))
	g.Expect(out[0].Annotations["branch"]).To(Equal(hostile), "the branch is written as it is, never run")
	g.Expect(out[0].Annotations["author"]).To(Equal(`{{ printf "%s" .url }}`))
	g.Expect(out[0].Spec["targetNamespace"]).To(Equal("preview-42-" + p["slug"]))
	g.Expect(out[0].Validate("shop")).To(Succeed())
}

func TestSlug(t *testing.T) {
	g := NewWithT(t)
	for in, want := range map[string]string{
		"feature/Login-Page":           "feature-login-page",
		"--x__y--":                     "x-y",
		"日本":                           "pr",
		"":                             "pr",
		strings.Repeat("a", 60) + "-b": strings.Repeat("a", 40),
		strings.Repeat("a", 39) + "/b": strings.Repeat("a", 39),
	} {
		g.Expect(slug(in)).To(Equal(want), in)
	}
}

func TestPreviewsRunAsTheGeneratorsServiceAccount(t *testing.T) {
	g := NewWithT(t)
	mk := func(spec string, nested bool) *convergev1.SyncTargetSet {
		prg := &convergev1.PullRequestsGenerator{Provider: convergev1.GitHubForge, Repository: "o/r", ServiceAccountName: "previews"}
		set := &convergev1.SyncTargetSet{}
		if nested {
			set.Spec.Generators = []convergev1.Generator{{Matrix: &convergev1.MatrixGenerator{Generators: []convergev1.BaseGenerator{
				{List: list(map[string]string{"a": "b"})}, {PullRequests: prg}}}}}
		} else {
			set.Spec.Generators = []convergev1.Generator{{PullRequests: prg}}
		}
		set.Spec.Template.Spec = apiextensionsv1.JSON{Raw: []byte(spec)}
		return set
	}
	g.Expect(checkPreviewIdentity(mk(`{"serviceAccountName":"previews"}`, false))).To(Succeed())
	g.Expect(checkPreviewIdentity(mk(`{}`, false))).To(MatchError(ContainSubstring("must say so")))
	g.Expect(checkPreviewIdentity(mk(`{"serviceAccountName":"admin"}`, true))).To(MatchError(ContainSubstring(`is "admin"`)))
	g.Expect(checkPreviewIdentity(mk(`{"serviceAccountName":"{{ .author }}"}`, false))).To(MatchError(ContainSubstring("as written")))
	set := mk(`{}`, false)
	set.Spec.Generators = []convergev1.Generator{{List: list(map[string]string{"a": "b"})}}
	g.Expect(checkPreviewIdentity(set)).To(Succeed(), "only pullRequests generators bind the service account")
}

// The lister refuses a forge at a loopback address unless allowed, without sending the
// token anywhere.
func TestForgeListerRefusesLocalForges(t *testing.T) {
	g := NewWithT(t)
	gh := forgetest.NewGitHub(t, "o/app", "s3cret")
	gen := &convergev1.PullRequestsGenerator{Provider: convergev1.GitHubForge, Address: gh.URL, Repository: "o/app",
		ServiceAccountName: "p"}
	l := &ForgeLister{}
	_, err := l.List(context.Background(), client.ObjectKey{Namespace: "shop", Name: "previews"}, gen)
	g.Expect(err).To(MatchError(ContainSubstring("refusing to connect to 127.0.0.1")))
	g.Expect(err.Error()).To(ContainSubstring("--allow-loopback-clusters"))
	g.Expect(gh.Requests()).To(BeEmpty())
}

// The lister keeps an answer for the interval and asks again after it, or at once when a
// webhook wakes the set; a permission is asked once per author.
func TestForgeListerKeepsItsAnswer(t *testing.T) {
	g := NewWithT(t)
	gh := forgetest.NewGitHub(t, "o/app", "")
	gh.Writer("maintainer")
	gh.Open(1, "a", strings.Repeat("1", 40), "maintainer", false)
	gh.Open(2, "b", strings.Repeat("2", 40), "maintainer", false)
	clk := clocktesting.NewFakeClock(time.Now())
	wake := make(chan event.GenericEvent, 1)
	l := &ForgeLister{AllowLoopback: true, Clock: clk, Wake: wake}
	set := client.ObjectKey{Namespace: "shop", Name: "previews"}
	gen := &convergev1.PullRequestsGenerator{Provider: convergev1.GitHubForge, Address: gh.URL, Repository: "o/app",
		ServiceAccountName: "p", Interval: &metav1.Duration{Duration: time.Minute},
		WebhookSecretRef: &convergev1.LocalObjectReference{Name: "hook"}}
	ctx := context.Background()
	got, err := l.List(ctx, set, gen)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(got.PRs).To(HaveLen(2))
	g.Expect(got.Writers).To(Equal(map[string]bool{"maintainer": true}))
	g.Expect(gh.Requests()).To(Equal([]string{"GET /repos/o/app/pulls", "GET /repos/o/app/collaborators/maintainer/permission"}))

	clk.Step(30 * time.Second)
	got, err = l.List(ctx, set, gen)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(got.Every).To(Equal(30 * time.Second))
	g.Expect(gh.Requests()).To(HaveLen(2), "within the interval the forge is not asked")

	g.Expect(l.HooksForRepo("127.0.0.1/o/app")).To(Equal([]PullRequestHook{{Set: set, Secret: client.ObjectKey{Namespace: "shop", Name: "hook"}}}))
	l.WakeSet(set)
	g.Expect(wake).To(HaveLen(1))
	_, err = l.List(ctx, set, gen)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(gh.Requests()).To(Equal([]string{"GET /repos/o/app/pulls", "GET /repos/o/app/collaborators/maintainer/permission",
		"GET /repos/o/app/pulls"}), "woken, the set lists again; the permission is kept")

	l.Forget(set)
	g.Expect(l.HooksForRepo("127.0.0.1/o/app")).To(BeEmpty())
}

// A preview's state in its comment: deploying until Ready at the head, then what the
// sync changed; a failure or a rollback with its reason, which cannot break out of the
// comment's Markdown.
func TestPreviewState(t *testing.T) {
	g := NewWithT(t)
	head := strings.Repeat("c", 40)
	old := "refs/pull/7/head@sha1:" + strings.Repeat("a", 40)
	at := "refs/pull/7/head@sha1:" + head
	st := func(rev string, ready metav1.ConditionStatus, reason, msg string, h ...convergev1.HistoryEntry) *convergev1.SyncTarget {
		s := &convergev1.SyncTarget{ObjectMeta: metav1.ObjectMeta{Generation: 2}}
		s.Status.LastAppliedRevision = rev
		s.Status.History = h
		s.Status.Conditions = []metav1.Condition{{Type: convergev1.ReadyCondition, Status: ready, Reason: reason, Message: msg, ObservedGeneration: 2}}
		return s
	}
	g.Expect(previewState(nil, head)).To(Equal("🔄 **Deploying** `ccccccc`…"))
	g.Expect(previewState(st(old, metav1.ConditionTrue, "Succeeded", ""), head)).To(Equal("🔄 **Deploying** `ccccccc`…"),
		"Ready at another revision is not the head deployed")
	g.Expect(previewState(st(at, metav1.ConditionTrue, "Succeeded", "",
		convergev1.HistoryEntry{Revision: at, Result: convergev1.SyncSucceeded, Created: 3, Configured: 1}), head)).
		To(Equal("✅ **Ready** at `ccccccc`: 3 created, 1 configured, 0 deleted"))
	g.Expect(previewState(st(old, metav1.ConditionFalse, convergev1.ProgressingReason, "applying"), head)).To(HavePrefix("🔄"))
	g.Expect(previewState(st(old, metav1.ConditionFalse, "Failed", "kustomize: `<script>` \n```\nboom"), head)).
		To(Equal("❌ **Failed** at `ccccccc`: kustomize: '&lt;script&gt;' ''' boom"))
	g.Expect(previewState(st(old, metav1.ConditionFalse, "RolledBack", "",
		convergev1.HistoryEntry{Revision: at, Result: convergev1.SyncRolledBack, Message: "Deployment web did not become ready"}), head)).
		To(Equal("↩️ **Rolled back**: `ccccccc` failed (Deployment web did not become ready); the preview runs `refs/pull/7/head@sha1:aaaaaaa` again"))
}

func TestHostURLs(t *testing.T) {
	g := NewWithT(t)
	ing := &unstructured.Unstructured{Object: map[string]any{"kind": "Ingress", "spec": map[string]any{
		"tls":   []any{map[string]any{"hosts": []any{"pr-7.example.com"}}},
		"rules": []any{map[string]any{"host": "pr-7.example.com"}, map[string]any{"host": "plain.example.com"}, map[string]any{"host": "*.wild.example.com"}},
	}}}
	g.Expect(hostURLs(ing)).To(Equal([]string{"https://pr-7.example.com", "http://plain.example.com"}))
	route := &unstructured.Unstructured{Object: map[string]any{"kind": "HTTPRoute", "spec": map[string]any{
		"hostnames": []any{"pr-7.gw.example.com", "evil\"><script>"}}}}
	g.Expect(hostURLs(route)).To(Equal([]string{"https://pr-7.gw.example.com"}))
}
