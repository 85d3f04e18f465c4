package ui

import (
	"net/url"
	"strings"
)

// forges are the hosts whose commit pages converge links to, and the path of a commit
// of a repository there.
var forges = map[string]func(repo, sha string) string{
	"github.com":    func(repo, sha string) string { return repo + "/commit/" + sha },
	"gitlab.com":    func(repo, sha string) string { return repo + "/-/commit/" + sha },
	"codeberg.org":  func(repo, sha string) string { return repo + "/commit/" + sha },
	"gitea.com":     func(repo, sha string) string { return repo + "/commit/" + sha },
	"bitbucket.org": func(repo, sha string) string { return repo + "/commits/" + sha },
}

// commitURL is the web page of commit sha of the repository at source, when source is
// on a known forge (https, ssh:// or scp-like user@host:path); empty otherwise.
// Credentials in the URL never reach the link.
func commitURL(source, sha string) string {
	if sha == "" {
		return ""
	}
	host, path := splitRepoURL(source)
	page, ok := forges[strings.ToLower(host)]
	if !ok {
		return ""
	}
	path = strings.TrimSuffix(strings.Trim(path, "/"), ".git")
	if path == "" || strings.ContainsAny(path, "?#") {
		return ""
	}
	return page("https://"+strings.ToLower(host)+"/"+path, sha)
}

// splitRepoURL returns the host and path of a repository URL in any form git takes.
func splitRepoURL(source string) (host, path string) {
	if !strings.Contains(source, "://") {
		// scp-like: user@host:path
		at := strings.LastIndex(source, "@")
		rest := source[at+1:]
		host, path, ok := strings.Cut(rest, ":")
		if !ok {
			return "", ""
		}
		return host, path
	}
	u, err := url.Parse(source)
	if err != nil {
		return "", ""
	}
	return u.Hostname(), u.Path
}
