package forgetest

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"
)

// gitlabProject is the numeric id of the repository's project; a fork's is 1000 and its
// author's id.
const gitlabProject = 42

// GitLab answers, for one project ("group/project", subgroups allowed), the calls
// converge makes under /api/v4/projects/{the path escaped}: open merge requests, a
// member's access level (asked by numeric user id), the token's user, merge request notes
// (list, create, edit) and commit statuses. Every request must carry the token
// ("PRIVATE-TOKEN: <token>", none when it is empty), or the test fails.
//
// Users are named by username (Open, Writer, AddComment, Comment.User); the fake gives
// each a numeric id, the token's own user (BotLogin) 1. As GitLab does, it refuses (400)
// a pending or running status over the newest one of the same name in the same state,
// and records nothing.
type GitLab struct {
	// URL is the API base (the server's root: the paths start with /api/v4).
	URL string

	core
}

// NewGitLab starts the forge on loopback for the test's lifetime.
func NewGitLab(t testing.TB, repo, token string) *GitLab {
	f := &GitLab{}
	f.URL = f.init(t, repo, "PRIVATE-TOKEN", token, `{"message":"401 Unauthorized"}`, f.route)
	return f
}

// route answers GitLab's calls. Under mu.
func (f *GitLab) route(w http.ResponseWriter, r *http.Request) bool {
	path := r.URL.EscapedPath()
	if r.Method == http.MethodGet && path == "/api/v4/user" {
		reply(w, http.StatusOK, map[string]any{"id": 1, "username": BotLogin, "state": "active"})
		return true
	}
	rest, ok := strings.CutPrefix(path, "/api/v4/projects/"+url.PathEscape(f.repo))
	return ok && (f.mergeRequests(w, r, rest) || f.notes(w, r, rest) || f.status(w, r, rest))
}

// mergeRequests answers, rest being the path after the project's, the listing of the
// open merge requests and a member's access level (Developer for a writer; any other
// user is no member). Under mu.
func (f *GitLab) mergeRequests(w http.ResponseWriter, r *http.Request, rest string) bool {
	var id int
	switch {
	case r.Method == http.MethodGet && rest == "/merge_requests":
		out := []map[string]any{}
		for _, pr := range f.open(r, "state", "opened") {
			out = append(out, f.mergeRequest(pr))
		}
		reply(w, http.StatusOK, out)
	case r.Method == http.MethodGet && scan(rest, "/members/all/%d", &id):
		user, known := f.userOf(id)
		if !known || !f.writers[user] {
			reply(w, http.StatusNotFound, map[string]any{"message": "404 Not found"})
			break
		}
		reply(w, http.StatusOK, map[string]any{"id": id, "username": user, "access_level": 30, "state": "active"})
	default:
		return false
	}
	return true
}

// notes answers the merge request note calls: list, create, edit. Under mu.
func (f *GitLab) notes(w http.ResponseWriter, r *http.Request, rest string) bool {
	var n, id int
	var in struct{ Body string }
	switch {
	case r.Method == http.MethodGet && scan(rest, "/merge_requests/%d/notes", &n):
		out := []map[string]any{}
		for _, c := range f.commentsOf(r, n) {
			out = append(out, map[string]any{"id": c.ID, "body": c.Body, "system": false,
				"author": map[string]any{"id": f.userID(c.User), "username": c.User}})
		}
		reply(w, http.StatusOK, out)
	case r.Method == http.MethodPost && scan(rest, "/merge_requests/%d/notes", &n):
		if f.decode(w, r, &in) {
			reply(w, http.StatusCreated, map[string]any{"id": f.addComment(n, BotLogin, in.Body), "body": in.Body,
				"author": map[string]any{"id": 1, "username": BotLogin}})
		}
	case r.Method == http.MethodPut && scan(rest, "/merge_requests/%d/notes/%d", &n, &id):
		switch {
		case !f.decode(w, r, &in):
		case f.editComment(n, id, in.Body):
			reply(w, http.StatusOK, map[string]any{"id": id, "body": in.Body})
		default:
			reply(w, http.StatusNotFound, map[string]any{"message": "404 Not found"})
		}
	default:
		return false
	}
	return true
}

// status records a commit status. Under mu.
func (f *GitLab) status(w http.ResponseWriter, r *http.Request, rest string) bool {
	if r.Method != http.MethodPost || !isStatusPath(rest) {
		return false
	}
	var in struct {
		State       string `json:"state"`
		Name        string `json:"name"`
		Context     string `json:"context"` // GitLab's other word for name
		Description string `json:"description"`
		TargetURL   string `json:"target_url"`
	}
	if !f.decode(w, r, &in) {
		return true
	}
	if in.Name == "" {
		in.Name = in.Context
	}
	sha := statusSHA(rest)
	s := Status{State: in.State, Context: in.Name, Description: in.Description, TargetURL: in.TargetURL}
	if verb, same := f.unfinished(sha, s); same {
		reply(w, http.StatusBadRequest, map[string]any{"message": "Cannot transition status via :" + verb + " from :" + s.State})
		return true
	}
	if id := f.addStatus(w, sha, s, 0, "pending", "running", "success", "failed", "canceled", "skipped"); id > 0 {
		reply(w, http.StatusCreated, map[string]any{"id": id, "sha": sha, "status": s.State, "name": s.Context})
	}
	return true
}

// mergeRequest is pr as GitLab writes it. Under mu.
func (f *GitLab) mergeRequest(pr *pull) map[string]any {
	author := f.userID(pr.author)
	source := gitlabProject
	if pr.fork {
		source = 1000 + author
	}
	labels := append([]string{}, pr.labels...)
	return map[string]any{
		"id": 10000 + pr.number, "iid": pr.number, "project_id": gitlabProject,
		"title": "change " + pr.branch, "state": "opened",
		"web_url": fmt.Sprintf("https://gitlab.example/%s/-/merge_requests/%d", f.repo, pr.number),
		"draft":   false, "work_in_progress": false,
		"author": map[string]any{"id": author, "username": pr.author},
		"labels": labels, "source_branch": pr.branch, "target_branch": "main", "sha": pr.sha,
		"source_project_id": source, "target_project_id": gitlabProject,
		"updated_at": pr.updated.Format(time.RFC3339),
	}
}

// unfinished says whether the newest status of s's name on sha is unfinished (pending,
// running) in s's state: GitLab moves a status along its states and refuses to move it to
// where it is, naming the transition (verb). Under mu.
func (f *GitLab) unfinished(sha string, s Status) (verb string, same bool) {
	name := s.Context
	if name == "" {
		name = "default"
	}
	verbs := map[string]string{"pending": "enqueue", "running": "run"}
	all := f.statuses[sha]
	for i := len(all) - 1; i >= 0; i-- {
		if all[i].Context == name {
			verb, ok := verbs[s.State]
			return verb, ok && all[i].State == s.State
		}
	}
	return "", false
}
