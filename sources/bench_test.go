package sources

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-git/go-git/v5/plumbing/format/packfile"

	"github.com/converge-gitops/converge/internal/gittest"
)

const (
	benchFiles   = 10_000
	benchCommits = 500
)

// benchRoot holds the generated benchmark repository, built once per test binary run and
// removed by TestMain.
var (
	benchOnce sync.Once
	benchRoot string
	benchRepo *gittest.Repo
	benchErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if benchRoot != "" {
		_ = os.RemoveAll(benchRoot)
	}
	os.Exit(code)
}

// benchRepository returns a repository of 10 000 files (100 directories of 100 YAML files of
// about 400 bytes) with a history of 500 commits, each of the later ones changing 20 files.
func benchRepository(b *testing.B) (string, *gittest.Repo) {
	b.Helper()
	benchOnce.Do(func() {
		benchRoot, benchErr = os.MkdirTemp("", "converge-bench-*")
		if benchErr != nil {
			return
		}
		start := time.Now()
		benchRepo = gittest.NewRepo(b, benchRoot, "org/big")
		var s bytes.Buffer
		rng := rand.New(rand.NewPCG(1, 2))
		file := func(i, rev int) string {
			return fmt.Sprintf("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cm-%05d\n  namespace: svc-%03d\n"+
				"  labels:\n    app.kubernetes.io/name: svc-%03d\n    app.kubernetes.io/part-of: converge-bench\n"+
				"data:\n  revision: \"%d\"\n  config.yaml: |\n    replicas: %d\n    image: registry.example.com/svc-%03d:%d.%d.%d\n"+
				"    feature-flags: [alpha, beta, gamma]\n    timeout: %ds\n",
				i, i/100, i/100, rev, rng.IntN(10), i/100, rev, i%7, i%13, 30+i%90)
		}
		for c := 1; c <= benchCommits; c++ {
			fmt.Fprintf(&s, "commit refs/heads/main\ncommitter %s %d +0000\ndata 10\ncommit %03d\n", gittest.Committer, 1_700_000_000+c, c%1000)
			if c == 1 {
				for i := range benchFiles {
					content := file(i, c)
					fmt.Fprintf(&s, "M 100644 inline svc-%03d/cm-%05d.yaml\ndata %d\n%s\n", i/100, i, len(content), content)
				}
			} else {
				for range 20 {
					i := rng.IntN(benchFiles)
					content := file(i, c)
					fmt.Fprintf(&s, "M 100644 inline svc-%03d/cm-%05d.yaml\ndata %d\n%s\n", i/100, i, len(content), content)
				}
			}
			s.WriteString("\n")
		}
		benchRepo.FastImport(b, &s)
		gittest.Git(b, benchRepo.Dir, "repack", "-adq")
		b.Logf("generated %d files, %d commits in %v", benchFiles, benchCommits, time.Since(start))
	})
	if benchErr != nil {
		b.Fatal(benchErr)
	}
	return benchRoot, benchRepo
}

