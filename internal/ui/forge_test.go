package ui

import (
	"testing"

	. "github.com/onsi/gomega"
)

func TestCommitURL(t *testing.T) {
	const sha = "0123456789abcdef0123456789abcdef01234567"
	for _, tc := range []struct{ source, want string }{
		{"https://github.com/acme/shop.git", "https://github.com/acme/shop/commit/" + sha},
		{"https://user:secret@github.com/acme/shop", "https://github.com/acme/shop/commit/" + sha},
		{"git@github.com:acme/shop.git", "https://github.com/acme/shop/commit/" + sha},
		{"ssh://git@gitlab.com/group/sub/shop.git", "https://gitlab.com/group/sub/shop/-/commit/" + sha},
		{"https://codeberg.org/acme/shop", "https://codeberg.org/acme/shop/commit/" + sha},
		{"https://bitbucket.org/acme/shop.git", "https://bitbucket.org/acme/shop/commits/" + sha},
		{"https://git.example.com/acme/shop.git", ""},
		{"http://127.0.0.1:3000/repo.git", ""},
	} {
		t.Run(tc.source, func(t *testing.T) {
			NewWithT(t).Expect(commitURL(tc.source, sha)).To(Equal(tc.want))
		})
	}
}
