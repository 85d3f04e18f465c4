package sources

import (
	"errors"
	"fmt"
	"net/netip"
	"net/url"
	"path"
	"regexp"
	"strings"
)

// scpPattern matches the scp-like form user@host:path (the user is required so that Windows
// paths and host:port pairs are not mistaken for it).
var scpPattern = regexp.MustCompile(`^([A-Za-z0-9._~+-]+)@([A-Za-z0-9.-]+|\[[0-9A-Fa-f:.]+\]):(.*)$`)

// splitURL reads a repository URL into its scheme ("ssh" for the scp-like form), userinfo, host
// (without port or brackets) and path.
func splitURL(raw string) (scheme string, user *url.Userinfo, host, port, p string, err error) {
	raw = strings.TrimSpace(raw)
	if strings.Contains(raw, "://") {
		u, perr := url.Parse(raw)
		if perr != nil {
			// url.Parse quotes its input: never pass that on, it may hold a password.
			return "", nil, "", "", "", errors.New("malformed url")
		}
		scheme = strings.ToLower(u.Scheme)
		switch scheme {
		case "http", "https", "ssh", "git", "git+ssh", "ssh+git":
		default:
			return "", nil, "", "", "", fmt.Errorf("unsupported url scheme %q: use https://, http:// or ssh://", scheme)
		}
		if u.Opaque != "" || u.Host == "" {
			return "", nil, "", "", "", errors.New("malformed url: no host")
		}
		return scheme, u.User, u.Hostname(), u.Port(), u.Path, nil
	}
	if m := scpPattern.FindStringSubmatch(raw); m != nil {
		return "ssh", url.User(m[1]), strings.Trim(m[2], "[]"), "", m[3], nil
	}
	return "", nil, "", "", "", errors.New("not a url: want https://, http://, ssh:// or user@host:path")
}

// NormalizeURL reduces a repository URL to the form that identifies the repository whatever the
// protocol used to reach it: host/path, lowercased, without scheme, credentials, port, query,
// trailing slash or ".git". https://user:tok@GitHub.com:443/Org/App.git, ssh://git@github.com/org/app,
// git@github.com:org/app.git and git://github.com/org/app.git all become github.com/org/app.
//
// Ports are dropped, not only default ones, because forges commonly serve SSH on another port
// than HTTPS (ssh://git@host:2222/…). Case is folded because forges treat owner and repository
// names case-insensitively. Both widen what matches; webhooks stay safe because every match must
// still prove the target's own secret.
func NormalizeURL(raw string) (string, error) {
	_, _, host, _, p, err := splitURL(raw)
	if err != nil {
		return "", err
	}
	host = strings.TrimRight(strings.ToLower(host), ".")
	switch {
	case host == "":
		return "", errors.New("url has no host")
	case strings.Contains(host, ":"):
		addr, err := netip.ParseAddr(host)
		if err != nil {
			return "", errors.New("url has an invalid host")
		}
		host = "[" + addr.String() + "]"
	case strings.Trim(host, "abcdefghijklmnopqrstuvwxyz0123456789.-_") != "":
		return "", errors.New("url has an invalid host")
	}
	// Hosts and paths compare case-insensitively (as on GitHub and GitLab), so the path is
	// lowered before its ".git" suffix is looked for: "/org/App.GIT" is "org/app".
	p = strings.ToLower(strings.TrimPrefix(path.Clean("/"+p), "/"))
	for {
		trimmed := strings.TrimSuffix(strings.TrimSuffix(p, "/"), ".git")
		if trimmed == p {
			break
		}
		// Cleaned again: "0/..git" loses ".git" to "0/.", which is "0".
		p = strings.TrimPrefix(path.Clean("/"+trimmed), "/")
	}
	if p == "" || p == "." {
		return "", errors.New("url has no repository path")
	}
	escaped := (&url.URL{Path: "/" + p}).EscapedPath()
	return strings.ToLower(host + escaped), nil
}

// RedactURL returns the URL without credentials, for messages: the whole userinfo of http(s)
// URLs (a username may be a token) and the password of ssh URLs. Text that does not parse is
// redacted by pattern.
func RedactURL(raw string) string {
	u, err := url.Parse(strings.TrimSpace(raw))
	switch {
	case err == nil && u.User == nil:
		return raw
	case err == nil:
		ssh := false
		switch strings.ToLower(u.Scheme) {
		case "ssh", "git+ssh", "ssh+git":
			u.User, ssh = url.User(u.User.Username()), true
		default:
			u.User = nil
		}
		out := u.String()
		// A path starting with "//" under an empty host reads back as an authority: what it
		// would show as credentials is not shown either.
		if v, err := url.Parse(out); err != nil || (v.User != nil && (!ssh || hasPassword(v.User))) {
			return redactedURL
		}
		return out
	case scpPattern.MatchString(strings.TrimSpace(raw)):
		return raw // user@host:path has no password
	}
	out := userinfoPattern.ReplaceAllString(raw, "$1")
	// What the pattern leaves may still read as userinfo (a quote stops the pattern, not
	// the parser): then nothing of it is shown.
	if v, err := url.Parse(out); err == nil && v.User != nil {
		return redactedURL
	}
	return out
}

// redactedURL stands for a URL that cannot be shown without what could be credentials.
const redactedURL = "[redacted URL]"

func hasPassword(u *url.Userinfo) bool {
	_, ok := u.Password()
	return ok
}

// parseUserinfo returns the username and password a URL carries, to be redacted from messages.
func parseUserinfo(raw string) ([]string, bool) {
	_, user, _, _, _, err := splitURL(raw)
	if err != nil || user == nil {
		return nil, false
	}
	out := []string{user.Username()}
	if p, ok := user.Password(); ok {
		out = append(out, p)
	}
	return out, true
}
