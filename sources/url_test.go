package sources

import (
	"testing"

	. "github.com/onsi/gomega"
)

func TestNormalizeURL(t *testing.T) {
	t.Parallel()
	const want = "github.com/org/app"
	for _, in := range []string{
		"https://github.com/org/app.git",
		"https://github.com/org/app",
		"https://github.com/org/app/",
		"https://GitHub.com/Org/App.git",
		"https://github.com:443/org/app.git",
		"http://github.com/org/app",
		"https://user:token@github.com/org/app.git",
		"https://x-access-token:ghs_abc@github.com/org/app.git?foo=bar#frag",
		"ssh://git@github.com/org/app.git",
		"ssh://git@github.com:22/org/app.git",
		"ssh://git@github.com:2222/org/app",
		"git@github.com:org/app.git",
		"git@github.com:org/app",
		"git://github.com/org/app.git",
		"  https://github.com/org/app.git  ",
		"https://github.com./org/app.git",
		"https://github.com//org//app.git",
	} {
		t.Run(in, func(t *testing.T) {
			g := NewWithT(t)
			got, err := NormalizeURL(in)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(got).To(Equal(want))
		})
	}

	for _, tc := range []struct{ in, want string }{
		{"https://gitlab.example.com/group/sub/proj.git", "gitlab.example.com/group/sub/proj"},
		{"ssh://git@[::1]:2222/org/app.git", "[::1]/org/app"},
		{"https://127.0.0.1:8443/org/app.git", "127.0.0.1/org/app"},
		{"https://host/org/my%20app.git", "host/org/my%20app"},
	} {
		t.Run(tc.in, func(t *testing.T) {
			g := NewWithT(t)
			got, err := NormalizeURL(tc.in)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(got).To(Equal(tc.want))
		})
	}

	for _, in := range []string{
		"", "github.com/org/app", "file:///srv/git/app.git", "https://github.com", "https://github.com/.git",
		"ftp://github.com/org/app", "https:///org/app", "C:\\repos\\app", "https://[::1/org/app",
	} {
		t.Run("invalid "+in, func(t *testing.T) {
			_, err := NormalizeURL(in)
			NewWithT(t).Expect(err).To(HaveOccurred())
		})
	}

	t.Run("different repositories differ", func(t *testing.T) {
		g := NewWithT(t)
		a, _ := NormalizeURL("https://github.com/org/app")
		b, _ := NormalizeURL("https://github.com/org/app2")
		c, _ := NormalizeURL("https://gitlab.com/org/app")
		g.Expect(a).NotTo(Equal(b))
		g.Expect(a).NotTo(Equal(c))
	})
}

func TestRedactURL(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ in, want string }{
		{"https://user:secret-pw@host/org/app.git", "https://host/org/app.git"},
		{"https://ghp_tokenvalue@host/org/app.git", "https://host/org/app.git"},
		{"http://host/org/app.git", "http://host/org/app.git"},
		{"ssh://git:secret-pw@host:2222/org/app.git", "ssh://git@host:2222/org/app.git"},
		{"ssh://git@host/org/app.git", "ssh://git@host/org/app.git"},
		{"git@host:org/app.git", "git@host:org/app.git"},
		{"https://user:secret-pw@host:bad-port/x", "https://host:bad-port/x"},
		// Not a URL url.Parse accepts (%zz), so redacted by pattern: all of the password goes,
		// '@' in it included.
		{"https://user:pass@word@host/%zz", "https://host/%zz"},
		{"A://%@:@", "A://"},
		// An empty host with a path starting with "//": the path would read back as userinfo.
		{"//@//:@", redactedURL},
		{"https://@//:secret@x", "https:////:secret@x"},
	} {
		t.Run(tc.in, func(t *testing.T) {
			NewWithT(t).Expect(RedactURL(tc.in)).To(Equal(tc.want))
		})
	}
}
