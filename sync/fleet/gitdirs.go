package fleet

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
	"github.com/converge-gitops/converge/sources"
	"github.com/converge-gitops/converge/sources/poll"
	"github.com/converge-gitops/converge/sync/target"
)

// GitLister lists the directories of Git sources: it resolves the ref, checks the commit
// out into Cache and walks it. With Polls, the daemon's poll scheduler, a set subscribes
// to the poller of each of its sources — shared with the SyncTargets that follow the same
// source, at its interval or cron schedule, polled at once on a push — and learns the
// commit from it; a poll that finds news wakes the set through Wake. Without, an answer is
// kept for the source's interval, so that the reconciles an owned SyncTarget's status
// changes cause do not poll the remote. A source with verify is listed only at a revision
// whose signatures verify with its trusted keys, as a SyncTarget's are checked
// (sources.Verifier), before it is checked out: a revision that does not verify leaves the
// listing of the last one that did, and says why.
type GitLister struct {
	// Polls, when set, polls the sources (the SyncTargets' scheduler).
	Polls *poll.Scheduler[sources.Key, sources.Source, sources.Polled]
	// Wake receives a set whose source has news (with Polls).
	Wake chan event.GenericEvent

	// Reader reads the credentials and trusted keys Secrets (spec.source.secretRef,
	// spec.source.verify.secretRef) by name.
	Reader client.Reader
	// Cache holds the checkouts.
	Cache *sources.Cache
	// Clock is the time source (default: the real clock).
	Clock clock.PassiveClock
	// Timeout bounds the resolution of a ref (checkouts and verifications have the
	// cache's own): a remote that does not answer holds a set's worker no longer.
	// sources.DefaultFetchTimeout when zero.
	Timeout time.Duration

	mu       sync.Mutex
	listed   map[listingKey]listing
	verifier *sources.Verifier                    // made on first use
	subs     map[client.ObjectKey]map[string]bool // set → its subscriptions to Polls
}

// listingKey is a source and the trust its listing was made with: a listing verified with
// some keys is never the answer for other keys, nor for a generator without verify.
type listingKey struct {
	source sources.Key
	trust  string
}

type listing struct {
	commit string
	tree   []string // every directory of the commit, up to the depth asked
	depth  int
	at     time.Time
	// signed says who signed commit, when the source asks for verification: "verified
	// commit … signed by …".
	signed string
	// refused says why the source's current revision, not commit, was not listed.
	refused string
}

// trust is the verification a generator asks for: none when keys is nil.
type trust struct {
	mode sources.VerifyMode
	keys *sources.TrustedKeys
}

func (t trust) id() string {
	if t.keys == nil {
		return ""
	}
	return string(t.mode) + "\x00" + t.keys.Digest()
}

// List implements Directories.
func (l *GitLister) List(ctx context.Context, set client.ObjectKey, g *convergev1.GitDirectoriesGenerator) (Listing, error) {
	ns := set.Namespace
	every := interval(g.Source)
	depth, err := globDepth(g.Include, g.Exclude)
	if err != nil {
		return Listing{}, err
	}
	// A throwaway SyncTarget: its source and keys, read with the credentials of the set's
	// namespace, and verified as a SyncTarget's.
	st := &convergev1.SyncTarget{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "set"},
		Spec: convergev1.SyncTargetSpec{Source: g.Source}}
	in := target.For(st, l.Reader, nil)
	src, err := in.Source(ctx)
	if err != nil {
		return Listing{}, err
	}
	keys, err := in.TrustedKeys(ctx)
	if err != nil {
		return Listing{}, err
	}
	tr := trust{mode: sources.VerifyMode(st.VerifyMode()), keys: keys}
	var got listing
	if l.Polls != nil {
		got, err = l.polledTree(ctx, set, src, g.Source, tr, depth)
	} else {
		got, err = l.tree(ctx, src, tr, depth, every)
	}
	if err != nil {
		return Listing{}, err
	}
	return Listing{Dirs: MatchDirs(got.tree, g.Include, g.Exclude), Every: every, Verified: got.signed, Refused: got.refused}, nil
}

// tree lists the directories of src's current commit, from memory while fresh. When that
// commit does not verify, the listing of the last one that did stays, saying why; without
// one, it is an error.
func (l *GitLister) tree(ctx context.Context, src sources.Source, tr trust, depth int, every time.Duration) (listing, error) {
	now := l.now()
	key := listingKey{source: src.Key(), trust: tr.id()}
	l.mu.Lock()
	got, ok := l.listed[key]
	l.mu.Unlock()
	usable := ok && got.depth >= depth
	if usable && now.Sub(got.at) < every {
		return got, nil
	}
	rev, err := l.resolve(ctx, src)
	if err != nil {
		return listing{}, err
	}
	return l.listAt(ctx, key, got, usable, src, tr, rev, depth, now)
}

