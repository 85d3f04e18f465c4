package forge

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// testToken is the token the fakes expect.
const testToken = "s3cr3t-T0KEN-value"

// exchange is one request a fake forge expects, and its answer.
type exchange struct {
	method string
	path   string     // escaped, as sent
	query  url.Values // nil: none
	body   string     // the JSON body expected; "" for none
	status int        // 0: 200
	answer string     // "@BASE@" is replaced by the fake's URL
}

// fake is a forge on loopback that expects exactly its script of requests, in order,
// each with the forge's headers and the token.
type fake struct {
	t      *testing.T
	kind   Kind
	token  string
	srv    *httptest.Server
	mu     sync.Mutex
	script []exchange
	asked  int
}

func newFake(t *testing.T, kind Kind, token string, script ...exchange) *fake {
	t.Helper()
	f := &fake{t: t, kind: kind, token: token, script: script}
	f.srv = httptest.NewServer(f)
	t.Cleanup(func() {
		f.srv.Close()
		f.mu.Lock()
		defer f.mu.Unlock()
		if f.asked < len(f.script) {
			ex := f.script[f.asked]
			t.Errorf("%d requests not made, the first %s %s", len(f.script)-f.asked, ex.method, ex.path)
		}
	})
	return f
}

// client is a Client of repo on the fake.
func (f *fake) client(repo string) *Client {
	f.t.Helper()
	c, err := New(f.kind, f.srv.URL, repo, f.token, f.srv.Client())
	if err != nil {
		f.t.Fatal(err)
	}
	return c
}

// add appends exchanges to the script.
func (f *fake) add(script ...exchange) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.script = append(f.script, script...)
}

func (f *fake) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.asked >= len(f.script) {
		f.t.Errorf("unexpected request %s %s", r.Method, r.URL)
		http.Error(w, `{"message":"unexpected"}`, http.StatusTeapot)
		return
	}
	ex := f.script[f.asked]
	f.asked++
	what := fmt.Sprintf("request %d (%s %s)", f.asked, r.Method, r.URL)
	if r.Method != ex.method || r.URL.EscapedPath() != ex.path {
		f.t.Errorf("%s: want %s %s", what, ex.method, ex.path)
	}
	want := ex.query
	if want == nil {
		want = url.Values{}
	}
	if got := r.URL.Query(); !reflect.DeepEqual(got, want) {
		f.t.Errorf("%s: query %v, want %v", what, got, want)
	}
	f.checkHeaders(what, r, ex.body != "")
	body, _ := io.ReadAll(r.Body)
	if !sameJSON(string(body), ex.body) {
		f.t.Errorf("%s: body %s, want %s", what, body, ex.body)
	}
	w.Header().Set("Content-Type", "application/json")
	if ex.status != 0 {
		w.WriteHeader(ex.status)
	}
	_, _ = io.WriteString(w, strings.ReplaceAll(ex.answer, "@BASE@", f.srv.URL))
}

// checkHeaders checks the headers every request carries to the fake's kind.
func (f *fake) checkHeaders(what string, r *http.Request, write bool) {
	want := map[string]string{"User-Agent": "converge", "Accept": "application/json",
		"Authorization": "", "Private-Token": "", "Content-Type": ""}
	if f.kind == GitHub {
		want["Accept"] = "application/vnd.github+json"
		want["X-Github-Api-Version"] = "2022-11-28"
	}
	if f.token != "" {
		switch f.kind {
		case GitLab:
			want["Private-Token"] = f.token
		case Gitea:
			want["Authorization"] = "token " + f.token
		default:
			want["Authorization"] = "Bearer " + f.token
		}
	}
	if write {
		want["Content-Type"] = "application/json"
	}
	for k, v := range want {
		if got := r.Header.Values(k); (v == "" && len(got) != 0) || (v != "" && (len(got) != 1 || got[0] != v)) {
			f.t.Errorf("%s: header %s %q, want %q", what, k, got, v)
		}
	}
}

