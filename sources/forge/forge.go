package forge

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"
)

// Kind is a forge's API dialect.
type Kind string

// The forges a Client speaks to.
const (
	GitHub    Kind = "github"
	GitLab    Kind = "gitlab"
	Gitea     Kind = "gitea"     // Gitea and Forgejo
	Bitbucket Kind = "bitbucket" // Bitbucket Cloud
)

// PublicBase is the API base of the public service of kind: https://api.github.com,
// https://gitlab.com, https://gitea.com, https://api.bitbucket.org; "" for an unknown
// kind.
func PublicBase(k Kind) string {
	switch k {
	case GitHub:
		return "https://api.github.com"
	case GitLab:
		return "https://gitlab.com"
	case Gitea:
		return "https://gitea.com"
	case Bitbucket:
		return "https://api.bitbucket.org"
	}
	return ""
}

const (
	// defaultTimeout bounds each request of a Client made without an HTTP client.
	defaultTimeout = 30 * time.Second
	// maxRedirects bounds the redirects one request follows.
	maxRedirects = 10
	// maxRepository bounds the repository path given to New.
	maxRepository = 512
)

// Client talks to one repository of one forge. It is safe for concurrent use.
type Client struct {
	kind Kind
	// root is the API base without a trailing slash, its path escaped.
	root string
	// origin is the base's scheme, host and port, where every request goes.
	origin string
	// repo is the repository's path, its segments checked.
	repo []string
	// cred is behind a pointer so that printing a Client shows no token.
	cred *credential
	hc   *http.Client

	mu   sync.Mutex
	self string // the token's own user, once asked
}

// credential is the token and the header carrying it.
type credential struct {
	token, header, value string
}

// New returns a client of repo ("owner/repo"; GitLab: "group/subgroup/project";
// Bitbucket: "workspace/repo") on the forge whose API base is base ("" is
// PublicBase(kind)): an http or https URL without credentials, query or fragment. token
// may be "" (anonymous). hc is the HTTP client to use (nil: one with a 30 s timeout); New
// uses a copy of it whose redirects stay on base's origin and lose the token.
func New(kind Kind, base, repo, token string, hc *http.Client) (*Client, error) {
	if PublicBase(kind) == "" {
		return nil, fmt.Errorf("unknown forge %q: want github, gitlab, gitea or bitbucket", kind)
	}
	if base == "" {
		base = PublicBase(kind)
	}
	u, err := parseBase(base)
	if err != nil {
		return nil, err
	}
	segs, err := parseRepository(kind, repo)
	if err != nil {
		return nil, err
	}
	cred, err := newCredential(kind, token)
	if err != nil {
		return nil, err
	}
	c := &Client{kind: kind, root: u.Scheme + "://" + u.Host + u.EscapedPath(), origin: origin(u),
		repo: segs, cred: cred}
	c.hc = c.guarded(hc)
	return c, nil
}

// parseBase checks an API base and returns it without a trailing slash. Its errors do
// not quote it: it might hold credentials.
func parseBase(base string) (*url.URL, error) {
	u, err := url.Parse(base)
	if err != nil {
		return nil, errors.New("the forge's address is not a URL")
	}
	u.Scheme = strings.ToLower(u.Scheme)
	switch {
	case u.Scheme != "http" && u.Scheme != "https":
		return nil, errors.New("the forge's address must be an http:// or https:// URL")
	case u.Opaque != "" || u.Host == "" || u.Hostname() == "":
		return nil, errors.New("the forge's address has no host")
	case u.User != nil:
		return nil, errors.New("the forge's address may not hold credentials: give a token")
	case u.RawQuery != "" || u.ForceQuery || u.Fragment != "" || u.RawFragment != "":
		return nil, errors.New("the forge's address may not have a query or a fragment")
	}
	u.Path = strings.TrimRight(u.Path, "/")
	u.RawPath = strings.TrimRight(u.RawPath, "/")
	return u, nil
}