// listAt lists the directories of rev, or keeps got, the listing of the same key made
// before (usable: deep enough), when rev is its commit or does not verify.
func (l *GitLister) listAt(ctx context.Context, key listingKey, got listing, usable bool, src sources.Source, tr trust,
	rev sources.Revision, depth int, now time.Time) (listing, error) {
	if usable && got.commit == rev.Commit {
		got.at, got.refused = now, ""
	} else {
		next, err := l.list(ctx, src, tr, rev, depth)
		switch {
		case errors.Is(err, sources.ErrVerificationFailed) && usable:
			got.at = now
			got.refused = fmt.Sprintf("%v: the directories of commit %s, the last that verified, are listed", err, short(got.commit))
		case errors.Is(err, sources.ErrVerificationFailed):
			return listing{}, fmt.Errorf("%w: no revision of %s verified yet, nothing is generated from it", err, src.URL)
		case err != nil:
			return listing{}, err
		default:
			got = next
			got.at = now
			defer l.gc()
		}
	}
	l.mu.Lock()
	if l.listed == nil {
		l.listed = map[listingKey]listing{}
	}
	l.listed[key] = got
	l.mu.Unlock()
	return got, nil
}

// polledTree lists the directories of the commit src's poller found last, subscribing
// set to it; before its first poll, the remote is asked directly. A listing of that commit
// is answered from memory.
func (l *GitLister) polledTree(ctx context.Context, set client.ObjectKey, src sources.Source, gs convergev1.GitSource,
	tr trust, depth int) (listing, error) {
	key := listingKey{source: src.Key(), trust: tr.id()}
	id := "set:" + set.String() + ":" + string(src.Key())
	err := l.Polls.Subscribe(poll.Subscription[sources.Key, sources.Source, sources.Polled]{
		ID: id, Key: src.Key(), Source: src, Interval: interval(gs), Schedule: string(gs.Schedule),
		Notify: func(ev poll.Event[sources.Key, sources.Polled]) {
			if ev.Changed && !ev.First {
				l.wake(set)
			}
		},
	})
	if err != nil {
		return listing{}, err
	}
	l.mu.Lock()
	if l.subs == nil {
		l.subs = map[client.ObjectKey]map[string]bool{}
	}
	if l.subs[set] == nil {
		l.subs[set] = map[string]bool{}
	}
	l.subs[set][id] = true
	got, ok := l.listed[key]
	l.mu.Unlock()
	var rev sources.Revision
	switch ev, polled := l.Polls.Latest(id); {
	case polled && ev.Err != nil:
		return listing{}, ev.Err
	case polled && !ev.Result.Revision.IsZero():
		rev = ev.Result.Revision
	default:
		if rev, err = l.resolve(ctx, src); err != nil {
			return listing{}, err
		}
	}
	return l.listAt(ctx, key, got, ok && got.depth >= depth, src, tr, rev, depth, l.now())
}

// wake asks for a reconcile of set.
func (l *GitLister) wake(set client.ObjectKey) {
	if l.Wake == nil {
		return
	}
	obj := &convergev1.SyncTargetSet{}
	obj.Namespace, obj.Name = set.Namespace, set.Name
	select {
	case l.Wake <- event.GenericEvent{Object: obj}:
	default: // the queue is full; the set's recheck picks the news up
	}
}

// Forget ends the subscriptions of set (it is gone, or its generators changed: the next
// listing subscribes again to what they follow now).
func (l *GitLister) Forget(set client.ObjectKey) {
	l.mu.Lock()
	ids := l.subs[set]
	delete(l.subs, set)
	l.mu.Unlock()
	if l.Polls == nil {
		return
	}
	for id := range ids {
		l.Polls.Unsubscribe(id)
	}
}

// resolve asks the remote which commit src's ref points at, within Timeout.
func (l *GitLister) resolve(ctx context.Context, src sources.Source) (sources.Revision, error) {
	timeout := l.Timeout
	if timeout <= 0 {
		timeout = sources.DefaultFetchTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	return sources.Resolve(ctx, src)
}

// list verifies rev when tr asks for it, then checks it out and walks it.
func (l *GitLister) list(ctx context.Context, src sources.Source, tr trust, rev sources.Revision, depth int) (listing, error) {
	var signed string
	if tr.keys != nil {
		v, err := l.verify().Verify(ctx, src, rev, tr.mode, tr.keys)
		if err != nil {
			return listing{}, fmt.Errorf("revision %s: %w", rev, err)
		}
		signed = "verified " + v.String()
	}
	dir, err := l.Cache.Checkout(ctx, src, rev)
	if err != nil {
		return listing{}, err
	}
	tree, err := WalkDirs(dir, depth)
	if err != nil {
		return listing{}, fmt.Errorf("listing the directories of %s: %w", rev, err)
	}
	return listing{commit: rev.Commit, tree: tree, depth: depth, signed: signed}, nil
}

// verify is the lister's Verifier, which remembers the revisions it checked.
func (l *GitLister) verify() *sources.Verifier {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.verifier == nil {
		l.verifier = &sources.Verifier{Cache: l.Cache}
	}
	return l.verifier
}

// short is the first 12 digits of a commit.
func short(commit string) string {
	if len(commit) > 12 {
		return commit[:12]
	}
	return commit
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
