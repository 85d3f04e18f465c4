package sources

import (
	"context"
	"io/fs"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"golang.org/x/crypto/ssh/knownhosts"

	"github.com/converge-gitops/converge/internal/gittest"
)

// strictRepo is a repository whose server checks every object pushed to it (receive.fsckObjects),
// so that a malformed tree — entries out of git's order, say — is refused.
func strictRepo(t *testing.T, root, name string) *gittest.Repo {
	t.Helper()
	repo := gittest.NewRepo(t, root, name)
	gittest.Git(t, repo.Dir, "config", "receive.fsckObjects", "true")
	return repo
}

var testCommit = Commit{Message: "test: write", AuthorName: "converge test", AuthorEmail: "test@example.com",
	When: time.Date(2026, 3, 10, 8, 0, 0, 0, time.UTC)}

// TestBranchPushIntoEmptyRepository: the first push to an empty repository creates the branch
// with the files written, in a tree the server's fsck accepts.
func TestBranchPushIntoEmptyRepository(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	ctx := ctxTimeout(t, time.Minute)
	root := t.TempDir()
	srv := gittest.NewHTTPServer(t, root, gittest.HTTPOptions{Username: "bot", Password: "s3cret-pass"})
	repo := strictRepo(t, root, "fleet")
	src := Source{URL: srv.RepoURL(repo), Ref: Ref{Branch: "main"}, Auth: &Auth{Username: "bot", Password: "s3cret-pass"}}

	b, err := OpenBranch(ctx, src)
	g.Expect(err).NotTo(HaveOccurred())
	defer b.Close()
	_, err = b.ReadFile("a/b.yaml")
	g.Expect(err).To(MatchError(fs.ErrNotExist))
	files := map[string]string{"a/b.yaml": "b\n", "a-b": "file before the directory a in git's order\n",
		"a.txt": "a\n", "a/c/d.yaml": "d\n", "z": "z\n"}
	for name, content := range files {
		g.Expect(b.WriteFile(name, []byte(content))).To(Succeed())
	}
	got, err := b.ReadFile("a/c/d.yaml")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(got)).To(Equal("d\n"), "a file written reads back before the push")

	commit, err := b.Push(ctx, testCommit)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(repo.Head(t, "main")).To(Equal(commit))
	for name, content := range files {
		g.Expect(gittest.Git(t, repo.Dir, "show", "main:"+name)).To(Equal(strings.TrimSpace(content)))
	}
	g.Expect(gittest.Git(t, repo.Dir, "log", "--format=%an <%ae> %s", "main")).To(Equal("converge test <test@example.com> test: write"))
	gittest.Git(t, repo.Dir, "fsck", "--strict")

	_, err = b.Push(ctx, testCommit)
	g.Expect(err).To(HaveOccurred(), "a branch is pushed once")
}

// TestBranchPushKeepsTheRest: a push onto a branch keeps its other files and their modes, makes
// no commit when the files are there as written already, and a missing branch is refused in a
// repository that has others.
func TestBranchPushKeepsTheRest(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	ctx := ctxTimeout(t, time.Minute)
	f := newFixture(t)
	gittest.Git(t, f.repo.Dir, "config", "receive.fsckObjects", "true")
	first := f.repo.CommitChanges(t, "main",
		gittest.Change{Path: "README.md", Content: "fleet"},
		gittest.Change{Path: "deploy/run.sh", Content: "#!/bin/sh", Executable: true},
		gittest.Change{Path: "deploy/app.yaml", Content: "old"},
		gittest.Change{Path: "link", Content: "README.md", Symlink: true})

	b, err := OpenBranch(ctx, f.src)
	g.Expect(err).NotTo(HaveOccurred())
	defer b.Close()
	got, err := b.ReadFile("deploy/app.yaml")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(got)).To(Equal("old"))
	_, err = b.ReadFile("link")
	g.Expect(err).To(HaveOccurred())
	g.Expect(err).NotTo(MatchError(fs.ErrNotExist), "a symlink is no regular file")
	_, err = b.ReadFile("deploy")
	g.Expect(err).To(HaveOccurred())
	g.Expect(err).NotTo(MatchError(fs.ErrNotExist), "a directory is no regular file")

	g.Expect(b.WriteFile("deploy/app.yaml", []byte("new"))).To(Succeed())
	g.Expect(b.WriteFile("deploy/run.sh", []byte("#!/bin/sh\nexit 0"))).To(Succeed())
	commit, err := b.Push(ctx, testCommit)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(gittest.Git(t, f.repo.Dir, "rev-parse", commit+"^")).To(Equal(first))
	g.Expect(gittest.Git(t, f.repo.Dir, "show", "main:deploy/app.yaml")).To(Equal("new"))
	g.Expect(gittest.Git(t, f.repo.Dir, "show", "main:README.md")).To(Equal("fleet"))
	g.Expect(gittest.Git(t, f.repo.Dir, "ls-tree", "main", "deploy/run.sh", "link")).To(And(
		ContainSubstring("100755 blob"), ContainSubstring("120000 blob")))
	gittest.Git(t, f.repo.Dir, "fsck", "--strict")

	again, err := OpenBranch(ctx, f.src)
	g.Expect(err).NotTo(HaveOccurred())
	defer again.Close()
	g.Expect(again.WriteFile("deploy/app.yaml", []byte("new"))).To(Succeed())
	commit, err = again.Push(ctx, testCommit)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(commit).To(BeEmpty(), "nothing changed: no commit")
	g.Expect(f.srv.Stats().ReceivePack).To(BeEquivalentTo(1), "one push only")

	_, err = OpenBranch(ctx, Source{URL: f.src.URL, Ref: Ref{Branch: "other"}})
	g.Expect(err).To(MatchError(ErrRefNotFound))
	g.Expect(err).To(MatchError(ContainSubstring(`branch "other" does not exist`)))
}

