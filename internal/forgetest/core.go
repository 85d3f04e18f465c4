// Package forgetest is a forge on loopback for tests: the REST calls of converge's
// pullRequests generator, its comments and commit statuses, for one repository, asserting
// the token, in the words of GitHub (NewGitHub), GitLab (NewGitLab) or Gitea (NewGitea).
package forgetest

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"
)

// BotLogin is the login of the token's own user; its numeric id is 1.
const BotLogin = "converge-bot"

// Comment is a comment of a pull request.
type Comment struct {
	ID   int
	User string
	Body string
}

// Status is a commit status as posted: Context is GitLab's name.
type Status struct {
	State, Context, Description, TargetURL string
}

// core is what the fakes share: the repository's pull requests, the users with write
// access, the comments and the commit statuses, the requests answered, and the check of
// the token. Each fake adds its forge's wire format as route.
type core struct {
	t    testing.TB
	repo string
	// header carries the token as value ("" without a token: no such header).
	header, value string
	// denied is the body of the answer to a request without the token.
	denied string
	// route answers a request, under mu; false when it is none of the forge's.
	route func(w http.ResponseWriter, r *http.Request) bool

	mu       sync.Mutex
	prs      map[int]*pull
	writers  map[string]bool
	users    map[string]int
	comments map[int][]Comment
	statuses map[string][]Status
	ids      int
	lists    int
	log      []string
}

// pull is an open pull request, in no forge's words.
type pull struct {
	number              int
	branch, sha, author string
	fork                bool
	labels              []string
	updated             time.Time
}

// init makes c a forge of repo whose token travels in header as value, and starts it on
// loopback for the test's lifetime; it returns its URL.
func (c *core) init(t testing.TB, repo, header, value, denied string, route func(http.ResponseWriter, *http.Request) bool) string {
	c.t, c.repo, c.header, c.value, c.denied, c.route = t, repo, header, value, denied, route
	c.prs = map[int]*pull{}
	c.writers = map[string]bool{}
	c.users = map[string]int{BotLogin: 1}
	c.comments = map[int][]Comment{}
	c.statuses = map[string][]Status{}
	srv := httptest.NewServer(c)
	t.Cleanup(srv.Close)
	return srv.URL
}

// Writer gives user write access to the repository (GitLab: Developer).
func (c *core) Writer(user string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.writers[user] = true
}

// Open opens (or updates) pull request n from branch at sha by author, from a fork of
// the repository when fork.
func (c *core) Open(n int, branch, sha, author string, fork bool, labels ...string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.userID(author)
	c.prs[n] = &pull{number: n, branch: branch, sha: sha, author: author, fork: fork,
		labels: slices.Clone(labels), updated: time.Now().UTC()}
}

// Label sets the labels of pull request n.
func (c *core) Label(n int, labels ...string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	pr, ok := c.prs[n]
	if !ok {
		c.t.Errorf("Label: no open pull request %d", n)
		return
	}
	pr.labels = slices.Clone(labels)
}

// Close closes pull request n.
func (c *core) Close(n int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.prs, n)
}

// Comments are the comments of pull request n, oldest first.
func (c *core) Comments(n int) []Comment {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.comments[n])
}

// AddComment adds a comment by user on pull request n.
func (c *core) AddComment(n int, user, body string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.addComment(n, user, body)
}

// Statuses are the commit statuses posted on sha, oldest first.
func (c *core) Statuses(sha string) []Status {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.statuses[sha])
}

// Lists counts the listings of the open pull requests (each page asked).
func (c *core) Lists() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lists
}

// Requests are the method and escaped path of every request answered.
func (c *core) Requests() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.log)
}

// ServeHTTP checks the token, notes the request and routes it; an unknown request fails
// the test.
func (c *core) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if got := r.Header.Get(c.header); got != c.value {
		c.t.Errorf("%s %s: %s %q", r.Method, r.URL.EscapedPath(), c.header, got)
		http.Error(w, c.denied, http.StatusUnauthorized)
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.log = append(c.log, r.Method+" "+r.URL.EscapedPath())
	if !c.route(w, r) {
		c.t.Errorf("unexpected request %s %s", r.Method, r.URL)
		http.NotFound(w, r)
	}
}

// userID is the numeric id of user, given on first sight. Under mu.
func (c *core) userID(user string) int {
	id, ok := c.users[user]
	if !ok {
		id = 100 + len(c.users)
		c.users[user] = id
	}
	return id
}

