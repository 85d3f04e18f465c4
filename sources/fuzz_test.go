package sources

import (
	"net/url"
	"strings"
	"testing"
)

func FuzzNormalizeURL(f *testing.F) {
	for _, seed := range []string{
		"https://github.com/org/app.git",
		"https://user:tok@GitHub.com:443/Org/App.git/",
		"ssh://git@github.com:2222/org/app",
		"git@github.com:org/app.git",
		"git://[::1]/org/app",
		"https://host/org/my%20app.git?x=1#y",
		"https://h/..//a/./b.git.git",
		"not a url",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		n, err := NormalizeURL(raw)
		if err == nil {
			if n == "" || strings.HasSuffix(n, ".git") || strings.HasSuffix(n, "/") {
				t.Fatalf("NormalizeURL(%q) = %q", raw, n)
			}
			// The normal form is a fixed point, whatever the protocol put in front of it.
			for _, prefix := range []string{"https://", "ssh://git@"} {
				again, err := NormalizeURL(prefix + n)
				if err != nil || again != n {
					t.Fatalf("NormalizeURL(%q) = %q, %v; want %q", prefix+n, again, err, n)
				}
			}
		}
		red := RedactURL(raw)
		if u, err := url.Parse(red); err == nil && u.User != nil {
			if _, ok := u.User.Password(); ok {
				t.Fatalf("RedactURL(%q) = %q keeps a password", raw, red)
			}
		}
	})
}

func FuzzParseRevision(f *testing.F) {
	for _, seed := range []string{
		"main@sha1:0123456789abcdef0123456789abcdef01234567",
		"refs/pull/7/head@sha1:0123456789abcdef0123456789abcdef01234567",
		"sha1:0123456789abcdef0123456789abcdef01234567",
		"v1@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
		"a@sha@sha1:0123456789abcdef0123456789abcdef01234567",
		"@sha1:",
		"",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, s string) {
		rev, err := ParseRevision(s)
		if err != nil {
			return
		}
		if rev.String() != s {
			t.Fatalf("ParseRevision(%q).String() = %q", s, rev.String())
		}
		again, err := ParseRevision(rev.String())
		if err != nil || again != rev {
			t.Fatalf("round trip of %q: %+v, %v", s, again, err)
		}
	})
}

func FuzzPayloadRepositories(f *testing.F) {
	for _, seed := range []string{githubPush, gitlabPush, giteaPush, genericPush,
		`{"repository":null}`, `{"repository":{"links":{"clone":[{"href":"https://bitbucket.org/org/app.git"},null]}}}`,
		`[]`, `{"repository":"git@host:org/app.git"}`, `{"project":{"git_http_url":7}}`, `{`, `{}{}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		repos, err := PayloadRepositories(body)
		if err != nil {
			return
		}
		if len(repos) == 0 || len(repos) > maxPayloadURLs {
			t.Fatalf("%d repositories", len(repos))
		}
		for _, r := range repos {
			if again, err := NormalizeURL("https://" + r); err != nil || again != r {
				t.Fatalf("repository %q is not normalized: %q, %v", r, again, err)
			}
		}
	})
}
