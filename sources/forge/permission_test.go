package forge

import (
	"context"
	"net/http"
	"strings"
	"testing"
)

// CanWrite asks each forge its own permission call and reads its answer.
func TestCanWrite(t *testing.T) {
	for _, tc := range []struct {
		name    string
		kind    Kind
		repo    string
		user    string
		path    string
		status  int
		answer  string
		want    bool
		wantErr string
	}{
		{name: "admin", kind: GitHub, repo: "octo/shop", user: "alice", path: "/repos/octo/shop/collaborators/alice/permission",
			answer: `{"permission": "admin", "role_name": "admin", "user": {"login": "alice", "id": 1001}}`, want: true},
		{name: "write", kind: GitHub, repo: "octo/shop", user: "alice", path: "/repos/octo/shop/collaborators/alice/permission",
			answer: `{"permission": "write", "role_name": "write", "user": {"login": "alice"}}`, want: true},
		{name: "maintain role", kind: GitHub, repo: "octo/shop", user: "alice", path: "/repos/octo/shop/collaborators/alice/permission",
			answer: `{"permission": "read", "role_name": "maintain"}`, want: true},
		{name: "triage", kind: GitHub, repo: "octo/shop", user: "visitor", path: "/repos/octo/shop/collaborators/visitor/permission",
			answer: `{"permission": "read", "role_name": "triage"}`, want: false},
		{name: "none", kind: GitHub, repo: "octo/shop", user: "visitor", path: "/repos/octo/shop/collaborators/visitor/permission",
			answer: `{"permission": "none", "role_name": "read"}`, want: false},
		{name: "not a collaborator", kind: GitHub, repo: "octo/shop", user: "visitor", path: "/repos/octo/shop/collaborators/visitor/permission",
			status: http.StatusNotFound, answer: `{"message": "Not Found", "documentation_url": "https://docs.github.com/rest", "status": "404"}`},
		{name: "a bot's login is escaped", kind: GitHub, repo: "octo/shop", user: "dependabot[bot]",
			path: "/repos/octo/shop/collaborators/dependabot%5Bbot%5D/permission", answer: `{"permission": "read"}`},
		{name: "an error", kind: GitHub, repo: "octo/shop", user: "alice", path: "/repos/octo/shop/collaborators/alice/permission",
			status: http.StatusForbidden, answer: `{"message": "Resource not accessible by integration"}`,
			wantErr: "github: GET /repos/octo/shop/collaborators/alice/permission: 403 Forbidden: Resource not accessible by integration"},

		{name: "owner", kind: Gitea, repo: "octo/shop", user: "alice", path: "/api/v1/repos/octo/shop/collaborators/alice/permission",
			answer: `{"permission": "owner", "role_name": "owner", "user": {"id": 7, "login": "alice"}}`, want: true},
		{name: "write", kind: Gitea, repo: "octo/shop", user: "alice", path: "/api/v1/repos/octo/shop/collaborators/alice/permission",
			answer: `{"permission": "write", "role_name": "write"}`, want: true},
		{name: "read", kind: Gitea, repo: "octo/shop", user: "visitor", path: "/api/v1/repos/octo/shop/collaborators/visitor/permission",
			answer: `{"permission": "read", "role_name": "read"}`, want: false},
		{name: "forbidden", kind: Gitea, repo: "octo/shop", user: "visitor", path: "/api/v1/repos/octo/shop/collaborators/visitor/permission",
			status: http.StatusForbidden, answer: `{"message": "user should be an owner or a collaborator with admin write of a repository", "url": "https://gitea.example/api/swagger"}`},
		{name: "not found", kind: Gitea, repo: "octo/shop", user: "visitor", path: "/api/v1/repos/octo/shop/collaborators/visitor/permission",
			status: http.StatusNotFound, answer: `{"errors": null, "message": "The target couldn't be found.", "url": "https://gitea.example/api/swagger"}`},

		{name: "developer", kind: GitLab, repo: "group/sub/shop", user: "11", path: "/api/v4/projects/group%2Fsub%2Fshop/members/all/11",
			answer: `{"id": 11, "username": "alice", "name": "Alice", "state": "active", "access_level": 30, "expires_at": null}`, want: true},
		{name: "owner", kind: GitLab, repo: "group/sub/shop", user: "11", path: "/api/v4/projects/group%2Fsub%2Fshop/members/all/11",
			answer: `{"id": 11, "username": "alice", "state": "active", "access_level": 50}`, want: true},
		{name: "reporter", kind: GitLab, repo: "group/sub/shop", user: "66", path: "/api/v4/projects/group%2Fsub%2Fshop/members/all/66",
			answer: `{"id": 66, "username": "mallory", "state": "active", "access_level": 20}`, want: false},
		{name: "blocked maintainer", kind: GitLab, repo: "group/sub/shop", user: "12", path: "/api/v4/projects/group%2Fsub%2Fshop/members/all/12",
			answer: `{"id": 12, "username": "bob", "state": "blocked", "access_level": 40}`, want: false},
		{name: "not a member", kind: GitLab, repo: "group/sub/shop", user: "66", path: "/api/v4/projects/group%2Fsub%2Fshop/members/all/66",
			status: http.StatusNotFound, answer: `{"message": "404 Not found"}`},
		{name: "a name instead of an id", kind: GitLab, repo: "group/sub/shop", user: "alice", wantErr: "numeric id"},

		{name: "always false", kind: Bitbucket, repo: "ws/shop", user: "alice"},

		{name: "a path", kind: GitHub, repo: "octo/shop", user: "../../admin", wantErr: "not a name"},
		{name: "dot dot", kind: Gitea, repo: "octo/shop", user: "..", wantErr: "not a name"},
		{name: "empty", kind: GitHub, repo: "octo/shop", user: "", wantErr: "not a name"},
		{name: "newline", kind: GitHub, repo: "octo/shop", user: "a\nb", wantErr: "not a name"},
	} {
		t.Run(string(tc.kind)+"/"+tc.name, func(t *testing.T) {
			var script []exchange
			if tc.path != "" {
				script = append(script, exchange{method: http.MethodGet, path: tc.path, status: tc.status, answer: tc.answer})
			}
			f := newFake(t, tc.kind, testToken, script...)
			got, err := f.client(tc.repo).CanWrite(context.Background(), tc.user)
			switch {
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("got %v, %v; want an error with %q", got, err, tc.wantErr)
			case tc.wantErr == "" && err != nil:
				t.Fatal(err)
			case got != tc.want:
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
}
