package charts

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"k8s.io/utils/clock"

	"github.com/converge-gitops/converge/sources"
	"github.com/converge-gitops/converge/sources/poll"
)

// Defaults of the Scheduler.
const (
	DefaultPollInterval = poll.DefaultInterval
	DefaultPollTimeout  = poll.DefaultPollTimeout
	DefaultMaxPolls     = poll.DefaultMaxConcurrent
)

// ErrNotSubscribed is returned for an id that follows no chart.
var ErrNotSubscribed = errors.New("not subscribed to a chart")

// Subscription asks for a chart to be polled; Key is Source.Key() (subscribers of sources
// with the same key share one poller).
type Subscription = poll.Subscription[string, Source, Resolved]

// Event is the outcome of a poll: Result is the version found by the last successful poll.
type Event = poll.Event[string, Resolved]

// Scheduler polls charts on the daemon's one poll scheduler (package poll): one poller
// per Source.Key shared by its subscribers, at the shortest interval (or the earliest cron
// time) they ask for, at most DefaultMaxPolls at once, backing off exponentially while
// polls fail. It runs from the first subscription until Stop.
type Scheduler struct {
	// Client resolves the charts.
	Client *Client
	// Now tells the time of events (default time.Now).
	Now func() time.Time
	// PollTimeout bounds one poll (default 2m).
	PollTimeout time.Duration

	mu      sync.Mutex
	polls   *poll.Scheduler[string, Source, Resolved]
	stopped bool
}

// eventClock is the real clock, telling the time of events by Now.
type eventClock struct {
	clock.RealClock
	now func() time.Time
}

func (c eventClock) Now() time.Time { return c.now() }

// scheduler returns the poll scheduler, started on first use; nil once stopped.
func (s *Scheduler) scheduler() *poll.Scheduler[string, Source, Resolved] {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.polls == nil && !s.stopped {
		var clk clock.Clock = clock.RealClock{}
		if s.Now != nil {
			clk = eventClock{now: s.Now}
		}
		s.polls = poll.New[string, Source, Resolved](poll.Options{Clock: clk, PollTimeout: s.PollTimeout, Jitter: noJitter},
			func(ctx context.Context, src Source) (Resolved, error) { return s.Client.Resolve(ctx, src) })
		go func() { _ = s.polls.Start(context.Background()) }() // until Stop
	}
	return s.polls
}

// noJitter: a chart is polled at the interval asked for.
func noJitter(time.Duration) time.Duration { return 0 }

// Subscribe starts (or changes) a subscription; a new chart is polled at once. A bad
// schedule is an error matching sources.ErrInvalidSource.
func (s *Scheduler) Subscribe(sub Subscription) error {
	if sub.ID == "" {
		return fmt.Errorf("%w: subscription without id", sources.ErrInvalidSource)
	}
	polls := s.scheduler()
	if polls == nil {
		return errors.New("the chart scheduler is stopped")
	}
	sub.Key = sub.Source.Key()
	err := polls.Subscribe(sub)
	switch {
	case errors.Is(err, poll.ErrInvalidSchedule):
		return fmt.Errorf("%w: %v", sources.ErrInvalidSource, err)
	case errors.Is(err, poll.ErrStopped):
		return errors.New("the chart scheduler is stopped")
	}
	return err
}

// Unsubscribe ends a subscription; a chart left without subscribers stops being polled.
func (s *Scheduler) Unsubscribe(id string) {
	if polls := s.scheduler(); polls != nil {
		polls.Unsubscribe(id)
	}
}

// Stop ends every poller; the scheduler takes no subscription afterwards.
func (s *Scheduler) Stop() {
	s.mu.Lock()
	polls := s.polls
	s.stopped = true
	s.mu.Unlock()
	if polls != nil {
		polls.Stop()
	}
}

// Latest returns the last poll's outcome of the chart id follows, once polled.
func (s *Scheduler) Latest(id string) (Event, bool) {
	polls := s.scheduler()
	if polls == nil {
		return Event{}, false
	}
	ev, ok := polls.Latest(id)
	if !ok {
		return Event{}, false
	}
	return ev, true
}

// Wait waits for the first poll of the chart id follows and returns its latest outcome.
func (s *Scheduler) Wait(ctx context.Context, id string) (Event, error) {
	polls := s.scheduler()
	if polls == nil {
		return Event{}, ErrNotSubscribed
	}
	ev, err := polls.Wait(ctx, id)
	if errors.Is(err, poll.ErrNotSubscribed) {
		return Event{}, ErrNotSubscribed
	}
	if err != nil {
		return Event{}, err
	}
	return ev, nil
}

// Trigger asks for a poll of the chart id follows now; triggers coalesce.
func (s *Scheduler) Trigger(id string) error {
	polls := s.scheduler()
	if polls == nil {
		return ErrNotSubscribed
	}
	err := polls.TriggerFor(id)
	if errors.Is(err, poll.ErrNotSubscribed) {
		return ErrNotSubscribed
	}
	return err
}

// TriggerKey asks for a poll of the source with this key (Source.Key) now, whichever
// subscribers follow it, e.g. because a registry's push webhook named it; triggers
// coalesce as Trigger's do. It returns ErrNotSubscribed for a key no subscriber follows,
// and poll.ErrQueueFull when too many polls wait.
func (s *Scheduler) TriggerKey(key string) error {
	polls := s.scheduler()
	if polls == nil {
		return ErrNotSubscribed
	}
	err := polls.Trigger(key)
	if errors.Is(err, poll.ErrNotSubscribed) {
		return ErrNotSubscribed
	}
	return err
}
