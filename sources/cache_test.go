package sources

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/converge-gitops/converge/internal/gittest"
)

func TestCheckoutWritesTree(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	f := newFixture(t)
	ctx := ctxTimeout(t, 30*time.Second)
	commit := f.repo.CommitChanges(t, "main",
		gittest.Change{Path: "deploy/prod/app.yaml", Content: "kind: Deployment\n"},
		gittest.Change{Path: "deploy/base/kustomization.yaml", Content: "resources: []\n"},
		gittest.Change{Path: "hack/run.sh", Content: "#!/bin/sh\n", Executable: true},
		gittest.Change{Path: "deploy/prod/base", Content: "../base", Symlink: true},
		gittest.Change{Path: "escape", Content: "../../../../etc/passwd", Symlink: true},
		gittest.Change{Path: "empty.txt", Content: ""},
	)
	dir, err := f.cache.Checkout(ctx, f.src, Revision{Ref: "main", Commit: commit})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(filepath.Base(dir)).To(Equal(commit))

	g.Expect(readTree(t, dir)).To(Equal(map[string]string{
		"deploy/prod/app.yaml":           "kind: Deployment\n",
		"deploy/base/kustomization.yaml": "resources: []\n",
		"hack/run.sh":                    "#!/bin/sh\n",
		"deploy/prod/base":               "-> ../base",
		"escape":                         "-> ../../../../etc/passwd",
		"empty.txt":                      "",
	}))
	for path, mode := range map[string]os.FileMode{
		".":                    os.ModeDir | 0o555,
		"deploy":               os.ModeDir | 0o555,
		"deploy/prod/app.yaml": 0o444,
		"hack/run.sh":          0o555,
	} {
		fi, err := os.Lstat(filepath.Join(dir, path))
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(fi.Mode()).To(Equal(mode), path)
	}
	fi, err := os.Lstat(filepath.Join(dir, "escape"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(fi.Mode()&os.ModeSymlink).NotTo(BeZero(), "a symlink stays a symlink")
}

// TestUnchangedCostsOneListing: polling an unchanged remote lists refs once and fetches nothing.
func TestUnchangedCostsOneListing(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	f := newFixture(t)
	ctx := ctxTimeout(t, 30*time.Second)
	f.repo.Commit(t, "main", map[string]string{"a": "1"})
	rev, err := Resolve(ctx, f.src)
	g.Expect(err).NotTo(HaveOccurred())
	dir, err := f.cache.Checkout(ctx, f.src, rev)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(f.srv.Stats().UploadPack).To(BeEquivalentTo(1))

	f.srv.ResetStats()
	rev2, err := Resolve(ctx, f.src)
	g.Expect(err).NotTo(HaveOccurred())
	dir2, err := f.cache.Checkout(ctx, f.src, rev2)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(dir2).To(Equal(dir))
	st := f.srv.Stats()
	g.Expect(st.InfoRefs).To(BeEquivalentTo(1), "one ref listing")
	g.Expect(st.UploadPack).To(BeZero(), "no fetch")
}

// TestCheckoutSharesOneFetch: concurrent checkouts of one commit — from different refs of the
// same repository — wait for a single fetch.
func TestCheckoutSharesOneFetch(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	f := newFixture(t)
	ctx := ctxTimeout(t, 30*time.Second)
	commit := f.repo.Commit(t, "main", map[string]string{"a": "1"})
	f.repo.Tag(t, "v1.0.0", commit)
	release := f.srv.Hold(gittest.UploadPack)

	const n = 5
	dirs := make([]string, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		src := f.src
		if i%2 == 1 {
			src = Source{URL: f.src.URL, Ref: Ref{Tag: "v1.0.0"}}
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			dirs[i], errs[i] = f.cache.Checkout(ctx, src, Revision{Ref: "main", Commit: commit})
		}()
	}
	rev := Revision{Commit: commit}
	g.Eventually(func() int { return f.cache.waiting(f.src, rev) }).Should(Equal(n))
	g.Eventually(f.srv.InFlight).Should(BeEquivalentTo(1))
	release()
	wg.Wait()
	for i := range n {
		g.Expect(errs[i]).NotTo(HaveOccurred())
		g.Expect(dirs[i]).To(Equal(dirs[0]))
	}
	g.Expect(f.srv.Stats().UploadPack).To(BeEquivalentTo(1))
}

// TestCheckoutLargeFetch: a fetch too large to unpack in memory goes on to disk where the
// memory budget ends, without fetching again, with the same result.
func TestCheckoutLargeFetch(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	f := newFixture(t)
	f.cache = newTestCache(t, CacheOptions{MemoryBudget: 64 << 10})
	files := map[string]string{"small": "s", "link": "small"}
	for i := range 40 {
		files[fmt.Sprintf("dir/f%02d", i)] = string(randomBytes(2000 + i))
	}
	commit := f.repo.Commit(t, "main", files)
	dir, err := f.cache.Checkout(ctxTimeout(t, 30*time.Second), f.src, Revision{Ref: "main", Commit: commit})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(readTree(t, dir)).To(Equal(files))
	g.Expect(f.srv.Stats().UploadPack).To(BeEquivalentTo(1), "unpacked in memory, then on to disk, in one fetch")
}

func TestCheckoutCaps(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		opts  CacheOptions
		files map[string]string
		cap   string
	}{
		{"size", CacheOptions{MaxBytes: 1000}, map[string]string{"a": strings.Repeat("x", 600), "b": strings.Repeat("y", 600)}, "MaxBytes"},
		{"file count", CacheOptions{MaxFiles: 3}, map[string]string{"a": "1", "b": "2", "c/d": "3", "c/e": "4"}, "MaxFiles"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			f := newFixture(t)
			f.cache = newTestCache(t, tc.opts)
			commit := f.repo.Commit(t, "main", tc.files)
			rev := Revision{Ref: "main", Commit: commit}
			_, err := f.cache.Checkout(ctxTimeout(t, 30*time.Second), f.src, rev)
			g.Expect(err).To(MatchError(ErrLimitExceeded))
			g.Expect(err.Error()).To(ContainSubstring(tc.cap))
			_, cached := f.cache.Path(f.src, rev)
			g.Expect(cached).To(BeFalse(), "a refused checkout is not cached")
			g.Expect(listDir(f.cache.tmp)).To(BeEmpty(), "nor left half-written")

			// Within the caps the same cache works.
			f.repo.CommitChanges(t, "main", gittest.Change{Path: "a", Delete: true}, gittest.Change{Path: "c/d", Delete: true})
			rev2, err := Resolve(ctxTimeout(t, 30*time.Second), f.src)
			g.Expect(err).NotTo(HaveOccurred())
			_, err = f.cache.Checkout(ctxTimeout(t, 30*time.Second), f.src, rev2)
			g.Expect(err).NotTo(HaveOccurred())
		})
	}
}

