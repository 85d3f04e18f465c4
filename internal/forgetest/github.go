// Package forgetest is a forge on loopback for tests: GitHub's REST calls of converge's
// pullRequests generator and its comments, for one repository, asserting the token.
package forgetest

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"
)

// BotLogin is the login of the token's own user.
const BotLogin = "converge-bot"

// Comment is a comment of a pull request.
type Comment struct {
	ID   int
	User string
	Body string
}

// GitHub answers, for one repository ("owner/repo"), the calls converge makes: open pull
// requests, a collaborator's permission, the token's user, and issue comments (list,
// create, edit). Every request must carry the token ("Bearer <token>", none when it is
// empty), or the test fails.
type GitHub struct {
	// URL is the API base.
	URL string

	t     testing.TB
	repo  string
	token string

	mu       sync.Mutex
	prs      map[int]map[string]any
	writers  map[string]bool
	comments map[int][]Comment
	ids      int
	lists    int
	log      []string
}

// NewGitHub starts the forge on loopback for the test's lifetime.
func NewGitHub(t testing.TB, repo, token string) *GitHub {
	f := &GitHub{t: t, repo: repo, token: token, prs: map[int]map[string]any{}, writers: map[string]bool{},
		comments: map[int][]Comment{}}
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	f.URL = srv.URL
	return f
}

// Writer gives user write access to the repository.
func (f *GitHub) Writer(user string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.writers[user] = true
}

// Open opens (or updates) pull request n from branch at sha by author, from a fork of
// the repository when fork.
func (f *GitHub) Open(n int, branch, sha, author string, fork bool, labels ...string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	head := f.repo
	if fork {
		head = author + "/fork"
	}
	ls := []map[string]any{}
	for _, l := range labels {
		ls = append(ls, map[string]any{"name": l})
	}
	f.prs[n] = map[string]any{
		"number": n, "title": "change " + branch, "html_url": fmt.Sprintf("https://github.example/%s/pull/%d", f.repo, n),
		"draft": false, "user": map[string]any{"login": author, "id": 100 + n}, "labels": ls,
		"head":       map[string]any{"ref": branch, "sha": sha, "repo": map[string]any{"full_name": head}},
		"base":       map[string]any{"ref": "main", "repo": map[string]any{"full_name": f.repo}},
		"updated_at": time.Now().UTC().Format(time.RFC3339),
	}
}

// Label sets the labels of pull request n.
func (f *GitHub) Label(n int, labels ...string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	ls := []map[string]any{}
	for _, l := range labels {
		ls = append(ls, map[string]any{"name": l})
	}
	f.prs[n]["labels"] = ls
}

// Close closes pull request n.
func (f *GitHub) Close(n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.prs, n)
}

// Comments are the comments of pull request n, oldest first.
func (f *GitHub) Comments(n int) []Comment {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]Comment(nil), f.comments[n]...)
}

// AddComment adds a comment by user on pull request n.
func (f *GitHub) AddComment(n int, user, body string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.ids++
	f.comments[n] = append(f.comments[n], Comment{ID: f.ids, User: user, Body: body})
}

// Lists counts the listings of the open pull requests.
func (f *GitHub) Lists() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.lists
}

// Requests are the method and path of every request answered.
func (f *GitHub) Requests() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.log...)
}

func (f *GitHub) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	want := ""
	if f.token != "" {
		want = "Bearer " + f.token
	}
	if got := r.Header.Get("Authorization"); got != want {
		f.t.Errorf("%s %s: Authorization %q", r.Method, r.URL.Path, got)
		http.Error(w, `{"message":"Bad credentials"}`, http.StatusUnauthorized)
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.log = append(f.log, r.Method+" "+r.URL.Path)
	if !f.servePulls(w, r) && !f.serveComments(w, r) {
		f.t.Errorf("unexpected request %s %s", r.Method, r.URL)
		http.NotFound(w, r)
	}
}

// servePulls answers the listing of open pull requests (all on page 1) and the
// collaborators' permissions.
func (f *GitHub) servePulls(w http.ResponseWriter, r *http.Request) bool {
	prefix := "/repos/" + f.repo
	switch {
	case r.Method == http.MethodGet && r.URL.Path == prefix+"/pulls":
		if r.URL.Query().Get("state") != "open" {
			f.t.Errorf("pulls asked with %q", r.URL.RawQuery)
		}
		f.lists++
		nums := make([]int, 0, len(f.prs))
		for n := range f.prs {
			nums = append(nums, n)
		}
		sort.Ints(nums)
		out := []map[string]any{}
		if p := r.URL.Query().Get("page"); p == "" || p == "1" {
			for _, n := range nums {
				out = append(out, f.prs[n])
			}
		}
		_ = json.NewEncoder(w).Encode(out)
	case r.Method == http.MethodGet && strings.HasPrefix(r.URL.Path, prefix+"/collaborators/") && strings.HasSuffix(r.URL.Path, "/permission"):
		user := strings.TrimSuffix(strings.TrimPrefix(r.URL.Path, prefix+"/collaborators/"), "/permission")
		perm := "read"
		if f.writers[user] {
			perm = "write"
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"permission": perm, "role_name": perm})
	default:
		return false
	}
	return true
}

// serveComments answers the token's user and the issue comment calls.
func (f *GitHub) serveComments(w http.ResponseWriter, r *http.Request) bool {
	var n, id int
	prefix := "/repos/" + f.repo
	switch {
	case r.Method == http.MethodGet && r.URL.Path == "/user":
		_ = json.NewEncoder(w).Encode(map[string]any{"login": BotLogin, "id": 1})
	case r.Method == http.MethodGet && scan(r.URL.Path, prefix+"/issues/%d/comments", &n):
		out := []map[string]any{}
		if p := r.URL.Query().Get("page"); p == "" || p == "1" {
			for _, c := range f.comments[n] {
				out = append(out, map[string]any{"id": c.ID, "body": c.Body, "user": map[string]any{"login": c.User}})
			}
		}
		_ = json.NewEncoder(w).Encode(out)
	case r.Method == http.MethodPost && scan(r.URL.Path, prefix+"/issues/%d/comments", &n):
		var in struct{ Body string }
		_ = json.NewDecoder(r.Body).Decode(&in)
		f.ids++
		f.comments[n] = append(f.comments[n], Comment{ID: f.ids, User: BotLogin, Body: in.Body})
		w.WriteHeader(http.StatusCreated)
		_ = json.NewEncoder(w).Encode(map[string]any{"id": f.ids, "body": in.Body})
	case r.Method == http.MethodPatch && scan(r.URL.Path, prefix+"/issues/comments/%d", &id):
		var in struct{ Body string }
		_ = json.NewDecoder(r.Body).Decode(&in)
		for pr, cs := range f.comments {
			for i := range cs {
				if cs[i].ID == id {
					f.comments[pr][i].Body = in.Body
				}
			}
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"id": id, "body": in.Body})
	default:
		return false
	}
	return true
}

// scan reads path as format, with nothing left over.
func scan(path, format string, n *int) bool {
	var rest string
	got, _ := fmt.Sscanf(path+" end", format+" %s", n, &rest)
	return got == 2 && rest == "end"
}
