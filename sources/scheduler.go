package sources

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/converge-gitops/converge/sources/poll"
)

// Defaults of SchedulerOptions.
const (
	DefaultInterval      = poll.DefaultInterval
	DefaultMaxConcurrent = poll.DefaultMaxConcurrent
	DefaultPollTimeout   = poll.DefaultPollTimeout
	DefaultMinBackoff    = poll.DefaultMinBackoff
	DefaultMaxBackoff    = poll.DefaultMaxBackoff
	DefaultQueueSize     = poll.DefaultQueueSize
)

var (
	// ErrQueueFull is returned by Trigger when too many polls wait already; retry later.
	ErrQueueFull = poll.ErrQueueFull
	// ErrNotSubscribed is returned by Trigger for a key no subscriber polls.
	ErrNotSubscribed = poll.ErrNotSubscribed
)

// SchedulerOptions configures a Scheduler. Zero values take the defaults.
type SchedulerOptions struct {
	// Cache, when set, receives every new revision (Checkout) before subscribers are told, so
	// that they find it there; an unchanged revision is found in the cache without network.
	Cache *Cache
	// Options are the poll scheduler's: clock, concurrency, timeout, jitter, backoff, queue.
	poll.Options
}

// Subscription asks for a source to be polled on a schedule.
type Subscription struct {
	// ID identifies the subscriber, e.g. "<namespace>/<name>" of a SyncTarget. Subscribing
	// again with the same ID replaces the subscription; when nothing changed, that costs nothing.
	ID string
	// Source to poll.
	Source Source
	// Interval between polls (default 1m, plus jitter). Ignored when Schedule is set.
	Interval time.Duration
	// Schedule polls on a cron schedule instead: five fields or a descriptor (@hourly,
	// @every 5m), optionally prefixed with CRON_TZ=<zone>.
	Schedule string
	// Notify is called after a poll that found a new revision, failed, or recovered — not after
	// one that found the same revision again. It is called from a worker goroutine, one call at
	// a time per source, and must return quickly (enqueue work, don't do it).
	Notify func(Event)
}

// Event is the outcome of a poll.
type Event struct {
	// Key of the polled source.
	Key Key
	// Revision is the latest revision resolved; it outlives failures (zero until one succeeds).
	Revision Revision
	// Dir is the checkout of Revision, when the scheduler has a Cache.
	Dir string
	// Err is the error of this poll, nil if it succeeded.
	Err error
	// Failures counts the polls that failed in a row.
	Failures int
	// Time is when the poll finished.
	Time time.Time
	// Next is when the next poll is due.
	Next time.Time
}

// Polled is what a poll of a Git source finds: the revision its ref points at and, with
// a Cache, its checkout.
type Polled struct {
	Revision Revision
	Dir      string
}

// Scheduler polls Git sources on the daemon's one poll scheduler (package poll): one
// poller per distinct (URL, ref, credentials) shared by all its subscribers, at most
// MaxConcurrent polls at once, each bounded by PollTimeout, with exponential backoff on
// failure. A poll lists the refs and, with a Cache, checks a new revision out before the
// subscribers are told. Triggers (webhooks) are coalesced: while a poll of a source runs,
// any number of triggers for it cause at most one more poll.
//
// It is a manager.Runnable: Start runs it until its context ends.
type Scheduler struct {
	opts  SchedulerOptions
	polls *poll.Scheduler[Key, Source, Polled]

	// resolve is Resolve; tests may count calls through it.
	resolve func(context.Context, Source) (Revision, error)
}

// NewScheduler returns a scheduler; call Start to run it.
func NewScheduler(opts SchedulerOptions) *Scheduler {
	s := &Scheduler{opts: opts, resolve: Resolve}
	s.polls = poll.New[Key, Source, Polled](opts.Options, s.poll)
	s.polls.Validate = func(src Source) error {
		if _, err := newRemote(src); err != nil {
			return wrapErr(context.Background(), "poll", src.URL, newRedactor(src.URL, src.Auth), err)
		}
		return nil
	}
	return s
}

// Polls is the scheduler underneath, of which other kinds of subscriber (the directory
// generators of SyncTargetSets) may subscribe to the same pollers.
func (s *Scheduler) Polls() *poll.Scheduler[Key, Source, Polled] { return s.polls }

// poll resolves the source and checks the revision out.
func (s *Scheduler) poll(ctx context.Context, src Source) (Polled, error) {
	rev, err := s.resolve(ctx, src)
	if err != nil {
		return Polled{}, err
	}
	dir := ""
	if s.opts.Cache != nil {
		if dir, err = s.opts.Cache.Checkout(ctx, src, rev); err != nil {
			return Polled{}, err
		}
	}
	return Polled{Revision: rev, Dir: dir}, nil
}

// Subscribe starts (or updates) a subscription. A new source is polled at once; a subscriber
// joining a source already polled learns its state from Latest and hears of the next change.
// The source and schedule are checked here: errors match ErrInvalidSource.
func (s *Scheduler) Subscribe(sub Subscription) error {
	if sub.ID == "" {
		return fmt.Errorf("%w: subscription without id", ErrInvalidSource)
	}
	var notify func(poll.Event[Key, Polled])
	if sub.Notify != nil {
		notify = func(ev poll.Event[Key, Polled]) {
			if ev.Changed || ev.Err != nil {
				sub.Notify(gitEvent(ev))
			}
		}
	}
	err := s.polls.Subscribe(poll.Subscription[Key, Source, Polled]{ID: sub.ID, Key: sub.Source.Key(), Source: sub.Source,
		Interval: sub.Interval, Schedule: sub.Schedule, Notify: notify})
	if errors.Is(err, poll.ErrInvalidSchedule) {
		return fmt.Errorf("%w: %v", ErrInvalidSource, err)
	}
	return err
}

func gitEvent(ev poll.Event[Key, Polled]) Event {
	return Event{Key: ev.Key, Revision: ev.Result.Revision, Dir: ev.Result.Dir, Err: ev.Err,
		Failures: ev.Failures, Time: ev.Time, Next: ev.Next}
}

// Unsubscribe ends a subscription; a source left without subscribers stops being polled.
func (s *Scheduler) Unsubscribe(id string) { s.polls.Unsubscribe(id) }

// Trigger asks for a poll of the source with this key now, e.g. because a webhook said it
// changed. Triggers coalesce: one for a source already waiting is absorbed, and any number
// arriving while it is polled cause one more poll after. It returns ErrQueueFull when QueueSize
// polls are waiting, and ErrNotSubscribed for an unknown key.
func (s *Scheduler) Trigger(key Key) error { return s.polls.Trigger(key) }

// Latest returns the last poll outcome of the source subscriber id follows, if it was polled.
func (s *Scheduler) Latest(id string) (Event, bool) {
	ev, ok := s.polls.Latest(id)
	if !ok {
		return Event{}, false
	}
	return gitEvent(ev), true
}

// NextPoll returns when the source with this key is next due; the zero time while a poll of it
// is waiting or running.
func (s *Scheduler) NextPoll(key Key) (time.Time, bool) { return s.polls.NextPoll(key) }

// Start runs the scheduler until ctx ends, then waits for running polls to stop.
func (s *Scheduler) Start(ctx context.Context) error { return s.polls.Start(ctx) }