func TestCheckoutRefusesUnsafeNames(t *testing.T) {
	t.Parallel()
	for _, name := range []string{".git", ".GIT", ".."} {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			f := newFixture(t)
			// git fast-import refuses such trees; git mktree writes them.
			blob := gittest.Git(t, f.repo.Dir, "hash-object", "-w", "/dev/null")
			tree := mktree(t, f.repo.Dir, fmt.Sprintf("100644 blob %s\tok\n100644 blob %s\t%s\n", blob, blob, name))
			commit := gittest.Git(t, f.repo.Dir, "commit-tree", tree, "-m", "evil")
			f.repo.ForcePush(t, "main", commit)
			_, err := f.cache.Checkout(ctxTimeout(t, 30*time.Second), f.src, Revision{Ref: "main", Commit: commit})
			g.Expect(err).To(MatchError(ErrFetchFailed))
			g.Expect(err.Error()).To(ContainSubstring("cannot be checked out safely"))
			g.Expect(listDir(f.cache.tmp)).To(BeEmpty())
		})
	}
}

func mktree(t *testing.T, dir, entries string) string {
	t.Helper()
	f := filepath.Join(t.TempDir(), "entries")
	if err := os.WriteFile(f, []byte(entries), 0o600); err != nil {
		t.Fatal(err)
	}
	in, err := os.Open(f)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = in.Close() }()
	return gittest.GitInput(t, dir, in, "mktree")
}

// TestGCAndRefetchBySHA: GC removes what is not kept; a removed commit that is no branch tip any
// more is fetched again by its SHA.
func TestGCAndRefetchBySHA(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	f := newFixture(t)
	ctx := ctxTimeout(t, 30*time.Second)
	c1 := f.repo.Commit(t, "main", map[string]string{"v": "1"})
	dir1, err := f.cache.Checkout(ctx, f.src, Revision{Ref: "main", Commit: c1})
	g.Expect(err).NotTo(HaveOccurred())
	c2 := f.repo.Commit(t, "main", map[string]string{"v": "2"})
	dir2, err := f.cache.Checkout(ctx, f.src, Revision{Ref: "main", Commit: c2})
	g.Expect(err).NotTo(HaveOccurred())

	removed, err := f.cache.GC(func(commit string) bool { return commit == c2 })
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(removed).To(ConsistOf(dir1))
	g.Expect(dir1).NotTo(BeADirectory())
	g.Expect(readTree(t, dir2)).To(Equal(map[string]string{"v": "2"}))

	f.srv.ResetStats()
	again, err := f.cache.Checkout(ctx, f.src, Revision{Ref: "main", Commit: c1})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(again).To(Equal(dir1))
	g.Expect(readTree(t, again)).To(Equal(map[string]string{"v": "1"}))
	g.Expect(f.srv.Stats().UploadPack).To(BeEquivalentTo(1))

	// A server that allows only tips refuses it, clearly.
	gittest.Git(t, f.repo.Dir, "config", "uploadpack.allowReachableSHA1InWant", "false")
	_, err = f.cache.GC(func(commit string) bool { return commit == c2 })
	g.Expect(err).NotTo(HaveOccurred())
	_, err = f.cache.Checkout(ctx, f.src, Revision{Ref: "main", Commit: c1})
	g.Expect(err).To(MatchError(ErrRefNotFound))
	g.Expect(err.Error()).To(ContainSubstring("not the tip of any ref"))
}

