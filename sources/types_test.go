package sources

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	. "github.com/onsi/gomega"
)

const (
	sha1A = "0123456789abcdef0123456789abcdef01234567"
	sha1B = "89abcdef0123456789abcdef0123456789abcdef"
	sha2A = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
)

func TestRevisionString(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		rev  Revision
		want string
	}{
		{"branch", Revision{Ref: "main", Commit: sha1A}, "main@sha1:" + sha1A},
		{"tag", Revision{Ref: "v1.2.0", Commit: sha1A}, "v1.2.0@sha1:" + sha1A},
		{"named ref", Revision{Ref: "refs/pull/7/head", Commit: sha1A}, "refs/pull/7/head@sha1:" + sha1A},
		{"bare commit", Revision{Commit: sha1A}, "sha1:" + sha1A},
		{"sha256", Revision{Ref: "main", Commit: sha2A}, "main@sha256:" + sha2A},
		{"zero", Revision{}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			g.Expect(tc.rev.String()).To(Equal(tc.want))
			if tc.want != "" {
				back, err := ParseRevision(tc.want)
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(back).To(Equal(tc.rev))
			}
		})
	}
}

func TestParseRevision(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in      string
		want    Revision
		wantErr bool
	}{
		{in: "main@sha1:" + sha1A, want: Revision{Ref: "main", Commit: sha1A}},
		{in: "feature/x@sha1:" + sha1A, want: Revision{Ref: "feature/x", Commit: sha1A}},
		{in: "weird@sha@sha1:" + sha1A, want: Revision{Ref: "weird@sha", Commit: sha1A}},
		{in: "sha1:" + sha1A, want: Revision{Commit: sha1A}},
		{in: "sha256:" + sha2A, want: Revision{Commit: sha2A}},
		{in: "", wantErr: true},
		{in: "main", wantErr: true},
		{in: "main@" + sha1A, wantErr: true},
		{in: "@sha1:" + sha1A, wantErr: true},
		{in: "main@sha1:" + strings.ToUpper(sha1A), wantErr: true},
		{in: "main@sha1:" + sha1A[:39], wantErr: true},
		{in: "main@sha256:" + sha1A, wantErr: true},
		{in: "main@md5:" + sha1A, wantErr: true},
		{in: "ma in@sha1:" + sha1A, wantErr: true},
	} {
		t.Run(tc.in, func(t *testing.T) {
			g := NewWithT(t)
			got, err := ParseRevision(tc.in)
			if tc.wantErr {
				g.Expect(err).To(HaveOccurred())
				return
			}
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(got).To(Equal(tc.want))
		})
	}
}

func TestRefValidate(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		ref     Ref
		wantErr bool
	}{
		{"none means default branch", Ref{}, false},
		{"branch", Ref{Branch: "main"}, false},
		{"commit", Ref{Commit: sha1A}, false},
		{"named", Ref{Name: "refs/pull/7/head"}, false},
		{"two kinds", Ref{Branch: "main", Tag: "v1"}, true},
		{"short commit", Ref{Commit: "abc123"}, true},
		{"uppercase commit", Ref{Commit: strings.ToUpper(sha1A)}, true},
		{"unqualified name", Ref{Name: "pull/7/head"}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			err := tc.ref.Validate()
			if tc.wantErr {
				g.Expect(err).To(MatchError(ErrInvalidSource))
			} else {
				g.Expect(err).NotTo(HaveOccurred())
			}
		})
	}
}

func TestSourceKey(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	base := Source{URL: "https://git.example.com/org/app.git", Ref: Ref{Branch: "main"}, Auth: &Auth{Username: "u", Password: "p"}}
	same := Source{URL: base.URL, Ref: base.Ref, Auth: &Auth{Username: "u", Password: "p"}}
	g.Expect(same.Key()).To(Equal(base.Key()), "equal credentials in another Auth value share the poller")

	for name, other := range map[string]Source{
		"other url":         {URL: "https://git.example.com/org/other.git", Ref: base.Ref, Auth: base.Auth},
		"other ref":         {URL: base.URL, Ref: Ref{Tag: "main"}, Auth: base.Auth},
		"other credentials": {URL: base.URL, Ref: base.Ref, Auth: &Auth{Username: "u", Password: "q"}},
		"no credentials":    {URL: base.URL, Ref: base.Ref},
	} {
		g.Expect(other.Key()).NotTo(Equal(base.Key()), name)
	}
}

func TestAuthNeverPrinted(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	a := &Auth{Username: "alice", Password: "hunter2-secret", BearerToken: "tok-secret-123", Identity: []byte("PRIVATE KEY BYTES")}
	src := Source{URL: "https://alice:url-secret-9@git.example.com/org/app.git", Auth: a}
	for _, s := range []string{fmt.Sprint(a), fmt.Sprintf("%v", src), fmt.Sprintf("%+v", a), fmt.Sprintf("%#v", a), src.String()} {
		g.Expect(s).NotTo(ContainSubstring("hunter2-secret"))
		g.Expect(s).NotTo(ContainSubstring("tok-secret-123"))
		g.Expect(s).NotTo(ContainSubstring("PRIVATE KEY"))
	}
	g.Expect(src.String()).NotTo(ContainSubstring("url-secret-9"))
}

func TestLimitError(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	err := fmt.Errorf("wrapped: %w", &LimitError{Limit: "MaxFiles", Max: 3, Commit: sha1A})
	g.Expect(errors.Is(err, ErrLimitExceeded)).To(BeTrue())
	g.Expect(err.Error()).To(ContainSubstring("MaxFiles"))
}
