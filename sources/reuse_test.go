package sources

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	. "github.com/onsi/gomega"

	"github.com/converge-gitops/converge/internal/gittest"
)

// sameFile reports whether a and b are one inode (one is a hard link of the other).
func sameFile(t *testing.T, a, b string) bool {
	t.Helper()
	fa, err := os.Lstat(a)
	if err != nil {
		t.Fatal(err)
	}
	fb, err := os.Lstat(b)
	if err != nil {
		t.Fatal(err)
	}
	return os.SameFile(fa, fb)
}

// TestCheckoutSharesUnchangedFiles: the checkout of a commit that changes one file links
// the others from the checkout before it, and holds exactly its own tree.
func TestCheckoutSharesUnchangedFiles(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	f := newFixture(t)
	ctx := ctxTimeout(t, 30*time.Second)
	c1 := f.repo.CommitChanges(t, "main",
		gittest.Change{Path: "deploy/app.yaml", Content: "kind: Deployment\n"},
		gittest.Change{Path: "deploy/cm.yaml", Content: "kind: ConfigMap\n"},
		gittest.Change{Path: "hack/run.sh", Content: "#!/bin/sh\n", Executable: true},
		gittest.Change{Path: "deploy/base", Content: "../base", Symlink: true},
		gittest.Change{Path: "mode.sh", Content: "#!/bin/sh\n"},
	)
	dir1, err := f.cache.Checkout(ctx, f.src, Revision{Ref: "main", Commit: c1})
	g.Expect(err).NotTo(HaveOccurred())
	c2 := f.repo.CommitChanges(t, "main",
		gittest.Change{Path: "deploy/cm.yaml", Content: "kind: ConfigMap\ndata: {}\n"},
		gittest.Change{Path: "deploy/new.yaml", Content: "kind: Service\n"},
		gittest.Change{Path: "mode.sh", Content: "#!/bin/sh\n", Executable: true},
	)
	dir2, err := f.cache.Checkout(ctx, f.src, Revision{Ref: "main", Commit: c2})
	g.Expect(err).NotTo(HaveOccurred())

	g.Expect(readTree(t, dir2)).To(Equal(map[string]string{
		"deploy/app.yaml": "kind: Deployment\n",
		"deploy/cm.yaml":  "kind: ConfigMap\ndata: {}\n",
		"deploy/new.yaml": "kind: Service\n",
		"deploy/base":     "-> ../base",
		"hack/run.sh":     "#!/bin/sh\n",
		"mode.sh":         "#!/bin/sh\n",
	}))
	g.Expect(readTree(t, dir1)).To(HaveKeyWithValue("deploy/cm.yaml", "kind: ConfigMap\n"), "the earlier checkout is untouched")
	g.Expect(sameFile(t, filepath.Join(dir1, "deploy/app.yaml"), filepath.Join(dir2, "deploy/app.yaml"))).To(BeTrue())
	g.Expect(sameFile(t, filepath.Join(dir1, "hack/run.sh"), filepath.Join(dir2, "hack/run.sh"))).To(BeTrue())
	g.Expect(sameFile(t, filepath.Join(dir1, "deploy/cm.yaml"), filepath.Join(dir2, "deploy/cm.yaml"))).To(BeFalse())
	g.Expect(sameFile(t, filepath.Join(dir1, "mode.sh"), filepath.Join(dir2, "mode.sh"))).To(BeFalse(),
		"the same content with other permissions is a file of its own")
	for path, mode := range map[string]os.FileMode{"mode.sh": 0o555, "hack/run.sh": 0o555, "deploy/app.yaml": 0o444} {
		fi, err := os.Lstat(filepath.Join(dir2, path))
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(fi.Mode()).To(Equal(mode), path)
	}

	// A cache opened anew on the same directory (a restarted daemon) shares too.
	again, err := NewCache(CacheOptions{Dir: f.cache.opts.Dir})
	g.Expect(err).NotTo(HaveOccurred())
	c3 := f.repo.Commit(t, "main", map[string]string{"deploy/new.yaml": "kind: Service\nspec: {}\n"})
	dir3, err := again.Checkout(ctx, f.src, Revision{Ref: "main", Commit: c3})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(sameFile(t, filepath.Join(dir1, "deploy/app.yaml"), filepath.Join(dir3, "deploy/app.yaml"))).To(BeTrue())
	g.Expect(readTree(t, dir3)).To(HaveKeyWithValue("deploy/new.yaml", "kind: Service\nspec: {}\n"))
}