// BenchmarkColdFetch measures a cold fetch — ref listing and shallow fetch of the tip of a
// 10 000-file repository into an empty cache — against `git clone --depth 1` of the same URL
// with the system git, in the same run. ns/op is ours; git-ns/op is git's; x-git is the ratio.
// The two alternate in order, and nothing is deleted until the end: removing 10 000 files makes
// the file system slower for whatever runs next.
func BenchmarkColdFetch(b *testing.B) {
	root, repo := benchRepository(b)
	srv := gittest.NewHTTPServer(b, root, gittest.HTTPOptions{})
	src := Source{URL: srv.RepoURL(repo), Ref: Ref{Branch: "main"}}
	ctx := context.Background()
	work := b.TempDir()
	b.Cleanup(func() { _ = removeTree(work) })

	ourFetch := func(i int) time.Duration {
		cache, err := NewCache(CacheOptions{Dir: filepath.Join(work, fmt.Sprintf("cache-%d", i))})
		if err != nil {
			b.Fatal(err)
		}
		start := time.Now()
		rev, err := Resolve(ctx, src)
		if err != nil {
			b.Fatal(err)
		}
		dir, err := cache.Checkout(ctx, src, rev)
		if err != nil {
			b.Fatal(err)
		}
		took := time.Since(start)
		if n := countFiles(b, dir); n != benchFiles {
			b.Fatalf("checkout has %d files, want %d", n, benchFiles)
		}
		return took
	}
	gitClone := func(i int) time.Duration {
		start := time.Now()
		cmd := exec.Command("git", "clone", "--quiet", "--depth", "1", "--branch", "main", src.URL,
			filepath.Join(work, fmt.Sprintf("clone-%d", i)))
		cmd.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL="+os.DevNull)
		if out, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("git clone: %v: %s", err, out)
		}
		return time.Since(start)
	}

	var ours, git time.Duration
	b.ResetTimer()
	b.StopTimer()
	for i := range b.N {
		if i%2 == 0 {
			ours += ourFetch(i)
			git += gitClone(i)
		} else {
			git += gitClone(i)
			ours += ourFetch(i)
		}
	}
	// The timer stayed stopped: report our time as ns/op ourselves.
	b.ReportMetric(float64(ours.Nanoseconds())/float64(b.N), "ns/op")
	b.ReportMetric(float64(git.Nanoseconds())/float64(b.N), "git-ns/op")
	b.ReportMetric(float64(ours)/float64(git), "x-git")
}

// BenchmarkUnchangedPoll measures one poll of a source whose remote did not move: a ref listing
// and a cache hit. It reports the HTTP requests each poll costs.
func BenchmarkUnchangedPoll(b *testing.B) {
	root, repo := benchRepository(b)
	srv := gittest.NewHTTPServer(b, root, gittest.HTTPOptions{})
	src := Source{URL: srv.RepoURL(repo), Ref: Ref{Branch: "main"}}
	cache, err := NewCache(CacheOptions{Dir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	s := NewScheduler(SchedulerOptions{Cache: cache})
	ctx := context.Background()
	if _, err := s.poll(ctx, src); err != nil { // the cold poll
		b.Fatal(err)
	}
	srv.ResetStats()
	b.ResetTimer()
	for range b.N {
		if _, err := s.poll(ctx, src); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	st := srv.Stats()
	b.ReportMetric(float64(st.InfoRefs)/float64(b.N), "ref-listings/op")
	b.ReportMetric(float64(st.UploadPack)/float64(b.N), "fetches/op")
}

func countFiles(b *testing.B, dir string) int {
	n := 0
	err := filepath.WalkDir(dir, func(_ string, d os.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() && strings.HasSuffix(d.Name(), ".yaml") {
			n++
		}
		return err
	})
	if err != nil {
		b.Fatal(err)
	}
	return n
}

// BenchmarkUnpack measures unpacking the depth-1 pack of the benchmark repository's tip in
// memory, as a cold fetch does, with and without the packGuard in front (the guard inflates
// every object once more), and the guard alone.
func BenchmarkUnpack(b *testing.B) {
	_, repo := benchRepository(b)
	objects := gittest.Git(b, repo.Dir, "rev-list", "--objects", "--no-walk", "HEAD")
	cmd := exec.Command("git", "pack-objects", "--stdout", "-q")
	cmd.Dir = repo.Dir
	cmd.Stdin = strings.NewReader(objects + "\n")
	pack, err := cmd.Output()
	if err != nil {
		b.Fatalf("git pack-objects: %v", err)
	}
	lim := packLimitsFor(DefaultMaxBytes, DefaultMaxFiles, "bench")
	for _, tc := range []struct {
		name   string
		unpack func() error
	}{
		{"go-git", func() error {
			return packfile.UpdateObjectStorage(newMemStorage(DefaultMemoryBudget), bytes.NewReader(pack))
		}},
		{"guard and go-git", func() error {
			return packfile.UpdateObjectStorage(newMemStorage(DefaultMemoryBudget),
				newPackGuard(bytes.NewReader(pack), lim, DefaultMemoryBudget))
		}},
		{"guard", func() error {
			_, err := io.Copy(io.Discard, newPackGuard(bytes.NewReader(pack), lim, DefaultMemoryBudget))
			return err
		}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			b.SetBytes(int64(len(pack)))
			for b.Loop() {
				if err := tc.unpack(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
