package sources

import (
	"testing"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/protocol/packp"
	"github.com/go-git/go-git/v5/plumbing/protocol/packp/capability"
	. "github.com/onsi/gomega"

	"github.com/converge-gitops/converge/internal/gittest"
)

func TestResolveRef(t *testing.T) {
	t.Parallel()
	const (
		cMain  = "1111111111111111111111111111111111111111"
		cDev   = "2222222222222222222222222222222222222222"
		cV1    = "3333333333333333333333333333333333333333"
		cV12   = "4444444444444444444444444444444444444444"
		tagV12 = "5555555555555555555555555555555555555555" // annotated tag object
		cV2    = "6666666666666666666666666666666666666666"
		cRC    = "7777777777777777777777777777777777777777"
		cPR    = "8888888888888888888888888888888888888888"
	)
	ar := packp.NewAdvRefs()
	for name, h := range map[string]string{
		"refs/heads/main":         cMain,
		"refs/heads/dev":          cDev,
		"refs/tags/v1.0.0":        cV1,
		"refs/tags/v1.2.0":        tagV12,
		"refs/tags/v2.0.0":        cV2,
		"refs/tags/v1.3.0-rc.1":   cRC,
		"refs/tags/not-a-version": cDev,
		"refs/pull/7/head":        cPR,
	} {
		ar.References[name] = plumbing.NewHash(h)
	}
	ar.Peeled["refs/tags/v1.2.0"] = plumbing.NewHash(cV12)
	head := plumbing.NewHash(cMain)
	ar.Head = &head
	g := NewWithT(t)
	g.Expect(ar.Capabilities.Add(capability.SymRef, "HEAD:refs/heads/main")).To(Succeed())

	for _, tc := range []struct {
		name    string
		ref     Ref
		want    Revision
		wantErr error
	}{
		{name: "branch", ref: Ref{Branch: "dev"}, want: Revision{Ref: "dev", Commit: cDev}},
		{name: "lightweight tag", ref: Ref{Tag: "v1.0.0"}, want: Revision{Ref: "v1.0.0", Commit: cV1}},
		{name: "annotated tag is peeled", ref: Ref{Tag: "v1.2.0"}, want: Revision{Ref: "v1.2.0", Commit: cV12}},
		{name: "semver picks the highest match", ref: Ref{SemVer: ">=1.0.0 <2.0.0"}, want: Revision{Ref: "v1.2.0", Commit: cV12}},
		{name: "semver caret", ref: Ref{SemVer: "^1"}, want: Revision{Ref: "v1.2.0", Commit: cV12}},
		{name: "semver any", ref: Ref{SemVer: "*"}, want: Revision{Ref: "v2.0.0", Commit: cV2}},
		{name: "semver prerelease when asked", ref: Ref{SemVer: ">=1.3.0-0 <2.0.0"}, want: Revision{Ref: "v1.3.0-rc.1", Commit: cRC}},
		{name: "semver exact", ref: Ref{SemVer: "1.0.0"}, want: Revision{Ref: "v1.0.0", Commit: cV1}},
		{name: "named ref", ref: Ref{Name: "refs/pull/7/head"}, want: Revision{Ref: "refs/pull/7/head", Commit: cPR}},
		{name: "named tag ref is peeled", ref: Ref{Name: "refs/tags/v1.2.0"}, want: Revision{Ref: "refs/tags/v1.2.0", Commit: cV12}},
		{name: "commit", ref: Ref{Commit: cDev}, want: Revision{Commit: cDev}},
		{name: "default branch", ref: Ref{}, want: Revision{Ref: "main", Commit: cMain}},
		{name: "missing branch", ref: Ref{Branch: "gone"}, wantErr: ErrRefNotFound},
		{name: "branch is not a tag", ref: Ref{Branch: "v1.0.0"}, wantErr: ErrRefNotFound},
		{name: "missing tag", ref: Ref{Tag: "v9"}, wantErr: ErrRefNotFound},
		{name: "semver without match", ref: Ref{SemVer: ">=3"}, wantErr: ErrRefNotFound},
		{name: "bad semver", ref: Ref{SemVer: ">=>1"}, wantErr: ErrInvalidSource},
		{name: "missing named ref", ref: Ref{Name: "refs/pull/8/head"}, wantErr: ErrRefNotFound},
		{name: "sha256 commit", ref: Ref{Commit: sha2A}, wantErr: ErrInvalidSource},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			got, err := resolveRef(ar, tc.ref)
			if tc.wantErr != nil {
				g.Expect(err).To(MatchError(tc.wantErr))
				return
			}
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(got).To(Equal(tc.want))
		})
	}
}

