package forge

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"strconv"
)

// gitlabDeveloper is GitLab's access level of a Developer, the least that may push.
const gitlabDeveloper = 30

// CanWrite says whether user may push to the repository, as the forge answers:
//
//   - GitHub: the collaborator's permission is admin or write, or its role maintain,
//     admin or write; 404 (not a collaborator, no such user) is false.
//   - Gitea: the collaborator's permission is owner, admin or write; 403 and 404 are
//     false.
//   - GitLab: user is the author's numeric id (PullRequest.AuthorID); the member's
//     access level, inherited ones included, is Developer (30) or more, and the member
//     is active; 404 is false.
//   - Bitbucket: always false, without a request: Bitbucket Cloud tells a repository or
//     workspace token nothing of another user's permission.
func (c *Client) CanWrite(ctx context.Context, user string) (bool, error) {
	can, err := c.canWrite(ctx, user)
	return can, c.scrub(err)
}

func (c *Client) canWrite(ctx context.Context, user string) (bool, error) {
	if err := c.checkUser(user); err != nil {
		return false, err
	}
	switch c.kind {
	case Bitbucket:
		return false, nil
	case GitLab:
		return c.gitlabCanWrite(ctx, user)
	default:
		return c.collaboratorCanWrite(ctx, user)
	}
}

// checkUser refuses a user that is no name (GitLab: no numeric id) of the forge.
func (c *Client) checkUser(user string) error {
	if c.kind == GitLab {
		if n, err := strconv.ParseUint(user, 10, 63); err != nil || n == 0 {
			return errors.New("gitlab: a user is asked for by its numeric id")
		}
		return nil
	}
	if user == "" || user == "." || user == ".." || len(user) > maxField {
		return errors.New("the user is not a name of the forge")
	}
	for _, r := range user {
		if r <= ' ' || r == 0x7f || r == '/' {
			return errors.New("the user is not a name of the forge")
		}
	}
	return nil
}

// collaboratorCanWrite asks GitHub or Gitea for the permission of a collaborator.
func (c *Client) collaboratorCanWrite(ctx context.Context, user string) (bool, error) {
	var p struct {
		Permission string `json:"permission"`
		RoleName   string `json:"role_name"`
	}
	err := c.get(ctx, c.endpoint(c.repoPath()+"/collaborators/"+url.PathEscape(user)+"/permission", nil), &p)
	switch {
	case hasStatus(err, http.StatusNotFound) || (c.kind == Gitea && hasStatus(err, http.StatusForbidden)):
		return false, nil
	case err != nil:
		return false, err
	case c.kind == Gitea:
		return p.Permission == "owner" || p.Permission == "admin" || p.Permission == "write", nil
	default:
		return p.Permission == "admin" || p.Permission == "write" ||
			p.RoleName == "maintain" || p.RoleName == "admin" || p.RoleName == "write", nil
	}
}

// gitlabCanWrite asks GitLab for the access level of a project's member.
func (c *Client) gitlabCanWrite(ctx context.Context, id string) (bool, error) {
	var m struct {
		AccessLevel int    `json:"access_level"`
		State       string `json:"state"`
	}
	err := c.get(ctx, c.endpoint(c.repoPath()+"/members/all/"+id, nil), &m)
	switch {
	case hasStatus(err, http.StatusNotFound):
		return false, nil
	case err != nil:
		return false, err
	}
	return m.AccessLevel >= gitlabDeveloper && (m.State == "" || m.State == "active"), nil
}
