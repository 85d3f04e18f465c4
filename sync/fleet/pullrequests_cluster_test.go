package fleet

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
)

// fakeGitHub answers the GitHub REST calls of the pullRequests generator for one
// repository, o/app: its open pull requests and its collaborators' permissions. Every
// request must carry the token.
type fakeGitHub struct {
	t       *testing.T
	token   string
	mu      sync.Mutex
	prs     map[int]map[string]any
	writers map[string]bool
	lists   int
	log     []string
}

// requests are the method and path of every request answered.
func (f *fakeGitHub) requests() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.log...)
}

func newFakeGitHub(t *testing.T, token string) (*fakeGitHub, *httptest.Server) {
	f := &fakeGitHub{t: t, token: token, prs: map[int]map[string]any{}, writers: map[string]bool{}}
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	return f, srv
}

func (f *fakeGitHub) open(n int, branch, author string, fork bool, labels ...string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	head := "o/app"
	if fork {
		head = author + "/app"
	}
	var ls []map[string]any
	for _, l := range labels {
		ls = append(ls, map[string]any{"name": l})
	}
	f.prs[n] = map[string]any{
		"number": n, "title": "change " + branch, "html_url": fmt.Sprintf("https://github.example/o/app/pull/%d", n),
		"draft": false, "user": map[string]any{"login": author, "id": 100 + n}, "labels": ls,
		"head":       map[string]any{"ref": branch, "sha": strings.Repeat(fmt.Sprint(n%10), 40), "repo": map[string]any{"full_name": head}},
		"base":       map[string]any{"ref": "main", "repo": map[string]any{"full_name": "o/app"}},
		"updated_at": time.Now().UTC().Format(time.RFC3339),
	}
}

func (f *fakeGitHub) label(n int, l string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.prs[n]["labels"] = []map[string]any{{"name": l}}
}

func (f *fakeGitHub) close(n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.prs, n)
}

func (f *fakeGitHub) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	want := "Bearer " + f.token
	if f.token == "" {
		want = ""
	}
	if got := r.Header.Get("Authorization"); got != want {
		f.t.Errorf("%s %s: Authorization %q", r.Method, r.URL.Path, got)
		http.Error(w, "bad credentials", http.StatusUnauthorized)
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.log = append(f.log, r.Method+" "+r.URL.Path)
	switch {
	case r.Method == http.MethodGet && r.URL.Path == "/repos/o/app/pulls":
		if r.URL.Query().Get("state") != "open" {
			f.t.Errorf("pulls asked with %q", r.URL.RawQuery)
		}
		f.lists++
		var nums []int
		for n := range f.prs {
			nums = append(nums, n)
		}
		sort.Ints(nums)
		out := []map[string]any{}
		if r.URL.Query().Get("page") == "1" || r.URL.Query().Get("page") == "" {
			for _, n := range nums {
				out = append(out, f.prs[n])
			}
		}
		_ = json.NewEncoder(w).Encode(out)
	case r.Method == http.MethodGet && strings.HasPrefix(r.URL.Path, "/repos/o/app/collaborators/") && strings.HasSuffix(r.URL.Path, "/permission"):
		user := strings.TrimSuffix(strings.TrimPrefix(r.URL.Path, "/repos/o/app/collaborators/"), "/permission")
		perm := "read"
		if f.writers[user] {
			perm = "write"
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"permission": perm, "role_name": perm})
	default:
		f.t.Errorf("unexpected request %s %s", r.Method, r.URL)
		http.NotFound(w, r)
	}
}