func TestGCGracePeriod(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	f := newFixture(t)
	clk := clocktesting.NewFakePassiveClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	f.cache = newTestCache(t, CacheOptions{GCGracePeriod: 10 * time.Minute, Clock: clk})
	c1 := f.repo.Commit(t, "main", map[string]string{"v": "1"})
	dir, err := f.cache.Checkout(ctxTimeout(t, 30*time.Second), f.src, Revision{Ref: "main", Commit: c1})
	g.Expect(err).NotTo(HaveOccurred())
	keepNothing := func(string) bool { return false }

	clk.SetTime(clk.Now().Add(9 * time.Minute))
	removed, err := f.cache.GC(keepNothing)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(removed).To(BeEmpty(), "handed out recently: maybe being read")
	g.Expect(dir).To(BeADirectory())

	clk.SetTime(clk.Now().Add(2 * time.Minute))
	removed, err = f.cache.GC(keepNothing)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(removed).To(ConsistOf(dir))
	g.Expect(listDir(f.cache.opts.Dir)).To(Equal([]string{".tmp"}), "empty repository directories go too")
}

// TestInterruptedFetchLeavesNothingUsable: what an interrupted fetch leaves in the cache is
// never served, and is cleaned when the cache opens.
func TestInterruptedFetchLeavesNothingUsable(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	f := newFixture(t)
	dir := t.TempDir()
	commit := f.repo.Commit(t, "main", map[string]string{"a": "1", "b": "2"})
	rev := Revision{Ref: "main", Commit: commit}

	// A crash mid-write leaves a partial tree in .tmp, never at the checkout's path.
	c := newTestCache(t, CacheOptions{Dir: dir})
	partial := filepath.Join(c.tmp, commit[:12]+"-123", "tree")
	g.Expect(os.MkdirAll(partial, 0o755)).To(Succeed())
	g.Expect(os.WriteFile(filepath.Join(partial, "a"), []byte("1"), 0o444)).To(Succeed())
	_, cached := c.Path(f.src, rev)
	g.Expect(cached).To(BeFalse())

	// Reopening the cache (the daemon restarting) removes it; the checkout is fetched whole.
	c = newTestCache(t, CacheOptions{Dir: dir})
	g.Expect(listDir(c.tmp)).To(BeEmpty())
	out, err := c.Checkout(ctxTimeout(t, 30*time.Second), f.src, rev)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(readTree(t, out)).To(Equal(map[string]string{"a": "1", "b": "2"}))

	// A completed checkout survives a restart and is served without network.
	c = newTestCache(t, CacheOptions{Dir: dir})
	f.srv.ResetStats()
	out2, err := c.Checkout(ctxTimeout(t, 30*time.Second), f.src, rev)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(out2).To(Equal(out))
	g.Expect(f.srv.Stats()).To(Equal(gittest.HTTPStats{}))
}

func TestCheckoutIsPerRepository(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	f := newFixture(t)
	ctx := ctxTimeout(t, 30*time.Second)
	commit := f.repo.Commit(t, "main", map[string]string{"private.yaml": "secret: 1\n"})
	_, err := f.cache.Checkout(ctx, f.src, Revision{Ref: "main", Commit: commit})
	g.Expect(err).NotTo(HaveOccurred())

	// Another repository naming the same SHA does not get it from the cache.
	other := gittest.NewRepo(t, f.root, "other/app")
	other.Commit(t, "main", map[string]string{"x": "1"})
	_, err = f.cache.Checkout(ctx, Source{URL: f.srv.RepoURL(other)}, Revision{Commit: commit})
	g.Expect(err).To(HaveOccurred())
	g.Expect(err).To(MatchError(ErrRefNotFound))
}
