package fleet

import (
	"context"
	"fmt"
	"io/fs"
	"path"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
	"github.com/converge-gitops/converge/sources"
	"github.com/converge-gitops/converge/sync/target"
)

// GitLister lists the directories of Git sources: it resolves the ref, checks the commit
// out into Cache and walks it. An answer is kept for the source's interval, so that the
// reconciles an owned SyncTarget's status changes cause do not poll the remote.
type GitLister struct {
	// Reader reads the credentials Secret (spec.source.secretRef) by name.
	Reader client.Reader
	// Cache holds the checkouts.
	Cache *sources.Cache
	// Clock is the time source (default: the real clock).
	Clock clock.PassiveClock

	mu     sync.Mutex
	listed map[sources.Key]listing
}

type listing struct {
	commit string
	tree   []string // every directory of the commit, up to the depth asked
	depth  int
	at     time.Time
}

// List implements Directories.
func (l *GitLister) List(ctx context.Context, ns string, g *convergev1.GitDirectoriesGenerator) ([]string, time.Duration, error) {
	every := interval(g.Source)
	depth, err := globDepth(g.Include, g.Exclude)
	if err != nil {
		return nil, 0, err
	}
	// A throwaway SyncTarget: its source, read with the credentials of the set's namespace.
	st := &convergev1.SyncTarget{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "set"},
		Spec: convergev1.SyncTargetSpec{Source: g.Source}}
	src, err := target.For(st, l.Reader, nil).Source(ctx)
	if err != nil {
		return nil, 0, err
	}
	tree, err := l.tree(ctx, src, depth, every)
	if err != nil {
		return nil, 0, err
	}
	return MatchDirs(tree, g.Include, g.Exclude), every, nil
}

// tree lists the directories of src's current commit, from memory while fresh.
func (l *GitLister) tree(ctx context.Context, src sources.Source, depth int, every time.Duration) ([]string, error) {
	now := l.now()
	key := src.Key()
	l.mu.Lock()
	got, ok := l.listed[key]
	l.mu.Unlock()
	if ok && got.depth >= depth && now.Sub(got.at) < every {
		return got.tree, nil
	}
	rev, err := sources.Resolve(ctx, src)
	if err != nil {
		return nil, err
	}
	if ok && got.depth >= depth && got.commit == rev.Commit {
		got.at = now
	} else {
		dir, err := l.Cache.Checkout(ctx, src, rev)
		if err != nil {
			return nil, err
		}
		tree, err := WalkDirs(dir, depth)
		if err != nil {
			return nil, fmt.Errorf("listing the directories of %s: %w", rev, err)
		}
		got = listing{commit: rev.Commit, tree: tree, depth: depth, at: now}
		defer l.gc()
	}
	l.mu.Lock()
	if l.listed == nil {
		l.listed = map[sources.Key]listing{}
	}
	l.listed[key] = got
	l.mu.Unlock()
	return got.tree, nil
}

func (l *GitLister) now() time.Time {
	if l.Clock == nil {
		return time.Now()
	}
	return l.Clock.Now()
}

// gc removes the checkouts no listing is based on any more (past the cache's grace
// period): a listing needs its checkout only while it is made.
func (l *GitLister) gc() {
	_, _ = l.Cache.GC(l.Keep)
}

// Keep reports whether a checkout of commit is the one a listing is based on, for the
// cache's GC.
func (l *GitLister) Keep(commit string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, got := range l.listed {
		if got.commit == commit {
			return true
		}
	}
	return false
}

// interval is how often the source is polled: its interval, or the default one (a
// schedule is read as the default interval).
func interval(s convergev1.GitSource) time.Duration {
	if s.Interval != nil && s.Interval.Duration > 0 {
		return s.Interval.Duration
	}
	return convergev1.DefaultInterval
}

// globDepth is the largest number of segments of the include globs: no deeper directory
// can match. Every glob must be well formed.
func globDepth(include, exclude []string) (int, error) {
	depth := 0
	for _, g := range append(append([]string(nil), include...), exclude...) {
		if _, err := path.Match(g, ""); err != nil {
			return 0, fmt.Errorf("glob %q: %w", g, err)
		}
	}
	for _, g := range include {
		depth = max(depth, len(strings.Split(strings.Trim(g, "/"), "/")))
	}
	return depth, nil
}

// WalkDirs lists the directories under root, as slash-separated paths relative to it, no
// deeper than depth segments. Symbolic links are not followed (nor listed).
func WalkDirs(root string, depth int) ([]string, error) {
	var out []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() || p == root {
			return nil
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		if rel == ".git" {
			return fs.SkipDir
		}
		out = append(out, rel)
		if int64(len(out)) > sources.DefaultMaxFiles {
			return fmt.Errorf("more than %d directories", sources.DefaultMaxFiles)
		}
		if strings.Count(rel, "/")+1 >= depth {
			return fs.SkipDir
		}
		return nil
	})
	return out, err
}

// MatchDirs keeps the directories matching one include glob and no exclude glob (path.Match:
// "*" matches within a segment), sorted.
func MatchDirs(dirs, include, exclude []string) []string {
	var out []string
	for _, d := range dirs {
		if matchAny(include, d) && !matchAny(exclude, d) {
			out = append(out, d)
		}
	}
	sort.Strings(out)
	return out
}

func matchAny(globs []string, p string) bool {
	for _, g := range globs {
		if ok, _ := path.Match(strings.Trim(g, "/"), p); ok {
			return true
		}
	}
	return false
}

// dirParams are the parameters of directories: path, path.basename and path.segmentN.
func dirParams(dirs []string) []Params {
	out := make([]Params, 0, len(dirs))
	for _, d := range dirs {
		p := Params{"path": d, "path.basename": path.Base(d)}
		for i, seg := range strings.Split(d, "/") {
			p["path.segment"+strconv.Itoa(i)] = seg
		}
		out = append(out, p)
	}
	return out
}
