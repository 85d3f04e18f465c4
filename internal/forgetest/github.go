package forgetest

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"
)

// GitHub answers, for one repository ("owner/repo"), the calls converge makes: open pull
// requests, a collaborator's permission, the token's user, issue comments (list, create,
// edit) and commit statuses. Every request must carry the token ("Authorization: Bearer
// <token>", none when it is empty), or the test fails.
type GitHub struct {
	// URL is the API base.
	URL string

	core
}

// NewGitHub starts the forge on loopback for the test's lifetime.
func NewGitHub(t testing.TB, repo, token string) *GitHub {
	f := &GitHub{}
	value := ""
	if token != "" {
		value = "Bearer " + token
	}
	f.URL = f.init(t, repo, "Authorization", value, `{"message":"Bad credentials"}`, f.route)
	return f
}

// route answers GitHub's calls. Under mu.
func (f *GitHub) route(w http.ResponseWriter, r *http.Request) bool {
	path := r.URL.EscapedPath()
	if r.Method == http.MethodGet && path == "/user" {
		reply(w, http.StatusOK, map[string]any{"login": BotLogin, "id": 1})
		return true
	}
	rest, ok := strings.CutPrefix(path, "/repos/"+f.repo)
	web := "https://github.example/" + f.repo + "/pull/%d"
	return ok && (f.githubPulls(w, r, rest, web) || f.githubComments(w, r, rest) ||
		f.githubStatus(w, r, rest, 140, "error", "failure", "pending", "success"))
}

// The wire format below is GitHub's, which Gitea speaks too.

// githubPulls answers, rest being the path after the repository's, the listing of the
// open pull requests (web is their page, %d the number) and a collaborator's permission
// (write or read). Under mu.
func (c *core) githubPulls(w http.ResponseWriter, r *http.Request, rest, web string) bool {
	switch {
	case r.Method == http.MethodGet && rest == "/pulls":
		out := []map[string]any{}
		for _, pr := range c.open(r, "state", "open") {
			head := c.repo
			if pr.fork {
				head = pr.author + "/fork"
			}
			out = append(out, map[string]any{
				"number": pr.number, "title": "change " + pr.branch, "state": "open", "html_url": fmt.Sprintf(web, pr.number),
				"draft": false, "user": map[string]any{"login": pr.author, "id": c.userID(pr.author)}, "labels": labelNames(pr.labels),
				"head":       map[string]any{"ref": pr.branch, "sha": pr.sha, "repo": map[string]any{"full_name": head}},
				"base":       map[string]any{"ref": "main", "repo": map[string]any{"full_name": c.repo}},
				"updated_at": pr.updated.Format(time.RFC3339),
			})
		}
		reply(w, http.StatusOK, out)
	case r.Method == http.MethodGet && strings.HasPrefix(rest, "/collaborators/") && strings.HasSuffix(rest, "/permission"):
		user := strings.TrimSuffix(strings.TrimPrefix(rest, "/collaborators/"), "/permission")
		perm := "read"
		if c.writers[user] {
			perm = "write"
		}
		reply(w, http.StatusOK, map[string]any{"permission": perm, "role_name": perm,
			"user": map[string]any{"login": user, "id": c.userID(user)}})
	default:
		return false
	}
	return true
}

// githubComments answers the issue comment calls: list, create, edit. Under mu.
func (c *core) githubComments(w http.ResponseWriter, r *http.Request, rest string) bool {
	var n int
	var in struct{ Body string }
	switch {
	case r.Method == http.MethodGet && scan(rest, "/issues/%d/comments", &n):
		out := []map[string]any{}
		for _, cm := range c.commentsOf(r, n) {
			out = append(out, map[string]any{"id": cm.ID, "body": cm.Body, "user": map[string]any{"login": cm.User, "id": c.userID(cm.User)}})
		}
		reply(w, http.StatusOK, out)
	case r.Method == http.MethodPost && scan(rest, "/issues/%d/comments", &n):
		if c.decode(w, r, &in) {
			reply(w, http.StatusCreated, map[string]any{"id": c.addComment(n, BotLogin, in.Body), "body": in.Body,
				"user": map[string]any{"login": BotLogin, "id": 1}})
		}
	case r.Method == http.MethodPatch && scan(rest, "/issues/comments/%d", &n):
		switch {
		case !c.decode(w, r, &in):
		case c.editComment(0, n, in.Body):
			reply(w, http.StatusOK, map[string]any{"id": n, "body": in.Body})
		default:
			reply(w, http.StatusNotFound, map[string]any{"message": "Not Found"})
		}
	default:
		return false
	}
	return true
}

// githubStatus records a commit status whose state is one of states and description at
// most maxDescription characters (0: any). Under mu.
func (c *core) githubStatus(w http.ResponseWriter, r *http.Request, rest string, maxDescription int, states ...string) bool {
	if r.Method != http.MethodPost || !isStatusPath(rest) {
		return false
	}
	var in struct {
		State       string `json:"state"`
		TargetURL   string `json:"target_url"`
		Description string `json:"description"`
		Context     string `json:"context"`
	}
	if !c.decode(w, r, &in) {
		return true
	}
	s := Status{State: in.State, Context: in.Context, Description: in.Description, TargetURL: in.TargetURL}
	if id := c.addStatus(w, statusSHA(rest), s, maxDescription, states...); id > 0 {
		reply(w, http.StatusCreated, map[string]any{"id": id, "state": s.State, "context": s.Context})
	}
	return true
}
