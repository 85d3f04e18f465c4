package sources

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/converge-gitops/converge/internal/gittest"
	"github.com/converge-gitops/converge/sources/poll"
)

var t0 = time.Date(2026, 3, 10, 8, 0, 0, 0, time.UTC)

func noJitter(time.Duration) time.Duration { return 0 }

// recorder collects the events of one subscriber.
type recorder struct{ ch chan Event }

func newRecorder() *recorder        { return &recorder{ch: make(chan Event, 1000)} }
func (r *recorder) notify(ev Event) { r.ch <- ev }
func (r *recorder) next(g Gomega) Event {
	var ev Event
	g.Eventually(r.ch, 30*time.Second).Should(Receive(&ev))
	return ev
}

// startScheduler runs a scheduler until the test ends and counts its ref listings.
func startScheduler(t *testing.T, opts SchedulerOptions) (*Scheduler, *atomic.Int64) {
	t.Helper()
	s := NewScheduler(opts)
	polls := &atomic.Int64{}
	s.resolve = func(ctx context.Context, src Source) (Revision, error) {
		polls.Add(1)
		return Resolve(ctx, src)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- s.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	return s, polls
}

func nextPoll(s *Scheduler, key Key) time.Time {
	t, _ := s.NextPoll(key)
	return t
}

// idleAt waits until the source's poll finished and the next one is due at want.
func idleAt(g Gomega, s *Scheduler, key Key, want time.Time) {
	g.Eventually(func() time.Time { return nextPoll(s, key) }, 30*time.Second).Should(Equal(want))
}

func TestSchedulerInterval(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	f := newFixture(t)
	c1 := f.repo.Commit(t, "main", map[string]string{"v": "1"})
	clk := clocktesting.NewFakeClock(t0)
	s, polls := startScheduler(t, SchedulerOptions{Cache: f.cache, Options: poll.Options{Clock: clk, Jitter: noJitter}})
	rec := newRecorder()
	g.Expect(s.Subscribe(Subscription{ID: "team-a/app", Source: f.src, Interval: time.Minute, Notify: rec.notify})).To(Succeed())
	key := f.src.Key()

	// Polled at once; the checkout is ready when the subscriber hears of it.
	ev := rec.next(g)
	g.Expect(ev.Err).NotTo(HaveOccurred())
	g.Expect(ev.Revision).To(Equal(Revision{Ref: "main", Commit: c1}))
	g.Expect(readTree(t, ev.Dir)).To(Equal(map[string]string{"v": "1"}))
	g.Expect(ev.Next).To(Equal(t0.Add(time.Minute)))
	latest, ok := s.Latest("team-a/app")
	g.Expect(ok).To(BeTrue())
	g.Expect(latest).To(Equal(ev))
	idleAt(g, s, key, t0.Add(time.Minute))

	// An unchanged remote: one ref listing, no fetch, no event.
	f.srv.ResetStats()
	clk.Step(time.Minute)
	idleAt(g, s, key, t0.Add(2*time.Minute))
	g.Expect(f.srv.Stats().InfoRefs).To(BeEquivalentTo(1))
	g.Expect(f.srv.Stats().UploadPack).To(BeZero())
	g.Expect(rec.ch).NotTo(Receive())
	g.Expect(polls.Load()).To(BeEquivalentTo(2))

	// Not polled before the interval is up.
	c2 := f.repo.Commit(t, "main", map[string]string{"v": "2"})
	clk.Step(59 * time.Second)
	g.Expect(nextPoll(s, key)).To(Equal(t0.Add(2 * time.Minute)))
	// A new commit is found on the next poll, and checked out.
	clk.Step(time.Second)
	ev = rec.next(g)
	g.Expect(ev.Revision).To(Equal(Revision{Ref: "main", Commit: c2}))
	g.Expect(readTree(t, ev.Dir)).To(Equal(map[string]string{"v": "2"}))
	g.Expect(ev.Next).To(Equal(t0.Add(3 * time.Minute)))
	g.Expect(polls.Load()).To(BeEquivalentTo(3))
}

func TestSchedulerDefaultJitter(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	f := newFixture(t)
	f.repo.Commit(t, "main", map[string]string{"v": "1"})
	clk := clocktesting.NewFakeClock(t0)
	s, _ := startScheduler(t, SchedulerOptions{Options: poll.Options{Clock: clk}})
	rec := newRecorder()
	g.Expect(s.Subscribe(Subscription{ID: "a", Source: f.src, Notify: rec.notify})).To(Succeed())
	ev := rec.next(g)
	g.Expect(ev.Next).To(BeTemporally(">=", t0.Add(DefaultInterval)))
	g.Expect(ev.Next).To(BeTemporally("<", t0.Add(DefaultInterval+DefaultInterval/10)))
}

func TestSchedulerCron(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	f := newFixture(t)
	f.repo.Commit(t, "main", map[string]string{"v": "1"})
	clk := clocktesting.NewFakeClock(t0) // 09:00 in Berlin (CET, UTC+1)
	s, polls := startScheduler(t, SchedulerOptions{Cache: f.cache, Options: poll.Options{Clock: clk}})
	rec := newRecorder()
	g.Expect(s.Subscribe(Subscription{ID: "a", Source: f.src, Schedule: "CRON_TZ=Europe/Berlin 30 9 * * *", Notify: rec.notify})).To(Succeed())
	key := f.src.Key()

	ev := rec.next(g) // a new source is polled at once
	ninethirtyBerlin := time.Date(2026, 3, 10, 8, 30, 0, 0, time.UTC)
	g.Expect(ev.Next).To(Equal(ninethirtyBerlin))
	idleAt(g, s, key, ninethirtyBerlin)

	c2 := f.repo.Commit(t, "main", map[string]string{"v": "2"})
	clk.Step(29 * time.Minute)
	g.Expect(nextPoll(s, key)).To(Equal(ninethirtyBerlin))
	clk.Step(time.Minute)
	ev = rec.next(g)
	g.Expect(ev.Revision.Commit).To(Equal(c2))
	g.Expect(ev.Time).To(Equal(ninethirtyBerlin))
	g.Expect(ev.Next).To(Equal(ninethirtyBerlin.Add(24 * time.Hour)))
	g.Expect(polls.Load()).To(BeEquivalentTo(2))

	// Across the switch to summer time (29 March), 09:30 in Berlin is 07:30 UTC.
	g.Expect(s.Subscribe(Subscription{ID: "a", Source: f.src, Schedule: "CRON_TZ=Europe/Berlin 30 9 1 4 *", Notify: rec.notify})).To(Succeed())
	idleAt(g, s, key, time.Date(2026, 4, 1, 7, 30, 0, 0, time.UTC))
	g.Expect(polls.Load()).To(BeEquivalentTo(2), "changing the schedule does not poll")
}

func TestSchedulerBackoff(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	f := newFixture(t)
	clk := clocktesting.NewFakeClock(t0)
	s, _ := startScheduler(t, SchedulerOptions{Cache: f.cache, Options: poll.Options{Clock: clk, Jitter: noJitter, MinBackoff: 10 * time.Second, MaxBackoff: 40 * time.Second}})
	rec := newRecorder()
	src := Source{URL: f.srv.URL + "/org/later.git", Ref: Ref{Branch: "main"}}
	g.Expect(s.Subscribe(Subscription{ID: "a", Source: src, Interval: time.Hour, Notify: rec.notify})).To(Succeed())

	now := t0
	for i, wait := range []time.Duration{10 * time.Second, 20 * time.Second, 40 * time.Second, 40 * time.Second} {
		ev := rec.next(g)
		g.Expect(ev.Err).To(MatchError(ErrRepositoryNotFound))
		g.Expect(ev.Failures).To(Equal(i + 1))
		g.Expect(ev.Next).To(Equal(now.Add(wait)), "attempt %d", i+1)
		idleAt(g, s, src.Key(), now.Add(wait))
		now = now.Add(wait)
		clk.SetTime(now)
	}
	// The repository appears: the next poll succeeds, and the interval is back.
	repo := gittest.NewRepo(t, f.root, "org/later")
	c1 := repo.Commit(t, "main", map[string]string{"v": "1"})
	ev := rec.next(g) // the fifth failure, polled when the clock reached `now`
	if ev.Err != nil {
		g.Expect(ev.Failures).To(Equal(5))
		now = now.Add(40 * time.Second)
		idleAt(g, s, src.Key(), now)
		clk.SetTime(now)
		ev = rec.next(g)
	}
	g.Expect(ev.Err).NotTo(HaveOccurred())
	g.Expect(ev.Failures).To(BeZero())
	g.Expect(ev.Revision.Commit).To(Equal(c1))
	g.Expect(ev.Next).To(Equal(now.Add(time.Hour)))
}

// TestSchedulerBackoffResets: against a fake resolver and the fake clock, each failure in a
// row doubles the delay from MinBackoff up to MaxBackoff in place of the interval; a success
// brings the interval back and resets the count, so that the next failure waits MinBackoff
// again; and a source unsubscribed and subscribed again starts with no failures.
func TestSchedulerBackoffResets(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	clk := clocktesting.NewFakeClock(t0)
	s := NewScheduler(SchedulerOptions{Options: poll.Options{Clock: clk, Jitter: noJitter, MinBackoff: time.Second, MaxBackoff: 8 * time.Second}})
	var fail atomic.Bool
	fail.Store(true)
	boom := errors.New("boom")
	s.resolve = func(context.Context, Source) (Revision, error) {
		if fail.Load() {
			return Revision{}, boom
		}
		return Revision{Ref: "main", Commit: strings.Repeat("a", 40)}, nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- s.Start(ctx) }()
	defer func() { cancel(); g.Expect(<-done).To(Succeed()) }()

	rec := newRecorder()
	src := Source{URL: "https://git.example.com/org/app.git", Ref: Ref{Branch: "main"}}
	sub := Subscription{ID: "a", Source: src, Interval: time.Hour, Notify: rec.notify}
	g.Expect(s.Subscribe(sub)).To(Succeed())

	now := t0
	// expect checks the event of the poll at now, waits until the next is due at now+wait, and
	// only then decides whether that next poll fails and moves the clock there.
	expect := func(failures int, wait time.Duration, nextFails bool) {
		t.Helper()
		ev := rec.next(g)
		g.Expect(ev.Failures).To(Equal(failures))
		g.Expect(ev.Next).To(Equal(now.Add(wait)), "after %d failures", failures)
		idleAt(g, s, src.Key(), now.Add(wait))
		fail.Store(nextFails)
		now = now.Add(wait)
		clk.SetTime(now)
	}
	for i, wait := range []time.Duration{1, 2, 4, 8} {
		expect(i+1, wait*time.Second, true)
	}
	expect(5, 8*time.Second, false)
	expect(0, time.Hour, true)
	expect(1, time.Second, true)
	ev := rec.next(g)
	g.Expect(ev.Failures).To(Equal(2))
	g.Expect(ev.Next).To(Equal(now.Add(2 * time.Second)))

	g.Expect(s.polls.Failures(src.Key())).To(Equal(2))
	s.Unsubscribe("a")
	g.Expect(s.Subscribe(sub)).To(Succeed())
	ev = rec.next(g)
	g.Expect(ev.Failures).To(Equal(1), "a new poller starts with no failures")
	g.Expect(ev.Next).To(Equal(now.Add(time.Second)))
}

// TestSchedulerSharedPoller: subscribers of the same source share one poller and one fetch.
func TestSchedulerSharedPoller(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	f := newFixture(t)
	c1 := f.repo.Commit(t, "main", map[string]string{"v": "1"})
	clk := clocktesting.NewFakeClock(t0)
	s, polls := startScheduler(t, SchedulerOptions{Cache: f.cache, Options: poll.Options{Clock: clk, Jitter: noJitter}})
	recA, recB := newRecorder(), newRecorder()
	srcB := Source{URL: f.src.URL, Ref: Ref{Branch: "main"}}
	g.Expect(s.Subscribe(Subscription{ID: "a", Source: f.src, Interval: time.Minute, Notify: recA.notify})).To(Succeed())
	g.Expect(s.Subscribe(Subscription{ID: "b", Source: srcB, Interval: 30 * time.Second, Notify: recB.notify})).To(Succeed())

	evA, evB := recA.next(g), recB.next(g)
	g.Expect(evA).To(Equal(evB))
	g.Expect(evA.Revision.Commit).To(Equal(c1))
	g.Expect(evA.Next).To(Equal(t0.Add(30*time.Second)), "the shortest interval wins")
	g.Expect(polls.Load()).To(BeEquivalentTo(1))
	g.Expect(f.srv.Stats().UploadPack).To(BeEquivalentTo(1))

	s.Unsubscribe("b")
	s.Unsubscribe("a")
	_, ok := s.NextPoll(f.src.Key())
	g.Expect(ok).To(BeFalse(), "a source without subscribers is not polled")
}

func TestSchedulerMaxConcurrent(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	f := newFixture(t)
	release := f.srv.Hold(gittest.InfoRefs)
	defer release()
	clk := clocktesting.NewFakeClock(t0)
	s, _ := startScheduler(t, SchedulerOptions{Options: poll.Options{Clock: clk, MaxConcurrent: 2}})
	rec := newRecorder()
	for _, name := range []string{"a", "b", "c"} {
		repo := gittest.NewRepo(t, f.root, name)
		repo.Commit(t, "main", map[string]string{"v": name})
		g.Expect(s.Subscribe(Subscription{ID: name, Source: Source{URL: f.srv.RepoURL(repo)}, Notify: rec.notify})).To(Succeed())
	}
	g.Eventually(f.srv.InFlight).Should(BeEquivalentTo(2))
	g.Consistently(f.srv.InFlight, 300*time.Millisecond).Should(BeEquivalentTo(2))
	release()
	for range 3 {
		g.Expect(rec.next(g).Err).NotTo(HaveOccurred())
	}
	g.Expect(f.srv.Stats().MaxInFlight).To(BeEquivalentTo(2))
}

// TestSchedulerTriggerCoalesces: 100 triggers while a poll runs cause one more poll.
func TestSchedulerTriggerCoalesces(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	f := newFixture(t)
	f.repo.Commit(t, "main", map[string]string{"v": "1"})
	clk := clocktesting.NewFakeClock(t0)
	s, polls := startScheduler(t, SchedulerOptions{Cache: f.cache, Options: poll.Options{Clock: clk, Jitter: noJitter}})
	rec := newRecorder()
	g.Expect(s.Subscribe(Subscription{ID: "a", Source: f.src, Interval: time.Hour, Notify: rec.notify})).To(Succeed())
	rec.next(g)
	key := f.src.Key()
	idleAt(g, s, key, t0.Add(time.Hour))

	c2 := f.repo.Commit(t, "main", map[string]string{"v": "2"})
	f.srv.ResetStats()
	polls.Store(0)
	release := f.srv.Hold(gittest.InfoRefs)
	g.Expect(s.Trigger(key)).To(Succeed())
	g.Eventually(f.srv.InFlight).Should(BeEquivalentTo(1)) // the poll is running, held
	for range 100 {
		g.Expect(s.Trigger(key)).To(Succeed())
	}
	release()
	ev := rec.next(g)
	g.Expect(ev.Revision.Commit).To(Equal(c2))
	idleAt(g, s, key, t0.Add(time.Hour))
	g.Expect(polls.Load()).To(BeEquivalentTo(2), "the running poll and one more")
	g.Expect(f.srv.Stats().UploadPack).To(BeEquivalentTo(1))
	g.Expect(rec.ch).NotTo(Receive(), "the second poll found nothing new")

	g.Expect(s.Trigger("unknown")).To(MatchError(ErrNotSubscribed))
}

func TestSchedulerQueueFull(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	f := newFixture(t)
	clk := clocktesting.NewFakeClock(t0)
	s, _ := startScheduler(t, SchedulerOptions{Options: poll.Options{Clock: clk, MaxConcurrent: 1, QueueSize: 1, Jitter: noJitter}})
	rec := newRecorder()
	var keys []Key
	for _, name := range []string{"a", "b", "c"} {
		repo := gittest.NewRepo(t, f.root, name)
		repo.Commit(t, "main", map[string]string{"v": name})
		src := Source{URL: f.srv.RepoURL(repo)}
		keys = append(keys, src.Key())
		g.Expect(s.Subscribe(Subscription{ID: name, Source: src, Interval: time.Hour, Notify: rec.notify})).To(Succeed())
	}
	for range 3 {
		rec.next(g)
	}
	for _, k := range keys {
		idleAt(g, s, k, t0.Add(time.Hour))
	}

	release := f.srv.Hold(gittest.InfoRefs)
	defer release()
	g.Expect(s.Trigger(keys[0])).To(Succeed())
	g.Eventually(f.srv.InFlight).Should(BeEquivalentTo(1)) // a runs; the only worker is busy
	g.Expect(s.Trigger(keys[1])).To(Succeed())             // b waits: the queue is full
	g.Expect(s.Trigger(keys[2])).To(MatchError(ErrQueueFull))
	g.Expect(s.Trigger(keys[1])).To(Succeed(), "b is already waiting: coalesced")
	g.Expect(s.Trigger(keys[0])).To(Succeed(), "a runs: one more poll after")
	release()
	for _, k := range keys[:2] {
		idleAt(g, s, k, t0.Add(time.Hour))
	}
	g.Expect(s.Trigger(keys[2])).To(Succeed())
}

func TestSchedulerSemverNewTag(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	f := newFixture(t)
	c1 := f.repo.Commit(t, "main", map[string]string{"v": "1"})
	f.repo.Tag(t, "v1.0.0", c1)
	clk := clocktesting.NewFakeClock(t0)
	s, _ := startScheduler(t, SchedulerOptions{Cache: f.cache, Options: poll.Options{Clock: clk, Jitter: noJitter}})
	rec := newRecorder()
	src := Source{URL: f.src.URL, Ref: Ref{SemVer: "^1.0.0"}}
	g.Expect(s.Subscribe(Subscription{ID: "a", Source: src, Interval: time.Minute, Notify: rec.notify})).To(Succeed())
	g.Expect(rec.next(g).Revision).To(Equal(Revision{Ref: "v1.0.0", Commit: c1}))
	idleAt(g, s, src.Key(), t0.Add(time.Minute))

	c2 := f.repo.Commit(t, "main", map[string]string{"v": "2"})
	f.repo.AnnotatedTag(t, "v1.1.0", c2)
	f.repo.Tag(t, "v2.0.0", c2) // outside the range
	clk.Step(time.Minute)
	ev := rec.next(g)
	g.Expect(ev.Revision).To(Equal(Revision{Ref: "v1.1.0", Commit: c2}))
	g.Expect(readTree(t, ev.Dir)).To(Equal(map[string]string{"v": "2"}))
}

func TestSchedulerResubscribe(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	f := newFixture(t)
	f.repo.Commit(t, "main", map[string]string{"v": "1"})
	f.repo.Commit(t, "dev", map[string]string{"v": "dev"})
	clk := clocktesting.NewFakeClock(t0)
	s, polls := startScheduler(t, SchedulerOptions{Options: poll.Options{Clock: clk, Jitter: noJitter}})
	rec := newRecorder()
	sub := Subscription{ID: "a", Source: f.src, Interval: time.Minute, Notify: rec.notify}
	g.Expect(s.Subscribe(sub)).To(Succeed())
	rec.next(g)
	idleAt(g, s, f.src.Key(), t0.Add(time.Minute))

	// What a reconciler does on every reconcile: nothing changed, nothing happens.
	for range 10 {
		g.Expect(s.Subscribe(sub)).To(Succeed())
	}
	g.Expect(polls.Load()).To(BeEquivalentTo(1))

	// Another branch: another poller, polled at once; the old one goes.
	sub.Source = Source{URL: f.src.URL, Ref: Ref{Branch: "dev"}}
	g.Expect(s.Subscribe(sub)).To(Succeed())
	g.Expect(rec.next(g).Revision.Ref).To(Equal("dev"))
	_, ok := s.NextPoll(f.src.Key())
	g.Expect(ok).To(BeFalse())
}

func TestSchedulerRejectsInvalid(t *testing.T) {
	t.Parallel()
	s := NewScheduler(SchedulerOptions{})
	for name, sub := range map[string]Subscription{
		"no id":          {Source: Source{URL: "https://host/org/app.git"}},
		"bad schedule":   {ID: "a", Source: Source{URL: "https://host/org/app.git"}, Schedule: "61 * * * *"},
		"reversed range": {ID: "a", Source: Source{URL: "https://host/org/app.git"}, Schedule: "5-1 * * * *"},
		"never fires":    {ID: "a", Source: Source{URL: "https://host/org/app.git"}, Schedule: "0 0 30 2 *"},
		"ssh, no secret": {ID: "a", Source: Source{URL: "ssh://git@host/org/app.git"}},
		"two refs":       {ID: "a", Source: Source{URL: "https://host/org/app.git", Ref: Ref{Branch: "a", Tag: "b"}}},
	} {
		t.Run(name, func(t *testing.T) {
			err := s.Subscribe(sub)
			NewWithT(t).Expect(errors.Is(err, ErrInvalidSource)).To(BeTrue(), "%v", err)
		})
	}
}
