package forgetest

import (
	"net/http"
	"strings"
	"testing"
)

// Gitea answers, for one repository ("owner/repo") of Gitea (or Forgejo), the calls
// converge makes under /api/v1: open pull requests, a collaborator's permission, the
// token's user, issue comments (list, create, edit) and commit statuses, in GitHub's
// words (as Gitea writes them). Every request must carry the token ("Authorization:
// token <token>", none when it is empty), or the test fails.
type Gitea struct {
	// URL is the API base (the server's root: the paths start with /api/v1).
	URL string

	core
}

// NewGitea starts the forge on loopback for the test's lifetime.
func NewGitea(t testing.TB, repo, token string) *Gitea {
	f := &Gitea{}
	value := ""
	if token != "" {
		value = "token " + token
	}
	f.URL = f.init(t, repo, "Authorization", value, `{"message":"token is required"}`, f.route)
	return f
}

// route answers Gitea's calls. Under mu.
func (f *Gitea) route(w http.ResponseWriter, r *http.Request) bool {
	path := r.URL.EscapedPath()
	if r.Method == http.MethodGet && path == "/api/v1/user" {
		reply(w, http.StatusOK, map[string]any{"id": 1, "login": BotLogin, "username": BotLogin})
		return true
	}
	rest, ok := strings.CutPrefix(path, "/api/v1/repos/"+f.repo)
	web := "https://gitea.example/" + f.repo + "/pulls/%d"
	return ok && (f.githubPulls(w, r, rest, web) || f.githubComments(w, r, rest) ||
		f.githubStatus(w, r, rest, 0, "pending", "success", "error", "failure", "warning", "skipped"))
}
