package notify

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"net/url"
	"strings"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
)

// maxDescription is GitHub's limit on a commit status description (the others take more).
const maxDescription = 140

// statusState is a commit status state in each forge's words.
func statusState(t convergev1.ProviderType, e convergev1.NotificationEvent) string {
	type states struct{ pending, success, failure, errored string }
	s := map[convergev1.ProviderType]states{
		convergev1.GitHubProvider:    {"pending", "success", "failure", "error"},
		convergev1.GiteaProvider:     {"pending", "success", "failure", "error"},
		convergev1.GitLabProvider:    {"running", "success", "failed", "failed"},
		convergev1.BitbucketProvider: {"INPROGRESS", "SUCCESSFUL", "FAILED", "FAILED"},
	}[t]
	switch e {
	case convergev1.EventProgressing:
		return s.pending
	case convergev1.EventSucceeded:
		return s.success
	case convergev1.EventFailed, convergev1.EventRolledBack:
		return s.failure
	case convergev1.EventStalled:
		return s.errored
	}
	return "" // drift corrections are no commit status
}

// statusRequest sets a commit status on the SyncTarget's repository: pending when a
// revision starts, success or failure (with why) when it ends.
func statusRequest(p convergev1.NotificationProvider, c credentials, n notification) (*request, error) {
	state := statusState(p.Type, n.msg.Event)
	sha := n.msg.Commit
	if state == "" || sha == "" {
		return nil, nil
	}
	fr, err := repoOf(p, n.sourceURL)
	if err != nil {
		return nil, err
	}
	ctxName := statusContext(n.msg.Namespace, n.msg.Target)
	desc := description(n.msg, maxDescription)
	var path string
	var body map[string]any
	switch p.Type {
	case convergev1.GitHubProvider, convergev1.GiteaProvider:
		// GitHub: POST /repos/{owner}/{repo}/statuses/{sha}; Gitea: the same under /api/v1.
		path = "/repos/" + escapePath(fr.repo) + "/statuses/" + sha
		if p.Type == convergev1.GiteaProvider {
			path = "/api/v1" + path
		}
		body = map[string]any{"state": state, "context": ctxName, "description": desc}
	case convergev1.GitLabProvider:
		// POST /api/v4/projects/:id/statuses/:sha, id the URL-encoded project path.
		path = "/api/v4/projects/" + url.PathEscape(fr.repo) + "/statuses/" + sha
		body = map[string]any{"state": state, "name": ctxName, "context": ctxName, "description": desc}
	case convergev1.BitbucketProvider:
		// POST /2.0/repositories/{workspace}/{repo_slug}/commit/{commit}/statuses/build
		path = "/2.0/repositories/" + escapePath(fr.repo) + "/commit/" + sha + "/statuses/build"
		body = map[string]any{"state": state, "key": bitbucketKey(ctxName), "name": ctxName,
			"description": desc, "url": "https://bitbucket.org/" + fr.repo + "/commits/" + sha}
	}
	r, err := jsonRequest(fr.base+path, body)
	if err != nil {
		return nil, err
	}
	r.ident = string(p.Type) + " " + path
	setForgeAuth(r, p.Type, c)
	return r, nil
}

// setForgeAuth sets each forge's documented authentication and media type.
func setForgeAuth(r *request, t convergev1.ProviderType, c credentials) {
	r.header.Set("Accept", "application/json")
	switch t {
	case convergev1.GitHubProvider:
		r.header.Set("Accept", "application/vnd.github+json")
		r.header.Set("X-GitHub-Api-Version", "2022-11-28")
		r.header.Set("Authorization", "Bearer "+c.token)
	case convergev1.GiteaProvider:
		r.header.Set("Authorization", "token "+c.token)
	case convergev1.GitLabProvider:
		r.header.Set("PRIVATE-TOKEN", c.token)
	case convergev1.BitbucketProvider:
		if c.username != "" {
			r.header.Set("Authorization", basicAuth(c.username, c.password))
		} else {
			r.header.Set("Authorization", "Bearer "+c.token)
		}
	}
}

// escapePath escapes each segment of owner/repo.
func escapePath(p string) string {
	parts := strings.Split(p, "/")
	for i, s := range parts {
		parts[i] = url.PathEscape(s)
	}
	return strings.Join(parts, "/")
}

// bitbucketKey is a status key of at most 40 characters (Bitbucket's limit).
func bitbucketKey(ctxName string) string {
	if len(ctxName) <= 40 {
		return ctxName
	}
	sum := sha256.Sum256([]byte(ctxName))
	return ctxName[:27] + "-" + hex.EncodeToString(sum[:6])
}

func basicAuth(user, pass string) string {
	return "Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"+pass))
}
