package poll

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	clocktesting "k8s.io/utils/clock/testing"
)

var t0 = time.Date(2026, 3, 10, 8, 0, 0, 0, time.UTC)

func noJitter(time.Duration) time.Duration { return 0 }

// fakeSource is polled by answer: what each poll of a key returns is set by the test.
type fakeSource struct {
	mu      sync.Mutex
	results map[string]string
	errs    map[string]error
	polls   map[string]int
	block   chan struct{} // when set, a poll waits on it
}

func newFakeSource() *fakeSource {
	return &fakeSource{results: map[string]string{}, errs: map[string]error{}, polls: map[string]int{}}
}

func (f *fakeSource) set(key, result string, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.results[key], f.errs[key] = result, err
}

func (f *fakeSource) count(key string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.polls[key]
}

func (f *fakeSource) poll(ctx context.Context, key string) (string, error) {
	f.mu.Lock()
	f.polls[key]++
	block := f.block
	f.mu.Unlock()
	if block != nil {
		select {
		case <-block:
		case <-ctx.Done():
			return "", ctx.Err()
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.results[key], f.errs[key]
}

func start(t *testing.T, s *Scheduler[string, string, string]) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- s.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
}

func subscription(id, key string, events chan Event[string, string]) Subscription[string, string, string] {
	return Subscription[string, string, string]{ID: id, Key: key, Source: key, Interval: time.Minute,
		Notify: func(ev Event[string, string]) { events <- ev }}
}

func next(g Gomega, events chan Event[string, string]) Event[string, string] {
	var ev Event[string, string]
	g.Eventually(events).WithTimeout(10 * time.Second).Should(Receive(&ev))
	return ev
}

// Every poll is told, and Changed says which bring news: the first, another result, a
// failure, another error, a recovery — not the same result or the same error again.
func TestEventsSayWhatChanged(t *testing.T) {
	g := NewWithT(t)
	clk := clocktesting.NewFakeClock(t0)
	src := newFakeSource()
	s := New[string, string, string](Options{Clock: clk, Jitter: noJitter, MinBackoff: time.Second}, src.poll)
	start(t, s)
	events := make(chan Event[string, string], 16)
	src.set("repo", "r1", nil)
	g.Expect(s.Subscribe(subscription("a", "repo", events))).To(Succeed())

	boom, bang := errors.New("boom"), errors.New("bang")
	steps := []struct {
		result      string
		err         error
		wantResult  string
		first, news bool
	}{
		{"r1", nil, "r1", true, true},
		{"r1", nil, "r1", false, false},
		{"r2", nil, "r2", false, true},
		{"", boom, "r2", false, true}, // the last result outlives a failure
		{"", boom, "r2", false, false},
		{"", bang, "r2", false, true},
		{"r2", nil, "r2", false, true}, // recovered
	}
	for i, step := range steps {
		src.set("repo", step.result, step.err)
		if i > 0 {
			g.Expect(s.Trigger("repo")).To(Succeed())
		}
		ev := next(g, events)
		g.Expect(ev.Result).To(Equal(step.wantResult), "poll %d", i)
		if step.err == nil {
			g.Expect(ev.Err).NotTo(HaveOccurred(), "poll %d", i)
		} else {
			g.Expect(ev.Err).To(MatchError(step.err), "poll %d", i)
		}
		g.Expect(ev.First).To(Equal(step.first), "poll %d", i)
		g.Expect(ev.Changed).To(Equal(step.news), "poll %d", i)
	}
	g.Expect(src.count("repo")).To(Equal(len(steps)))
}

// Wait returns the first poll's outcome to a subscriber that joins before it ended; it
// does not wait for an id that follows nothing, and gives up with its context.
func TestWaitForTheFirstPoll(t *testing.T) {
	g := NewWithT(t)
	src := newFakeSource()
	src.block = make(chan struct{})
	s := New[string, string, string](Options{Jitter: noJitter}, src.poll)
	start(t, s)
	src.set("repo", "r1", nil)
	events := make(chan Event[string, string], 16)
	g.Expect(s.Subscribe(subscription("a", "repo", events))).To(Succeed())

	short, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	_, err := s.Wait(short, "a")
	g.Expect(err).To(MatchError(context.DeadlineExceeded))
	_, err = s.Wait(t.Context(), "nobody")
	g.Expect(err).To(MatchError(ErrNotSubscribed))
	g.Expect(s.TriggerFor("nobody")).To(MatchError(ErrNotSubscribed))

	close(src.block)
	ev, err := s.Wait(t.Context(), "a")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(ev.Result).To(Equal("r1"))
	g.Expect(ev.First).To(BeTrue())
}

// A poller's failures are forgotten with the poller: a source subscribed again starts
// with none, and the limiter keeps no entry of the ended poller.
func TestBackoffEndsWithItsPoller(t *testing.T) {
	g := NewWithT(t)
	clk := clocktesting.NewFakeClock(t0)
	src := newFakeSource()
	s := New[string, string, string](Options{Clock: clk, Jitter: noJitter, MinBackoff: time.Second, MaxBackoff: 8 * time.Second}, src.poll)
	start(t, s)
	src.set("repo", "", errors.New("down"))
	events := make(chan Event[string, string], 16)
	sub := subscription("a", "repo", events)
	g.Expect(s.Subscribe(sub)).To(Succeed())
	ev := next(g, events)
	g.Expect(ev.Failures).To(Equal(1))
	g.Expect(ev.Next).To(Equal(t0.Add(time.Second)), "the backoff replaces the minute's interval")
	g.Eventually(func() time.Time { t, _ := s.NextPoll("repo"); return t }).Should(Equal(t0.Add(time.Second)))
	clk.Step(time.Second)
	ev = next(g, events)
	g.Expect(ev.Failures).To(Equal(2))
	g.Expect(ev.Next).To(Equal(t0.Add(3 * time.Second)))

	s.mu.Lock()
	old := s.pollers["repo"]
	s.mu.Unlock()
	s.Unsubscribe("a")
	g.Eventually(func() int { return s.backoff.NumRequeues(old) }).Should(BeZero(), "an ended poller's count is forgotten")
	g.Expect(s.Failures("repo")).To(BeZero())

	g.Expect(s.Subscribe(sub)).To(Succeed())
	ev = next(g, events)
	g.Expect(ev.Failures).To(Equal(1), "a new poller starts with no failures")
	g.Expect(ev.First).To(BeTrue())
}

// Subscribers of one key share a poller, at the shortest interval any of them asks for;
// a cron schedule that never fires is refused.
func TestSharedPollerAtTheShortestInterval(t *testing.T) {
	g := NewWithT(t)
	clk := clocktesting.NewFakeClock(t0)
	src := newFakeSource()
	s := New[string, string, string](Options{Clock: clk, Jitter: noJitter}, src.poll)
	start(t, s)
	src.set("repo", "r1", nil)
	slow, fast := make(chan Event[string, string], 16), make(chan Event[string, string], 16)
	hourly := subscription("slow", "repo", slow)
	hourly.Interval = time.Hour
	g.Expect(s.Subscribe(hourly)).To(Succeed())
	next(g, slow)
	g.Eventually(func() time.Time { t, _ := s.NextPoll("repo"); return t }).Should(Equal(t0.Add(time.Hour)))

	cron := subscription("fast", "repo", fast)
	cron.Schedule = "*/5 * * * *"
	g.Expect(s.Subscribe(cron)).To(Succeed())
	at, _ := s.NextPoll("repo")
	g.Expect(at).To(Equal(t0.Add(5 * time.Minute)))
	ev, ok := s.Latest("fast")
	g.Expect(ok).To(BeTrue(), "a subscriber joining a polled source learns its state at once")
	g.Expect(ev.Result).To(Equal("r1"))

	clk.Step(5 * time.Minute)
	g.Expect(next(g, slow).Changed).To(BeFalse())
	g.Expect(next(g, fast).Time).To(Equal(t0.Add(5 * time.Minute)))
	g.Expect(src.count("repo")).To(Equal(2), "one poll for both")

	never := subscription("never", "repo", fast)
	never.Schedule = "0 0 30 2 *"
	g.Expect(s.Subscribe(never)).To(MatchError(ErrInvalidSchedule))
	never.Schedule = "every day"
	g.Expect(s.Subscribe(never)).To(MatchError(ErrInvalidSchedule))
}

// Stop ends the polls and Start; nothing is subscribed afterwards.
func TestStop(t *testing.T) {
	g := NewWithT(t)
	src := newFakeSource()
	s := New[string, string, string](Options{Jitter: noJitter}, src.poll)
	done := make(chan error, 1)
	go func() { done <- s.Start(context.Background()) }()
	events := make(chan Event[string, string], 16)
	g.Expect(s.Subscribe(subscription("a", "repo", events))).To(Succeed())
	next(g, events)

	s.Stop()
	g.Eventually(done).Should(Receive(BeNil()))
	g.Expect(s.Subscribe(subscription("b", "repo", events))).To(MatchError(ErrStopped))
	_, ok := s.Latest("a")
	g.Expect(ok).To(BeFalse())
	s.Stop() // twice is fine
}

// Validate is asked of a new or changed subscription only.
func TestValidate(t *testing.T) {
	g := NewWithT(t)
	src := newFakeSource()
	s := New[string, string, string](Options{Jitter: noJitter}, src.poll)
	asked := 0
	s.Validate = func(key string) error {
		asked++
		if key == "bad" {
			return errors.New("bad source")
		}
		return nil
	}
	events := make(chan Event[string, string], 16)
	g.Expect(s.Subscribe(subscription("a", "bad", events))).To(MatchError("bad source"))
	g.Expect(s.Subscribe(subscription("a", "repo", events))).To(Succeed())
	g.Expect(s.Subscribe(subscription("a", "repo", events))).To(Succeed())
	g.Expect(asked).To(Equal(2), "subscribing again unchanged costs nothing")
}
