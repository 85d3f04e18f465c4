package notify

import (
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"strings"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
)

// scpURL matches the scp-like form user@host:path of a repository URL.
var scpURL = regexp.MustCompile(`^[A-Za-z0-9._~+-]+@([A-Za-z0-9.-]+):(.+)$`)

// forgeRepo is where a commit status goes: the API base (provider.address, or derived from
// the repository's host) and the repository's path on the forge ("owner/repo").
type forgeRepo struct {
	base string
	repo string
}

// repoOf derives the forge API base and repository from a SyncTarget's source URL
// (https://, http://, ssh:// or user@host:path), unless the provider overrides them.
// Errors never quote the URL: it may hold credentials.
func repoOf(p convergev1.NotificationProvider, sourceURL string) (forgeRepo, error) {
	scheme, host, path, err := splitRepoURL(sourceURL)
	if p.Repository != "" {
		path, err = p.Repository, nil
	}
	if err != nil {
		return forgeRepo{}, err
	}
	path = strings.TrimSuffix(strings.Trim(path, "/"), ".git")
	if strings.Count(path, "/") < 1 || strings.Contains(path, "..") {
		return forgeRepo{}, errors.New("cannot tell the repository from the source url: set provider.repository")
	}
	if p.Type == convergev1.BitbucketProvider && strings.Count(path, "/") != 1 {
		return forgeRepo{}, errors.New("a Bitbucket repository is workspace/repo")
	}
	base := strings.TrimRight(p.Address, "/")
	if base == "" {
		if host == "" {
			return forgeRepo{}, errors.New("cannot tell the forge from the source url: set provider.address")
		}
		base = defaultBase(p.Type, scheme, host)
	}
	return forgeRepo{base: base, repo: path}, nil
}

// defaultBase is the API base of a forge hosted at host: GitHub's and Bitbucket Cloud's API
// hosts, GitHub Enterprise's /api/v3, and the server itself for GitLab and Gitea.
func defaultBase(t convergev1.ProviderType, scheme, host string) string {
	if scheme != "http" {
		scheme = "https" // an ssh:// repository's forge answers HTTPS
	}
	switch {
	case t == convergev1.GitHubProvider && host == "github.com":
		return "https://api.github.com"
	case t == convergev1.GitHubProvider:
		return scheme + "://" + host + "/api/v3"
	case t == convergev1.BitbucketProvider:
		return "https://api.bitbucket.org"
	}
	return scheme + "://" + host
}

// splitRepoURL reads a repository URL into scheme, host (with port for http(s)) and path.
func splitRepoURL(raw string) (scheme, host, path string, err error) {
	raw = strings.TrimSpace(raw)
	if m := scpURL.FindStringSubmatch(raw); m != nil && !strings.Contains(raw, "://") {
		return "ssh", m[1], m[2], nil
	}
	u, perr := url.Parse(raw)
	if perr != nil || u.Host == "" {
		return "", "", "", errors.New("cannot read the source url")
	}
	switch u.Scheme {
	case "http", "https":
		return u.Scheme, u.Host, u.Path, nil
	case "ssh", "git+ssh", "ssh+git":
		return "ssh", u.Hostname(), u.Path, nil
	}
	return "", "", "", fmt.Errorf("unsupported source url scheme %q", u.Scheme)
}

// statusContext is the context (GitHub, Gitea), name (GitLab) or key (Bitbucket) of the
// commit statuses of one SyncTarget.
func statusContext(namespace, name string) string {
	return "converge/" + namespace + "/" + name
}