// userOf is the user of a numeric id; false for none. Under mu.
func (c *core) userOf(id int) (string, bool) {
	for u, i := range c.users {
		if i == id {
			return u, true
		}
	}
	return "", false
}

// open are the open pull requests by number, all on the first page and none after (the
// client stops at a short page). It counts a listing. Under mu.
func (c *core) open(r *http.Request, stateKey, state string) []*pull {
	c.lists++
	c.wantQuery(r, stateKey, state)
	out := []*pull{}
	if p := r.URL.Query().Get("page"); p != "" && p != "1" {
		return out
	}
	for _, pr := range c.prs {
		out = append(out, pr)
	}
	slices.SortFunc(out, func(a, b *pull) int { return a.number - b.number })
	return out
}

// commentsOf are the comments of pull request n on the first page asked (all of them),
// none on the others. Under mu.
func (c *core) commentsOf(r *http.Request, n int) []Comment {
	if p := r.URL.Query().Get("page"); p != "" && p != "1" {
		return nil
	}
	return c.comments[n]
}

// addComment adds a comment and returns its id. Under mu.
func (c *core) addComment(n int, user, body string) int {
	c.userID(user)
	c.ids++
	c.comments[n] = append(c.comments[n], Comment{ID: c.ids, User: user, Body: body})
	return c.ids
}

// editComment replaces the body of comment id, of pull request n unless n is 0; false
// when there is no such comment. Under mu.
func (c *core) editComment(n, id int, body string) bool {
	for pr, cs := range c.comments {
		for i := range cs {
			if cs[i].ID == id && (n == 0 || n == pr) {
				cs[i].Body = body
				return true
			}
		}
	}
	return false
}

// addStatus records s on sha and returns its id when its state is one of states (the
// forge's words) and, when maxDescription > 0, its description at most that long;
// otherwise it fails the test, answers 422 and returns 0. An empty context is the forge's
// "default". Under mu.
func (c *core) addStatus(w http.ResponseWriter, sha string, s Status, maxDescription int, states ...string) int {
	switch {
	case !slices.Contains(states, s.State):
		c.t.Errorf("status of %s: state %q, want one of %v", sha, s.State, states)
	case maxDescription > 0 && utf8.RuneCountInString(s.Description) > maxDescription:
		c.t.Errorf("status of %s: description of %d characters, more than %d", sha, utf8.RuneCountInString(s.Description), maxDescription)
	default:
		if s.Context == "" {
			s.Context = "default"
		}
		c.statuses[sha] = append(c.statuses[sha], s)
		c.ids++
		return c.ids
	}
	reply(w, http.StatusUnprocessableEntity, map[string]any{"message": "Validation Failed"})
	return 0
}

// wantQuery fails the test unless r's query has key=value.
func (c *core) wantQuery(r *http.Request, key, value string) {
	if got := r.URL.Query().Get(key); got != value {
		c.t.Errorf("%s %s: %s=%q, want %q", r.Method, r.URL.EscapedPath(), key, got, value)
	}
}

// decode reads r's JSON body into v; a body that is not JSON fails the test and answers
// 400.
func (c *core) decode(w http.ResponseWriter, r *http.Request, v any) bool {
	if err := json.NewDecoder(r.Body).Decode(v); err != nil {
		c.t.Errorf("%s %s: body: %v", r.Method, r.URL.EscapedPath(), err)
		reply(w, http.StatusBadRequest, map[string]any{"message": "Problems parsing JSON"})
		return false
	}
	return true
}

// reply answers v as JSON with code.
func reply(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

// scan reads path as format (verbs %d, one per n), with nothing left over.
func scan(path, format string, ns ...*int) bool {
	var rest string
	args := make([]any, 0, len(ns)+1)
	for _, n := range ns {
		args = append(args, n)
	}
	got, _ := fmt.Sscanf(path+" end", format+" %s", append(args, &rest)...)
	return got == len(ns)+1 && rest == "end"
}

// isStatusPath says whether rest, a path after the repository's, is "/statuses/{sha}".
func isStatusPath(rest string) bool {
	sha, ok := strings.CutPrefix(rest, "/statuses/")
	return ok && sha != "" && !strings.Contains(sha, "/")
}

// statusSHA is the commit of a status path (isStatusPath).
func statusSHA(rest string) string {
	return strings.TrimPrefix(rest, "/statuses/")
}

// labelNames are labels as GitHub and Gitea write them.
func labelNames(labels []string) []map[string]any {
	out := []map[string]any{}
	for _, l := range labels {
		out = append(out, map[string]any{"name": l})
	}
	return out
}