// sameJSON says whether two JSON texts hold the same value; "" is no body.
func sameJSON(a, b string) bool {
	if a == "" || b == "" {
		return a == b
	}
	var va, vb any
	if json.Unmarshal([]byte(a), &va) != nil || json.Unmarshal([]byte(b), &vb) != nil {
		return false
	}
	return reflect.DeepEqual(va, vb)
}

// readTestdata is a file of testdata.
func readTestdata(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile("testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// setVar sets *p to v for the test.
func setVar[T any](t *testing.T, p *T, v T) {
	old := *p
	*p = v
	t.Cleanup(func() { *p = old })
}

// mustJSON is v as JSON.
func mustJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return string(b)
}

// fixture is how one forge is asked and answers, for the tests shared by the forges.
type fixture struct {
	kind Kind
	repo string
	// pulls: the listing's path, the query of its page N, items per page, one valid
	// pull request numbered n, and a page of items (with a "next" link to page+1 unless
	// last, for Bitbucket).
	pullsPath  string
	pullsQuery func(page int) url.Values
	pageSize   int
	pull       func(n int) map[string]any
	// comments
	selfPath      string
	selfAnswer    string
	me, other     string
	comment       func(id int, author, body string) map[string]any
	commentsPath  string // of pull request 7
	commentsQuery func(page int) url.Values
	commentsSize  int
	writeBody     func(body string) string
	editMethod    string
	editPath      func(id int) string // of a comment of pull request 7
}

// page is the answer of page p of a listing of path with items.
func (fx fixture) page(path string, query func(int) url.Values, p int, items []map[string]any, last bool) string {
	if fx.kind != Bitbucket {
		if items == nil {
			items = []map[string]any{}
		}
		return mustJSON(items)
	}
	page := map[string]any{"pagelen": len(items), "page": p, "values": items}
	if items == nil {
		page["values"] = []any{}
	}
	if !last {
		page["next"] = "@BASE@" + path + "?" + query(p+1).Encode()
	}
	return mustJSON(page)
}

// pullsPage is the exchange of page p of the pull requests, with items.
func (fx fixture) pullsPage(p int, items []map[string]any, last bool) exchange {
	return exchange{method: http.MethodGet, path: fx.pullsPath, query: fx.pullsQuery(p),
		answer: fx.page(fx.pullsPath, fx.pullsQuery, p, items, last)}
}

// commentsPage is the exchange of page p of the comments of pull request 7.
func (fx fixture) commentsPage(p int, items []map[string]any, last bool) exchange {
	return exchange{method: http.MethodGet, path: fx.commentsPath, query: fx.commentsQuery(p),
		answer: fx.page(fx.commentsPath, fx.commentsQuery, p, items, last)}
}

// self is the exchange asking the token's own user.
func (fx fixture) self() exchange {
	return exchange{method: http.MethodGet, path: fx.selfPath, answer: fx.selfAnswer}
}

// pulls is n pull requests numbered from first.
func (fx fixture) pulls(first, n int) []map[string]any {
	var out []map[string]any
	for i := range n {
		out = append(out, fx.pull(first+i))
	}
	return out
}

// sha is a commit's hash made of n.
func sha(n int) string {
	return fmt.Sprintf("%040x", n)
}

// pageQuery is base with page=p, when p > 1 (Bitbucket's first page has none).
func pageQuery(base url.Values, p int, always bool) url.Values {
	q := url.Values{}
	for k, v := range base {
		q[k] = v
	}
	if always || p > 1 {
		q.Set("page", strconv.Itoa(p))
	}
	return q
}

var fixtures = []fixture{
	{
		kind: GitHub, repo: "octo/shop",
		pullsPath: "/repos/octo/shop/pulls",
		pullsQuery: func(p int) url.Values {
			return pageQuery(url.Values{"state": {"open"}, "per_page": {"100"}}, p, true)
		},
		pageSize: 100,
		pull: func(n int) map[string]any {
			return map[string]any{"number": n, "title": fmt.Sprint("change ", n), "user": map[string]any{"login": "alice", "id": 1001},
				"head": map[string]any{"ref": fmt.Sprint("b", n), "sha": sha(n), "repo": map[string]any{"full_name": "octo/shop"}},
				"base": map[string]any{"ref": "main", "repo": map[string]any{"full_name": "octo/shop"}}}
		},
		selfPath:   "/user",
		selfAnswer: `{"login": "converge-bot", "id": 4242, "node_id": "MDM6Qm90NDI0Mg==", "type": "Bot", "site_admin": false}`,
		me:         "converge-bot", other: "mallory",
		comment: func(id int, author, body string) map[string]any {
			return map[string]any{"id": id, "node_id": "IC_kwDO", "html_url": fmt.Sprintf("https://github.com/octo/shop/pull/7#issuecomment-%d", id),
				"body": body, "user": map[string]any{"login": author, "id": 1, "type": "User"},
				"created_at": "2024-05-01T10:00:00Z", "updated_at": "2024-05-01T10:00:00Z", "author_association": "MEMBER"}
		},
		commentsPath: "/repos/octo/shop/issues/7/comments",
		commentsQuery: func(p int) url.Values {
			return pageQuery(url.Values{"per_page": {"100"}}, p, true)
		},
		commentsSize: 100,
		writeBody:    func(body string) string { return mustJSON(map[string]string{"body": body}) },
		editMethod:   http.MethodPatch,
		editPath:     func(id int) string { return fmt.Sprintf("/repos/octo/shop/issues/comments/%d", id) },
	},
	{
		kind: Gitea, repo: "octo/shop",
		pullsPath: "/api/v1/repos/octo/shop/pulls",
		pullsQuery: func(p int) url.Values {
			return pageQuery(url.Values{"state": {"open"}, "limit": {"50"}}, p, true)
		},
		pageSize: 50,
		pull: func(n int) map[string]any {
			return map[string]any{"number": n, "title": fmt.Sprint("change ", n), "user": map[string]any{"login": "alice", "id": 7},
				"head": map[string]any{"ref": fmt.Sprint("b", n), "sha": sha(n), "repo": map[string]any{"full_name": "octo/shop"}},
				"base": map[string]any{"ref": "main", "repo": map[string]any{"full_name": "octo/shop"}}}
		},
		selfPath:   "/api/v1/user",
		selfAnswer: `{"id": 4242, "login": "converge-bot", "login_name": "", "full_name": "converge", "email": "bot@noreply.gitea.example", "is_admin": false}`,
		me:         "converge-bot", other: "mallory",
		comment: func(id int, author, body string) map[string]any {
			return map[string]any{"id": id, "html_url": fmt.Sprintf("https://gitea.example/octo/shop/pulls/7#issuecomment-%d", id),
				"pull_request_url": "https://gitea.example/octo/shop/pulls/7", "issue_url": "",
				"user": map[string]any{"id": 1, "login": author, "username": author}, "body": body,
				"created_at": "2024-05-01T10:00:00Z", "updated_at": "2024-05-01T10:00:00Z"}
		},
		commentsPath: "/api/v1/repos/octo/shop/issues/7/comments",
		commentsQuery: func(p int) url.Values {
			return pageQuery(url.Values{"limit": {"50"}}, p, true)
		},
		commentsSize: 50,
		writeBody:    func(body string) string { return mustJSON(map[string]string{"body": body}) },
		editMethod:   http.MethodPatch,
		editPath:     func(id int) string { return fmt.Sprintf("/api/v1/repos/octo/shop/issues/comments/%d", id) },
	},
	{
		kind: GitLab, repo: "group/sub/shop",
		pullsPath: "/api/v4/projects/group%2Fsub%2Fshop/merge_requests",
		pullsQuery: func(p int) url.Values {
			return pageQuery(url.Values{"state": {"opened"}, "per_page": {"100"}}, p, true)
		},
		pageSize: 100,
		pull: func(n int) map[string]any {
			return map[string]any{"iid": n, "title": fmt.Sprint("change ", n), "author": map[string]any{"username": "alice", "id": 11},
				"source_branch": fmt.Sprint("b", n), "sha": sha(n), "target_branch": "main",
				"source_project_id": 42, "target_project_id": 42, "labels": []string{}}
		},
		selfPath:   "/api/v4/user",
		selfAnswer: `{"id": 4242, "username": "project_42_bot", "name": "converge", "state": "active", "bot": true}`,
		me:         "4242", other: "666",
		comment: func(id int, author, body string) map[string]any {
			aid, _ := strconv.Atoi(author)
			return map[string]any{"id": id, "type": nil, "body": body, "attachment": nil,
				"author":     map[string]any{"id": aid, "username": "user" + author, "name": "User " + author},
				"created_at": "2024-05-01T10:00:00.000Z", "updated_at": "2024-05-01T10:00:00.000Z",
				"system": false, "noteable_id": 90007, "noteable_type": "MergeRequest", "noteable_iid": 7} //nolint:misspell // GitLab's own field names
		},
		commentsPath: "/api/v4/projects/group%2Fsub%2Fshop/merge_requests/7/notes",
		commentsQuery: func(p int) url.Values {
			return pageQuery(url.Values{"per_page": {"100"}}, p, true)
		},
		commentsSize: 100,
		writeBody:    func(body string) string { return mustJSON(map[string]string{"body": body}) },
		editMethod:   http.MethodPut,
		editPath: func(id int) string {
			return fmt.Sprintf("/api/v4/projects/group%%2Fsub%%2Fshop/merge_requests/7/notes/%d", id)
		},
	},
	{
		kind: Bitbucket, repo: "ws/shop",
		pullsPath: "/2.0/repositories/ws/shop/pullrequests",
		pullsQuery: func(p int) url.Values {
			return pageQuery(url.Values{"state": {"OPEN"}, "pagelen": {"50"}}, p, false)
		},
		pageSize: 50,
		pull: func(n int) map[string]any {
			return map[string]any{"id": n, "title": fmt.Sprint("change ", n),
				"author":      map[string]any{"nickname": "alice", "uuid": "{a1}"},
				"source":      map[string]any{"branch": map[string]any{"name": fmt.Sprint("b", n)}, "commit": map[string]any{"hash": sha(n)[28:]}, "repository": map[string]any{"full_name": "ws/shop"}},
				"destination": map[string]any{"branch": map[string]any{"name": "main"}, "repository": map[string]any{"full_name": "ws/shop"}}}
		},
		selfPath:   "/2.0/user",
		selfAnswer: `{"type": "user", "display_name": "converge", "uuid": "{d3adb33f-0000-4000-8000-000000000001}", "account_id": "712020:abc", "nickname": "converge"}`,
		me:         "{d3adb33f-0000-4000-8000-000000000001}", other: "{0bad0bad-0000-4000-8000-000000000066}",
		comment: func(id int, author, body string) map[string]any {
			return map[string]any{"id": id, "type": "pullrequest_comment", "deleted": false, "pending": false,
				"content": map[string]any{"type": "rendered", "raw": body, "markup": "markdown", "html": "<p>…</p>"},
				"user":    map[string]any{"type": "user", "uuid": author, "display_name": "someone"},
				"links":   map[string]any{"html": map[string]any{"href": fmt.Sprintf("https://bitbucket.org/ws/shop/pull-requests/7#comment-%d", id)}}}
		},
		commentsPath: "/2.0/repositories/ws/shop/pullrequests/7/comments",
		commentsQuery: func(p int) url.Values {
			return pageQuery(url.Values{"pagelen": {"100"}}, p, false)
		},
		commentsSize: 100,
		writeBody:    func(body string) string { return mustJSON(map[string]any{"content": map[string]string{"raw": body}}) },
		editMethod:   http.MethodPut,
		editPath:     func(id int) string { return fmt.Sprintf("/2.0/repositories/ws/shop/pullrequests/7/comments/%d", id) },
	},
}

// fixtureOf is the fixture of kind.
func fixtureOf(kind Kind) fixture {
	for _, fx := range fixtures {
		if fx.kind == kind {
			return fx
		}
	}
	panic("no fixture of " + kind)
}