// TestFollowBranch follows a branch through new commits, a force-push and its deletion.
func TestFollowBranch(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	f := newFixture(t)
	ctx := ctxTimeout(t, 30*time.Second)
	c1 := f.repo.Commit(t, "main", map[string]string{"app.yaml": "v: 1\n"})
	f.repo.Commit(t, "other", map[string]string{"other.yaml": "o: 1\n"})

	rev, err := Resolve(ctx, f.src)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(rev.String()).To(Equal("main@sha1:" + c1))

	// A new commit is detected and checked out.
	c2 := f.repo.Commit(t, "main", map[string]string{"app.yaml": "v: 2\n", "new.yaml": "n: 1\n"})
	rev, err = Resolve(ctx, f.src)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(rev).To(Equal(Revision{Ref: "main", Commit: c2}))
	dir, err := f.cache.Checkout(ctx, f.src, rev)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(readTree(t, dir)).To(Equal(map[string]string{"app.yaml": "v: 2\n", "new.yaml": "n: 1\n"}))

	// A force-push replacing c2 with a sibling is followed.
	c3 := f.repo.CommitOnto(t, "main", c1, gittest.Change{Path: "app.yaml", Content: "v: 3\n"})
	rev, err = Resolve(ctx, f.src)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(rev.Commit).To(Equal(c3))
	dir3, err := f.cache.Checkout(ctx, f.src, rev)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(readTree(t, dir3)).To(Equal(map[string]string{"app.yaml": "v: 3\n"}))

	// The branch is deleted: an error naming it, and the cache is left as it was.
	before := readTree(t, f.cache.opts.Dir)
	f.repo.DeleteBranch(t, "main")
	_, err = Resolve(ctx, f.src)
	g.Expect(err).To(MatchError(ErrRefNotFound))
	g.Expect(err.Error()).To(ContainSubstring(`branch "main" does not exist`))
	g.Expect(readTree(t, f.cache.opts.Dir)).To(Equal(before))
	g.Expect(readTree(t, dir3)).To(Equal(map[string]string{"app.yaml": "v: 3\n"}))
}

func TestResolveTagsAndRefs(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	f := newFixture(t)
	ctx := ctxTimeout(t, 30*time.Second)
	c1 := f.repo.Commit(t, "main", map[string]string{"v": "1"})
	c2 := f.repo.Commit(t, "main", map[string]string{"v": "2"})
	c3 := f.repo.Commit(t, "main", map[string]string{"v": "3"})
	f.repo.Tag(t, "v1.0.0", c1)
	tagObj := f.repo.AnnotatedTag(t, "v1.2.0", c2)
	g.Expect(tagObj).NotTo(Equal(c2))
	f.repo.Tag(t, "v2.0.0", c3)
	f.repo.SetRef(t, "refs/pull/7/head", c1)

	resolve := func(ref Ref) Revision {
		rev, err := Resolve(ctx, Source{URL: f.src.URL, Ref: ref})
		g.Expect(err).NotTo(HaveOccurred())
		return rev
	}
	g.Expect(resolve(Ref{Tag: "v1.2.0"})).To(Equal(Revision{Ref: "v1.2.0", Commit: c2}), "annotated tag peeled to its commit")
	g.Expect(resolve(Ref{SemVer: ">=1.0.0 <2.0.0"})).To(Equal(Revision{Ref: "v1.2.0", Commit: c2}))
	g.Expect(resolve(Ref{Name: "refs/pull/7/head"}).String()).To(Equal("refs/pull/7/head@sha1:" + c1))
	g.Expect(resolve(Ref{Commit: c2}).String()).To(Equal("sha1:" + c2))
	g.Expect(resolve(Ref{})).To(Equal(Revision{Ref: "main", Commit: c3}), "no ref: the default branch")

	// A newly pushed higher tag wins.
	c4 := f.repo.Commit(t, "main", map[string]string{"v": "4"})
	f.repo.AnnotatedTag(t, "v1.10.0", c4)
	g.Expect(resolve(Ref{SemVer: ">=1.0.0 <2.0.0"})).To(Equal(Revision{Ref: "v1.10.0", Commit: c4}))
}