// parseRepository splits repo into its segments: two (GitLab: two or more) of letters,
// digits, '.', '_' and '-', none "." or "..".
func parseRepository(kind Kind, repo string) ([]string, error) {
	if len(repo) > maxRepository {
		return nil, fmt.Errorf("the repository's path is longer than %d bytes", maxRepository)
	}
	segs := strings.Split(repo, "/")
	if len(segs) < 2 || (kind != GitLab && len(segs) != 2) {
		if kind == GitLab {
			return nil, fmt.Errorf("repository %q: want group/project", repo)
		}
		return nil, fmt.Errorf("repository %q: want owner/repo", repo)
	}
	for _, s := range segs {
		if !validSegment(s) {
			return nil, fmt.Errorf("repository %q: %q is not a name of the forge", repo, s)
		}
	}
	return segs, nil
}

// validSegment is a name of letters, digits, '.', '_' and '-', neither "." nor "..".
func validSegment(s string) bool {
	if s == "" || s == "." || s == ".." {
		return false
	}
	for _, r := range s {
		ok := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' ||
			r == '.' || r == '_' || r == '-'
		if !ok {
			return false
		}
	}
	return true
}

// newCredential is the header carrying token to kind; nil for no token. Its errors do not
// quote the token.
func newCredential(kind Kind, token string) (*credential, error) {
	if token == "" {
		return nil, nil
	}
	for _, r := range token {
		if r <= ' ' || r == 0x7f {
			return nil, errors.New("the token holds a space or a control character")
		}
	}
	switch kind {
	case GitLab:
		return &credential{token: token, header: "PRIVATE-TOKEN", value: token}, nil
	case Gitea:
		return &credential{token: token, header: "Authorization", value: "token " + token}, nil
	default:
		return &credential{token: token, header: "Authorization", value: "Bearer " + token}, nil
	}
}

// origin is u's scheme, host and port (the scheme's when u names none), lower case.
func origin(u *url.URL) string {
	scheme := strings.ToLower(u.Scheme)
	port := u.Port()
	if port == "" {
		port = map[string]string{"http": "80", "https": "443"}[scheme]
	}
	return scheme + "://" + net.JoinHostPort(strings.ToLower(u.Hostname()), port)
}

// guarded is a copy of hc (nil: a client with defaultTimeout) that follows a redirect only
// on the client's origin, and without the token.
func (c *Client) guarded(hc *http.Client) *http.Client {
	if hc == nil {
		hc = &http.Client{Timeout: defaultTimeout}
	}
	g := *hc
	next := hc.CheckRedirect
	g.CheckRedirect = func(req *http.Request, via []*http.Request) error {
		if len(via) >= maxRedirects {
			return fmt.Errorf("stopped after %d redirects", maxRedirects)
		}
		if origin(req.URL) != c.origin {
			return fmt.Errorf("refusing a redirect to %s: not the forge's API origin %s", cut(req.URL.Scheme+"://"+req.URL.Host, maxMessage), c.origin)
		}
		req.Header.Del("Authorization")
		req.Header.Del("PRIVATE-TOKEN")
		if next != nil {
			return next(req, via)
		}
		return nil
	}
	return &g
}

// scrub removes the token from err's message: an error holding it loses its chain.
func (c *Client) scrub(err error) error {
	if err == nil || c.cred == nil || !strings.Contains(err.Error(), c.cred.token) {
		return err
	}
	return errors.New(c.redact(err.Error()))
}

// redact replaces the token in s.
func (c *Client) redact(s string) string {
	if c.cred == nil {
		return s
	}
	return strings.ReplaceAll(s, c.cred.token, "[redacted]")
}

// repoPath is the escaped API path of the repository.
func (c *Client) repoPath() string {
	switch c.kind {
	case GitLab:
		return "/api/v4/projects/" + url.PathEscape(strings.Join(c.repo, "/"))
	case Gitea:
		return "/api/v1/repos/" + c.repo[0] + "/" + c.repo[1]
	case Bitbucket:
		return "/2.0/repositories/" + c.repo[0] + "/" + c.repo[1]
	default:
		return "/repos/" + c.repo[0] + "/" + c.repo[1]
	}
}

// endpoint is the URL of the escaped API path with query q.
func (c *Client) endpoint(path string, q url.Values) string {
	if len(q) == 0 {
		return c.root + path
	}
	return c.root + path + "?" + q.Encode()
}