// TestSharingKeepsTheCaps: files linked from an earlier checkout count against the caps of
// the new one like files written.
func TestSharingKeepsTheCaps(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	f := newFixture(t)
	f.cache = newTestCache(t, CacheOptions{MaxFiles: 3, MaxBytes: 1000})
	ctx := ctxTimeout(t, 30*time.Second)
	c1 := f.repo.Commit(t, "main", map[string]string{"a": strings.Repeat("x", 400), "b": strings.Repeat("y", 400), "c": "1"})
	_, err := f.cache.Checkout(ctx, f.src, Revision{Ref: "main", Commit: c1})
	g.Expect(err).NotTo(HaveOccurred())

	c2 := f.repo.Commit(t, "main", map[string]string{"d": "2"})
	_, err = f.cache.Checkout(ctx, f.src, Revision{Ref: "main", Commit: c2})
	g.Expect(err).To(MatchError(ErrLimitExceeded))
	g.Expect(err.Error()).To(ContainSubstring("MaxFiles"))

	c3 := f.repo.CommitChanges(t, "main", gittest.Change{Path: "d", Delete: true}, gittest.Change{Path: "c", Content: strings.Repeat("z", 300)})
	_, err = f.cache.Checkout(ctx, f.src, Revision{Ref: "main", Commit: c3})
	g.Expect(err).To(MatchError(ErrLimitExceeded))
	g.Expect(err.Error()).To(ContainSubstring("MaxBytes"))
	g.Expect(listDir(f.cache.tmp)).To(BeEmpty())
}

// TestSharingNeverLinksWhatTheListDoesNotVouchFor: a list of files that is damaged, or says
// a path holds a regular file where the checkout has a symlink, shares nothing wrong: the new
// checkout holds its own tree, a regular file where its commit has one.
func TestSharingNeverLinksWhatTheListDoesNotVouchFor(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		list func(want fileEntry) string
	}{
		{"symlink listed as a file", func(want fileEntry) string {
			return fmt.Sprintf("444 %d %s cfg.yaml\x00", want.size, want.hash)
		}},
		{"truncated", func(want fileEntry) string {
			return fmt.Sprintf("444 %d %s other.yaml", want.size, want.hash)
		}},
		{"path escaping", func(want fileEntry) string {
			return fmt.Sprintf("444 %d %s ../../cfg.yaml\x00", want.size, want.hash)
		}},
		{"garbage", func(fileEntry) string { return "\x00\x00not a list" }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			f := newFixture(t)
			ctx := ctxTimeout(t, 30*time.Second)
			c1 := f.repo.CommitChanges(t, "main",
				gittest.Change{Path: "cfg.yaml", Content: "/etc/hostname", Symlink: true},
				gittest.Change{Path: "other.yaml", Content: "kind: ConfigMap\n"})
			dir1, err := f.cache.Checkout(ctx, f.src, Revision{Ref: "main", Commit: c1})
			g.Expect(err).NotTo(HaveOccurred())

			content := "kind: Secret\n"
			c2 := f.repo.CommitChanges(t, "main", gittest.Change{Path: "cfg.yaml", Content: content})
			want := fileEntry{hash: plumbing.ComputeHash(plumbing.BlobObject, []byte(content)), size: int64(len(content))}
			list := dir1 + filesSuffix
			g.Expect(os.Remove(list)).To(Succeed())
			g.Expect(os.WriteFile(list, []byte(tc.list(want)), 0o444)).To(Succeed())

			dir2, err := f.cache.Checkout(ctx, f.src, Revision{Ref: "main", Commit: c2})
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(readTree(t, dir2)).To(Equal(map[string]string{"cfg.yaml": content, "other.yaml": "kind: ConfigMap\n"}))
			fi, err := os.Lstat(filepath.Join(dir2, "cfg.yaml"))
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(fi.Mode()).To(Equal(os.FileMode(0o444)))
		})
	}
}

// TestGCRemovesListsWithTheirCheckouts: GC removes a checkout's list with it; a checkout that
// shared its files keeps them whole.
func TestGCRemovesListsWithTheirCheckouts(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	f := newFixture(t)
	ctx := ctxTimeout(t, 30*time.Second)
	c1 := f.repo.Commit(t, "main", map[string]string{"a": "1", "b": "1"})
	dir1, err := f.cache.Checkout(ctx, f.src, Revision{Ref: "main", Commit: c1})
	g.Expect(err).NotTo(HaveOccurred())
	c2 := f.repo.Commit(t, "main", map[string]string{"b": "2"})
	dir2, err := f.cache.Checkout(ctx, f.src, Revision{Ref: "main", Commit: c2})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(sameFile(t, filepath.Join(dir1, "a"), filepath.Join(dir2, "a"))).To(BeTrue())
	// A list left by a checkout that is gone (a crash between the two renames).
	orphan := filepath.Join(filepath.Dir(dir1), strings.Repeat("ab", 20)+filesSuffix)
	g.Expect(os.WriteFile(orphan, nil, 0o444)).To(Succeed())

	removed, err := f.cache.GC(func(commit string) bool { return commit == c2 })
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(removed).To(ConsistOf(dir1))
	g.Expect(listDir(filepath.Dir(dir2))).To(ConsistOf(c2, c2+filesSuffix))
	g.Expect(readTree(t, dir2)).To(Equal(map[string]string{"a": "1", "b": "2"}))

	_, err = f.cache.GC(func(string) bool { return false })
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(filepath.Dir(dir2)).NotTo(BeADirectory(), "an empty repository directory goes too")
}
