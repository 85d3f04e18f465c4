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

// forgeRepo is where a commit status goes: the Notifier's forge API base and the
// repository's path on the forge ("owner/repo").
type forgeRepo struct {
	base string
	repo string
}

// forge is where a Notifier's commit statuses, and its token, go: fixed per Notifier,
// never derived from a SyncTarget (whose source URL whoever writes the SyncTarget picks).
type forge struct {
	base string // the API base
	host string // the host whose repositories it holds, as source URLs name it
}

// publicForges are the forges of each type when provider.address is not set.
var publicForges = map[convergev1.ProviderType]forge{
	convergev1.GitHubProvider:    {base: "https://api.github.com", host: "github.com"},
	convergev1.GitLabProvider:    {base: "https://gitlab.com", host: "gitlab.com"},
	convergev1.GiteaProvider:     {base: "https://gitea.com", host: "gitea.com"},
	convergev1.BitbucketProvider: {base: "https://api.bitbucket.org", host: "bitbucket.org"},
}

// forgeOf is the Notifier's forge: provider.address (http:// only when it says so), or
// the public service of its type.
func forgeOf(p convergev1.NotificationProvider) (forge, error) {
	if p.Address == "" {
		f, ok := publicForges[p.Type]
		if !ok {
			return forge{}, fmt.Errorf("%q sets no commit status", p.Type)
		}
		return f, nil
	}
	u, err := url.Parse(p.Address)
	if err != nil || u.Hostname() == "" || (u.Scheme != "https" && u.Scheme != "http") {
		return forge{}, errors.New("provider.address must be an http:// or https:// URL")
	}
	host := strings.ToLower(u.Hostname())
	for _, f := range publicForges { // api.github.com holds the repositories of github.com
		if host == strings.ToLower(strings.TrimPrefix(f.base, "https://")) {
			host = f.host
		}
	}
	return forge{base: strings.TrimRight(p.Address, "/"), host: host}, nil
}

// skipError says why a SyncTarget's notification is not sent at all: a decision, not a
// failure to retry.
type skipError struct{ msg string }

func (e *skipError) Error() string { return e.msg }

// repoOf is where the commit status of a SyncTarget following sourceURL goes: the
// Notifier's forge, and provider.repository or the path of the source URL, which must
// then be on the forge's host (a SyncTarget elsewhere is skipped with a skipError).
// Errors never quote the URL: it may hold credentials.
func repoOf(p convergev1.NotificationProvider, sourceURL string) (forgeRepo, error) {
	f, err := forgeOf(p)
	if err != nil {
		return forgeRepo{}, err
	}
	path := p.Repository
	if path == "" {
		host, srcPath, err := splitRepoURL(sourceURL)
		if err != nil {
			return forgeRepo{}, err
		}
		if host != f.host {
			return forgeRepo{}, &skipError{fmt.Sprintf("skipped: the SyncTarget's repository is on %q, not on this "+
				"Notifier's forge (%q): set provider.address for another forge, provider.repository for a mirror, "+
				"or leave the SyncTarget out of spec.targetSelector", host, f.host)}
		}
		path = srcPath
	}
	path = strings.TrimSuffix(strings.Trim(path, "/"), ".git")
	if strings.Count(path, "/") < 1 || strings.Contains(path, "..") {
		return forgeRepo{}, errors.New("cannot tell the repository from the source url: set provider.repository")
	}
	if p.Type == convergev1.BitbucketProvider && strings.Count(path, "/") != 1 {
		return forgeRepo{}, errors.New("a Bitbucket repository is workspace/repo")
	}
	return forgeRepo{base: f.base, repo: path}, nil
}

// splitRepoURL reads a repository URL (https://, http://, ssh:// or user@host:path) into
// its host name (lower case, without a port) and path.
func splitRepoURL(raw string) (host, path string, err error) {
	raw = strings.TrimSpace(raw)
	if m := scpURL.FindStringSubmatch(raw); m != nil && !strings.Contains(raw, "://") {
		return strings.ToLower(m[1]), m[2], nil
	}
	u, perr := url.Parse(raw)
	if perr != nil || u.Hostname() == "" {
		return "", "", errors.New("cannot read the source url")
	}
	switch u.Scheme {
	case "http", "https", "ssh", "git+ssh", "ssh+git":
		return strings.ToLower(u.Hostname()), u.Path, nil
	}
	return "", "", fmt.Errorf("unsupported source url scheme %q", u.Scheme)
}

// statusContext is the context (GitHub, Gitea), name (GitLab) or key (Bitbucket) of the
// commit statuses of one SyncTarget.
func statusContext(namespace, name string) string {
	return "converge/" + namespace + "/" + name
}
