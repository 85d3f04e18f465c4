package main

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/converge-gitops/converge/internal/gittest"
	"github.com/converge-gitops/converge/sources"
)

// runFetch times a cold fetch of a repository of FetchFiles files by the sources package —
// ref listing, shallow fetch and checkout into an empty cache, what the daemon does for a
// new source — next to `git clone --depth 1` by the system git, from the same server. The
// two alternate in order; nothing is deleted until the end, as removing many files slows
// the file system down for whatever runs next.
func (b *Bench) runFetch(ctx context.Context) error {
	repo := gittest.NewRepo(b.tb, b.gitRoot, "fetch")
	repo.FastImport(b.tb, strings.NewReader(fetchStream(b.cfg.FetchFiles)))
	gittest.Git(b.tb, repo.Dir, "repack", "-adq")
	src := sources.Source{URL: b.git.RepoURL(repo), Ref: sources.Ref{Branch: "main"}}
	work := filepath.Join(b.work, "fetch")
	defer func() { _ = removeTree(work) }()

	ours := func(rep int) (time.Duration, error) {
		cache, err := sources.NewCache(sources.CacheOptions{Dir: filepath.Join(work, fmt.Sprintf("cache-%d", rep))})
		if err != nil {
			return 0, err
		}
		start := time.Now()
		rev, err := sources.Resolve(ctx, src)
		if err != nil {
			return 0, err
		}
		dir, err := cache.Checkout(ctx, src, rev)
		if err != nil {
			return 0, err
		}
		took := time.Since(start)
		return took, b.checkFiles(dir)
	}
	git := func(rep int) (time.Duration, error) {
		dir := filepath.Join(work, fmt.Sprintf("clone-%d", rep))
		cmd := exec.CommandContext(ctx, "git", "clone", "--quiet", "--depth", "1", "--branch", "main", src.URL, dir)
		cmd.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL="+os.DevNull, "GIT_TERMINAL_PROMPT=0")
		start := time.Now()
		out, err := cmd.CombinedOutput()
		took := time.Since(start)
		if err != nil {
			return 0, fmt.Errorf("git clone: %v: %s", err, out)
		}
		return took, b.checkFiles(dir)
	}

	var oursS, gitS []time.Duration
	for rep := range b.cfg.Reps {
		order := []func(int) (time.Duration, error){ours, git}
		if rep%2 == 1 {
			order = []func(int) (time.Duration, error){git, ours}
		}
		var took [2]time.Duration
		for i, f := range order {
			d, err := f(rep)
			if err != nil {
				return fmt.Errorf("fetch rep %d: %w", rep+1, err)
			}
			took[i] = d
		}
		if rep%2 == 1 {
			took[0], took[1] = took[1], took[0]
		}
		oursS, gitS = append(oursS, took[0]), append(gitS, took[1])
		b.logf("fetch rep %d/%d: sources %s, git clone --depth 1 %s", rep+1, b.cfg.Reps,
			took[0].Round(time.Millisecond), took[1].Round(time.Millisecond))
	}
	b.res.add(workloadFetch, fmt.Sprintf("cold fetch, %d files", b.cfg.FetchFiles), Seconds, seconds(oursS),
		"git clone --depth 1", seconds(gitS), &Target{Text: "≤ 2× git", Max: 2, OnRatio: true})
	return nil
}

// checkFiles checks that a checkout or clone holds every file of the fetch repository.
func (b *Bench) checkFiles(dir string) error {
	n := 0
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && d.Name() == ".git" {
			return filepath.SkipDir
		}
		if d.Type().IsRegular() && strings.HasSuffix(d.Name(), ".yaml") {
			n++
		}
		return nil
	})
	if err != nil {
		return err
	}
	if n != b.cfg.FetchFiles {
		return fmt.Errorf("%s holds %d files, want %d", dir, n, b.cfg.FetchFiles)
	}
	return nil
}