// A set of previews follows the open pull requests: a maintainer's pull request yields a
// preview at once, a fork's only once labelled, a closed one's preview is deleted; the
// set's status says which pull request waits and why.
func TestPullRequestsYieldPreviewsUntilClosed(t *testing.T) {
	ns := cluster(t)
	g := NewWithT(t)
	ctx := context.Background()
	gh, srv := newFakeGitHub(t, "s3cret")
	gh.writers["maintainer"] = true
	gh.open(1, "feature/login", "maintainer", false)
	gh.open(2, "typo", "visitor", true)
	g.Expect(k8s.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "forge"},
		StringData: map[string]string{"token": "s3cret"}})).To(Succeed())

	set := &convergev1.SyncTargetSet{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "previews"},
		Spec: convergev1.SyncTargetSetSpec{
			Generators: []convergev1.Generator{{PullRequests: &convergev1.PullRequestsGenerator{
				Provider: convergev1.GitHubForge, Address: srv.URL, Repository: "o/app",
				TokenSecretRef: &convergev1.LocalObjectReference{Name: "forge"}, ServiceAccountName: "previews",
				Interval: &metav1.Duration{Duration: time.Hour},
			}}},
			Template: convergev1.SyncTargetTemplate{
				Metadata: convergev1.SyncTargetTemplateMeta{Name: "preview-{{ .number }}",
					Annotations: map[string]string{"converge.dev/pull-request": "{{ .url }}"}},
				Spec: spec(g, map[string]any{
					"source":          map[string]any{"url": "https://github.example/o/app.git", "ref": map[string]any{"name": "{{ .headRef }}"}},
					"targetNamespace": "preview-{{ .number }}-{{ .slug }}", "prune": true, "serviceAccountName": "previews",
				}),
			},
		}}
	createSet(t, set)
	eventually(t, func(g Gomega) {
		got := generated(g, ns, "previews")
		g.Expect(got).To(HaveLen(1))
		st := got["preview-1"]
		g.Expect(st).NotTo(BeNil())
		g.Expect(st.Spec.Source.Ref.Name).To(Equal("refs/pull/1/head"))
		g.Expect(st.Spec.TargetNamespace).To(Equal("preview-1-feature-login"))
		g.Expect(st.Spec.ServiceAccountName).To(Equal("previews"))
		s := getSet(g, ns, "previews")
		g.Expect(s.Status.PullRequests).To(HaveLen(2))
		g.Expect(s.Status.PullRequests[0].SyncTargets).To(Equal([]string{"preview-1"}))
		g.Expect(s.Status.PullRequests[1].Waiting).To(ContainSubstring(`from a fork: waits for a maintainer to add the label "preview-approved"`))
		g.Expect(s.Status.PullRequests[1].URL).To(Equal("https://github.example/o/app/pull/2"))
	})

	key := client.ObjectKey{Namespace: ns, Name: "previews"}
	gh.label(2, "preview-approved")
	forges.WakeSet(key)
	eventually(t, func(g Gomega) {
		g.Expect(generated(g, ns, "previews")).To(HaveKey("preview-2"))
	})

	gh.close(1)
	forges.WakeSet(key)
	eventually(t, func(g Gomega) {
		got := generated(g, ns, "previews")
		g.Expect(got).NotTo(HaveKey("preview-1"), "a closed pull request's preview is deleted")
		g.Expect(got).To(HaveKey("preview-2"))
		g.Expect(getSet(g, ns, "previews").Status.PullRequests).To(HaveLen(1))
	})

	// Without a webhook, the listing holds for the interval: the status changes of the
	// SyncTargets do not ask the forge again.
	gh.mu.Lock()
	before := gh.lists
	gh.mu.Unlock()
	markTarget(t, ns, "preview-2", metav1.ConditionTrue, "Succeeded")
	eventually(t, func(g Gomega) {
		s := getSet(g, ns, "previews")
		g.Expect(s.Status.Targets).To(HaveLen(1))
		g.Expect(s.Status.Targets[0].Ready).To(Equal(metav1.ConditionTrue))
	})
	gh.mu.Lock()
	defer gh.mu.Unlock()
	g.Expect(gh.lists).To(Equal(before))
}

// A set whose template lets previews run as another service account than its pullRequests
// generator names is refused before the forge is asked.
func TestPreviewsAsAnotherServiceAccountAreRefused(t *testing.T) {
	ns := cluster(t)
	g := NewWithT(t)
	gh, srv := newFakeGitHub(t, "s3cret")
	set := &convergev1.SyncTargetSet{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "lifted"},
		Spec: convergev1.SyncTargetSetSpec{
			Generators: []convergev1.Generator{{PullRequests: &convergev1.PullRequestsGenerator{
				Provider: convergev1.GitHubForge, Address: srv.URL, Repository: "o/app", ServiceAccountName: "previews"}}},
			Template: convergev1.SyncTargetTemplate{
				Metadata: convergev1.SyncTargetTemplateMeta{Name: "preview-{{ .number }}"},
				Spec: spec(g, map[string]any{
					"source":             map[string]any{"url": "https://github.example/o/app.git", "ref": map[string]any{"name": "{{ .headRef }}"}},
					"serviceAccountName": "{{ .author }}",
				}),
			},
		}}
	createSet(t, set)
	eventually(t, func(g Gomega) {
		c := setReady(getSet(g, ns, "lifted"))
		g.Expect(c.Reason).To(Equal(convergev1.TemplateInvalidReason))
		g.Expect(c.Message).To(ContainSubstring("must be the same, as written"))
	})
	gh.mu.Lock()
	defer gh.mu.Unlock()
	g.Expect(gh.lists).To(BeZero())
}
