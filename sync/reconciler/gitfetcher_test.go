package reconciler

import (
	"context"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/event"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
	"github.com/converge-gitops/converge/internal/gittest"
	"github.com/converge-gitops/converge/sources"
)

// fetcherFixture is a GitFetcher with a running scheduler, following a repository served
// over loopback HTTP.
type fetcherFixture struct {
	f    *GitFetcher
	repo *gittest.Repo
	url  string
}

// newFetcherFixture starts the scheduler when start is set; otherwise nothing is polled.
func newFetcherFixture(t *testing.T, start bool) *fetcherFixture {
	t.Helper()
	root := t.TempDir()
	repo := gittest.NewRepo(t, root, "org/app")
	srv := gittest.NewHTTPServer(t, root, gittest.HTTPOptions{})
	s := sources.NewScheduler(sources.SchedulerOptions{})
	if start {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); _ = s.Start(ctx) }()
		t.Cleanup(func() { cancel(); <-done })
	}
	return &fetcherFixture{f: &GitFetcher{Scheduler: s, Wakes: Wakes{Wake: make(chan event.GenericEvent, 8)}}, repo: repo, url: srv.RepoURL(repo)}
}

func (x *fetcherFixture) syncTarget(name string) *convergev1.SyncTarget {
	st := &convergev1.SyncTarget{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: name}}
	st.Spec.Source.URL = x.url
	st.Spec.Source.Ref.Branch = "main"
	st.Spec.Source.Interval = &metav1.Duration{Duration: time.Hour}
	return st
}

// TestNewRevisionWakes: a poll that finds a new revision wakes the SyncTarget.
func TestNewRevisionWakes(t *testing.T) {
	g := NewWithT(t)
	x := newFetcherFixture(t, true)
	c1 := x.repo.Commit(t, "main", map[string]string{"a.yaml": "a: 1\n"})
	st := x.syncTarget("app")
	rev, err := x.f.Resolve(t.Context(), st)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(rev).To(HaveSuffix(c1))
	g.Eventually(func() bool { _, ok := x.f.Scheduler.Latest("team/app"); return ok }).Should(BeTrue(), "polled")
	// The first poll may end before Resolve learnt the revision: then it wakes.
	select {
	case <-x.f.Wake:
	default:
	}

	c2 := x.repo.Commit(t, "main", map[string]string{"a.yaml": "a: 2\n"})
	src, err := x.f.Source(t.Context(), st)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(x.f.Scheduler.Trigger(src.Key())).To(Succeed())
	g.Eventually(x.f.Wake).WithTimeout(10 * time.Second).Should(Receive())
	ev, _ := x.f.Scheduler.Latest("team/app")
	g.Expect(ev.Revision.Commit).To(Equal(c2))
}

// TestFreshResolveOfANewTargetIsWoken: a new SyncTarget resolves its revision from the
// remote before its poller's first poll; that poll finding the same revision is known and
// wakes nobody (the reconcile would read the SyncTarget again to find nothing to do) —
// unless a reconcile a user asked for waits for it.
func TestFreshResolveOfANewTargetIsWoken(t *testing.T) {
	g := NewWithT(t)
	x := newFetcherFixture(t, false) // nothing polls: the test plays the poll's end
	c1 := x.repo.Commit(t, "main", map[string]string{"a.yaml": "a: 1\n"})
	st := x.syncTarget("asked")
	rev, ready, err := x.f.ResolveFresh(t.Context(), st, time.Now())
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(ready).To(BeFalse())
	g.Expect(rev).To(HaveSuffix(c1))
	parsed, err := sources.ParseRevision(rev)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(x.f.known("team/asked", sources.Event{Revision: parsed, Time: time.Now()})).To(BeFalse(), "woken")

	// Without a request waiting, the first poll finding the revision resolved is known;
	// another revision is not.
	other := x.syncTarget("other")
	rev, err = x.f.Resolve(t.Context(), other)
	g.Expect(err).NotTo(HaveOccurred())
	parsed, err = sources.ParseRevision(rev)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(x.f.known("team/other", sources.Event{Revision: parsed, Time: time.Now()})).To(BeTrue())
	g.Expect(x.f.known("team/other", sources.Event{Revision: parsed, Time: time.Now()})).To(BeFalse(), "only the first poll")
	_, err = x.f.Resolve(t.Context(), x.syncTarget("third"))
	g.Expect(err).NotTo(HaveOccurred())
	parsed.Commit = strings.Repeat("0", 40)
	g.Expect(x.f.known("team/third", sources.Event{Revision: parsed, Time: time.Now()})).To(BeFalse())
}