// TestBranchPushRefusals: a branch that moved since it was read is not overwritten; a file is
// not replaced by a directory nor a symlink by a file; unclean paths and refs other than a
// branch are refused.
func TestBranchPushRefusals(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	ctx := ctxTimeout(t, time.Minute)
	f := newFixture(t)
	f.repo.CommitChanges(t, "main", gittest.Change{Path: "file", Content: "x"},
		gittest.Change{Path: "link", Content: "file", Symlink: true})

	open := func() *Branch {
		b, err := OpenBranch(ctx, f.src)
		g.Expect(err).NotTo(HaveOccurred())
		t.Cleanup(b.Close)
		return b
	}
	b := open()
	moved := f.repo.Commit(t, "main", map[string]string{"other": "y"})
	g.Expect(b.WriteFile("new", []byte("z"))).To(Succeed())
	_, err := b.Push(ctx, testCommit)
	g.Expect(err).To(MatchError(ContainSubstring(`branch "main" moved since it was read`)))
	g.Expect(f.repo.Head(t, "main")).To(Equal(moved))

	for name, content := range map[string]string{"file/below": "a file is no directory", "link": "a symlink"} {
		b := open()
		g.Expect(b.WriteFile(name, []byte(content))).To(Succeed())
		_, err := b.Push(ctx, testCommit)
		g.Expect(err).To(MatchError(ErrInvalidSource), name)
		g.Expect(f.repo.Head(t, "main")).To(Equal(moved))
	}
	for _, name := range []string{"", "/abs", "a//b", "a/../b", "./a", ".git/config", "a/.GIT/x", "dir/", `a\b`} {
		g.Expect(b.WriteFile(name, []byte("x"))).To(MatchError(fs.ErrInvalid), name)
	}
	_, err = OpenBranch(ctx, Source{URL: f.src.URL, Ref: Ref{Tag: "v1"}})
	g.Expect(err).To(MatchError(ErrInvalidSource))
}

// TestBranchPushOverSSH: writing goes through the daemon's SSH host key policy: a wrong
// known_hosts is refused before anything is sent; the right one pushes.
func TestBranchPushOverSSH(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	ctx := ctxTimeout(t, time.Minute)
	root := t.TempDir()
	key, pub := gittest.NewSSHKey(t, "")
	srv := gittest.NewSSHServer(t, root, pub)
	repo := strictRepo(t, root, "fleet")
	_, otherKey := gittest.NewSSHKey(t, "")

	wrong, err := AuthFromSecret(map[string][]byte{SecretIdentity: key,
		SecretKnownHosts: []byte(knownhosts.Line([]string{srv.Addr}, otherKey) + "\n")}, srv.RepoURL(repo))
	g.Expect(err).NotTo(HaveOccurred())
	_, err = OpenBranch(ctx, Source{URL: srv.RepoURL(repo), Ref: Ref{Branch: "main"}, Auth: wrong})
	g.Expect(err).To(MatchError(ErrHostKeyMismatch))
	g.Expect(srv.Stats().ReceivePack).To(BeZero())

	right, err := AuthFromSecret(map[string][]byte{SecretIdentity: key, SecretKnownHosts: srv.KnownHosts()}, srv.RepoURL(repo))
	g.Expect(err).NotTo(HaveOccurred())
	b, err := OpenBranch(ctx, Source{URL: srv.RepoURL(repo), Ref: Ref{Branch: "main"}, Auth: right})
	g.Expect(err).NotTo(HaveOccurred())
	defer b.Close()
	g.Expect(b.WriteFile("clusters/prod/app.yaml", []byte("kind: ConfigMap\n"))).To(Succeed())
	commit, err := b.Push(context.WithoutCancel(ctx), testCommit)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(repo.Head(t, "main")).To(Equal(commit))
	g.Expect(srv.Stats().ReceivePack).To(BeEquivalentTo(1))
}
