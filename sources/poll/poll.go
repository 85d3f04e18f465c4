// Package poll is the one poll scheduler of the daemon: Git sources, chart repositories
// and the Git sources of SyncTargetSets' directory generators are polled by it. A source
// is polled by one poller shared by every subscriber that follows it (the same key), on
// the shortest interval or the earliest cron time they ask for, at most MaxConcurrent
// polls at once, each bounded by PollTimeout, with exponential backoff while it fails.
// Triggers (a push a webhook announced, a reconcile a user asked for) coalesce: while a
// poll of a source waits or runs, any number of them cause at most one more poll.
//
// What a poll is — list the refs and fetch, read a repository index — is the caller's:
// the scheduler only decides when, and tells the subscribers.
package poll

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"
	_ "time/tzdata" // CRON_TZ needs zone data even where the image has none

	"github.com/robfig/cron/v3"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"
)

// Defaults of Options.
const (
	DefaultInterval      = time.Minute
	DefaultMaxConcurrent = 4
	DefaultPollTimeout   = 2 * time.Minute
	DefaultMinBackoff    = 5 * time.Second
	DefaultMaxBackoff    = 5 * time.Minute
	DefaultQueueSize     = 1024
)

var (
	// ErrQueueFull is returned by Trigger when too many polls wait already; retry later.
	ErrQueueFull = errors.New("poll queue is full")
	// ErrNotSubscribed is returned for a key no subscriber polls, or an id that follows
	// no source.
	ErrNotSubscribed = errors.New("no subscriber polls this source")
	// ErrInvalidSchedule is returned by Subscribe for a cron schedule that does not parse or
	// never fires.
	ErrInvalidSchedule = errors.New("invalid schedule")
	// ErrStopped is returned by Subscribe once the scheduler was stopped.
	ErrStopped = errors.New("the poll scheduler is stopped")
)

// Options configures a Scheduler. Zero values take the defaults.
type Options struct {
	// Clock drives intervals, cron schedules and backoff (default: the real clock).
	Clock clock.Clock
	// MaxConcurrent bounds the polls running at once (default 4).
	MaxConcurrent int
	// PollTimeout bounds one poll (default 2m).
	PollTimeout time.Duration
	// Jitter returns the random delay added to an interval or a backoff d, to spread polls
	// (default: up to a tenth of d). Cron schedules get none.
	Jitter func(d time.Duration) time.Duration
	// MinBackoff and MaxBackoff bound the exponential delay after failed polls (defaults 5s,
	// 5m). While a source fails, the backoff replaces its schedule.
	MinBackoff, MaxBackoff time.Duration
	// QueueSize bounds the polls waiting for a worker; Trigger returns ErrQueueFull beyond
	// it (default 1024).
	QueueSize int
}

// Subscription asks for a source to be polled on a schedule.
type Subscription[K comparable, S any, R comparable] struct {
	// ID identifies the subscriber, e.g. "<namespace>/<name>" of a SyncTarget. Subscribing
	// again with the same ID replaces the subscription; when nothing changed, that costs
	// nothing.
	ID string
	// Key names the source: subscribers of the same key share one poller, which polls the
	// Source of the first of them.
	Key K
	// Source is what the poll function is given.
	Source S
	// Interval between polls (default 1m, plus jitter). Ignored when Schedule is set.
	Interval time.Duration
	// Schedule polls on a cron schedule instead: five fields or a descriptor (@hourly,
	// @every 5m), optionally prefixed with CRON_TZ=<zone>.
	Schedule string
	// Notify is called after every poll of the source, from a worker goroutine, one call at a
	// time per source, in order; it must return quickly (enqueue work, don't do it).
	Notify func(Event[K, R])
}

// Event is the outcome of a poll.
type Event[K comparable, R comparable] struct {
	// Key of the polled source.
	Key K
	// Result is the latest result of a successful poll; it outlives failures (zero until one
	// succeeds).
	Result R
	// Err is the error of this poll, nil if it succeeded.
	Err error
	// Failures counts the polls that failed in a row.
	Failures int
	// First says this is the poller's first poll.
	First bool
	// Changed says there is news: the first poll, another result than the poll before,
	// a failure after a success or the other way round, or another error.
	Changed bool
	// Time is when the poll finished.
	Time time.Time
	// Next is when the next poll is due.
	Next time.Time
}

// Scheduler polls sources with poll; see the package. It is a manager.Runnable: Start runs
// it until its context ends or Stop.
type Scheduler[K comparable, S any, R comparable] struct {
	// Validate, when set, checks the source of a new or changed subscription; Subscribe
	// returns its error.
	Validate func(S) error

	opts Options
	poll func(context.Context, S) (R, error)

	mu      sync.Mutex
	pollers map[K]*poller[K, S, R]
	subs    map[string]*subscriber[K, R]
	queue   []*poller[K, S, R]
	started bool
	stopped bool
	stop    chan struct{} // closed by Stop

	wake chan struct{} // the timer loop re-reads the schedule
	work chan struct{} // a worker finds a poll in the queue

	// backoff counts each poller's failures in a row and gives the delay before its next
	// attempt: MinBackoff doubled per failure up to MaxBackoff. A success or the poller's
	// end forgets them. It is keyed by poller, not by key, so that a poller ended while its
	// poll ran and a new one for the same source never share a count.
	backoff workqueue.TypedRateLimiter[*poller[K, S, R]]
}

type pollState int

const (
	idle pollState = iota
	queued
	running
)

type subscriber[K comparable, R comparable] struct {
	id       string
	key      K
	interval time.Duration
	schedule string
	cron     cron.Schedule
	notify   func(Event[K, R])
}

type poller[K comparable, S any, R comparable] struct {
	key    K
	src    S
	subs   map[string]*subscriber[K, R]
	state  pollState
	rerun  bool
	next   time.Time
	last   Event[K, R]
	polled bool
	first  chan struct{} // closed when the first poll ended
}

// New returns a scheduler that polls with poll; call Start to run it.
func New[K comparable, S any, R comparable](opts Options, poll func(context.Context, S) (R, error)) *Scheduler[K, S, R] {
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	if opts.MaxConcurrent <= 0 {
		opts.MaxConcurrent = DefaultMaxConcurrent
	}
	if opts.PollTimeout <= 0 {
		opts.PollTimeout = DefaultPollTimeout
	}
	if opts.Jitter == nil {
		opts.Jitter = TenthJitter
	}
	if opts.MinBackoff <= 0 {
		opts.MinBackoff = DefaultMinBackoff
	}
	if opts.MaxBackoff < opts.MinBackoff {
		opts.MaxBackoff = max(DefaultMaxBackoff, opts.MinBackoff)
	}
	if opts.QueueSize <= 0 {
		opts.QueueSize = DefaultQueueSize
	}
	return &Scheduler[K, S, R]{
		opts:    opts,
		poll:    poll,
		pollers: map[K]*poller[K, S, R]{},
		subs:    map[string]*subscriber[K, R]{},
		stop:    make(chan struct{}),
		wake:    make(chan struct{}, 1),
		work:    make(chan struct{}, 1),
		backoff: workqueue.NewTypedItemExponentialFailureRateLimiter[*poller[K, S, R]](opts.MinBackoff, opts.MaxBackoff),
	}
}

// TenthJitter is the default jitter: a random delay up to a tenth of d.
func TenthJitter(d time.Duration) time.Duration {
	if d < 10 {
		return 0
	}
	return rand.N(d / 10)
}

// Subscribe starts (or updates) a subscription. A new source is polled at once; a
// subscriber joining a source already polled learns its state from Latest and hears of the
// next poll. A bad schedule is an error matching ErrInvalidSchedule.
func (s *Scheduler[K, S, R]) Subscribe(sub Subscription[K, S, R]) error {
	if sub.ID == "" {
		return errors.New("subscription without id")
	}
	interval := sub.Interval
	if interval <= 0 {
		interval = DefaultInterval
	}
	s.mu.Lock()
	if s.stopped {
		s.mu.Unlock()
		return ErrStopped
	}
	if old, ok := s.subs[sub.ID]; ok && old.key == sub.Key && old.schedule == sub.Schedule && old.interval == interval {
		old.notify = sub.Notify
		s.mu.Unlock()
		return nil
	}
	s.mu.Unlock()

	if s.Validate != nil {
		if err := s.Validate(sub.Source); err != nil {
			return err
		}
	}
	ns := &subscriber[K, R]{id: sub.ID, key: sub.Key, interval: interval, schedule: sub.Schedule, notify: sub.Notify}
	if sub.Schedule != "" {
		sched, err := ParseSchedule(sub.Schedule, s.opts.Clock.Now())
		if err != nil {
			return err
		}
		ns.cron = sched
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		return ErrStopped
	}
	s.subscribeLocked(ns, sub.Source)
	signal(s.wake)
	return nil
}

// ParseSchedule parses a cron schedule as Subscribe does: an error matching
// ErrInvalidSchedule when it does not parse or never fires after now.
func ParseSchedule(schedule string, now time.Time) (cron.Schedule, error) {
	sched, err := cron.ParseStandard(schedule)
	if err != nil {
		return nil, fmt.Errorf("%w %q: %v", ErrInvalidSchedule, schedule, err)
	}
	if sched.Next(now).IsZero() {
		return nil, fmt.Errorf("%w %q: it never fires", ErrInvalidSchedule, schedule)
	}
	return sched, nil
}

// subscribeLocked adds ns, polling src, in place of any subscription with its id.
func (s *Scheduler[K, S, R]) subscribeLocked(ns *subscriber[K, R], src S) {
	if old, ok := s.subs[ns.id]; ok && old.key == ns.key {
		// Same source, new schedule: keep the poller and its state.
		p := s.pollers[ns.key]
		p.subs[ns.id] = ns
		s.subs[ns.id] = ns
		if p.state == idle && p.polled && p.last.Err == nil {
			p.next = s.nextScheduled(p, p.last.Time)
		}
		return
	}
	s.removeLocked(ns.id)
	p, ok := s.pollers[ns.key]
	if !ok {
		p = &poller[K, S, R]{key: ns.key, src: src, subs: map[string]*subscriber[K, R]{}, first: make(chan struct{})}
		s.pollers[ns.key] = p // next is zero: due now
	}
	p.subs[ns.id] = ns
	s.subs[ns.id] = ns
	if p.state == idle && p.polled && p.last.Err == nil {
		if t := s.nextFor(ns, p.last.Time); t.Before(p.next) {
			p.next = t
		}
	}
}

// Unsubscribe ends a subscription; a source left without subscribers stops being polled.
func (s *Scheduler[K, S, R]) Unsubscribe(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.removeLocked(id)
}

func (s *Scheduler[K, S, R]) removeLocked(id string) {
	sub, ok := s.subs[id]
	if !ok {
		return
	}
	delete(s.subs, id)
	p := s.pollers[sub.key]
	if p == nil {
		return
	}
	delete(p.subs, id)
	if len(p.subs) > 0 {
		return
	}
	delete(s.pollers, p.key)
	s.backoff.Forget(p)
	for i, q := range s.queue {
		if q == p {
			s.queue = append(s.queue[:i], s.queue[i+1:]...)
			break
		}
	}
}

// Stop ends every subscription and the scheduler: Start returns, and Subscribe returns
// ErrStopped from now on.
func (s *Scheduler[K, S, R]) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		return
	}
	s.stopped = true
	for id := range s.subs {
		s.removeLocked(id)
	}
	close(s.stop)
}

// Trigger asks for a poll of the source with this key now, e.g. because a webhook said it
// changed. Triggers coalesce: one for a source already waiting is absorbed, and any number
// arriving while it is polled cause one more poll after. It returns ErrQueueFull when
// QueueSize polls are waiting, and ErrNotSubscribed for an unknown key.
func (s *Scheduler[K, S, R]) Trigger(key K) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	p, ok := s.pollers[key]
	if !ok {
		return ErrNotSubscribed
	}
	return s.triggerLocked(p)
}

// TriggerFor is Trigger for the source subscriber id follows.
func (s *Scheduler[K, S, R]) TriggerFor(id string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.pollerLocked(id)
	if p == nil {
		return ErrNotSubscribed
	}
	return s.triggerLocked(p)
}

func (s *Scheduler[K, S, R]) triggerLocked(p *poller[K, S, R]) error {
	switch p.state {
	case queued:
		return nil
	case running:
		p.rerun = true
		return nil
	}
	if len(s.queue) >= s.opts.QueueSize {
		return ErrQueueFull
	}
	s.enqueueLocked(p)
	return nil
}

func (s *Scheduler[K, S, R]) pollerLocked(id string) *poller[K, S, R] {
	sub, ok := s.subs[id]
	if !ok {
		return nil
	}
	return s.pollers[sub.key]
}

// Latest returns the last poll outcome of the source subscriber id follows, if it was
// polled.
func (s *Scheduler[K, S, R]) Latest(id string) (Event[K, R], bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.pollerLocked(id)
	if p == nil || !p.polled {
		return Event[K, R]{}, false
	}
	return p.last, true
}

// Wait waits for the first poll of the source subscriber id follows and returns its latest
// outcome; ErrNotSubscribed when id follows none.
func (s *Scheduler[K, S, R]) Wait(ctx context.Context, id string) (Event[K, R], error) {
	s.mu.Lock()
	p := s.pollerLocked(id)
	s.mu.Unlock()
	if p == nil {
		return Event[K, R]{}, ErrNotSubscribed
	}
	select {
	case <-p.first:
	case <-ctx.Done():
		return Event[K, R]{}, ctx.Err()
	}
	if ev, ok := s.Latest(id); ok {
		return ev, nil
	}
	return Event[K, R]{}, ErrNotSubscribed
}

// NextPoll returns when the source with this key is next due; the zero time while a poll
// of it is waiting or running.
func (s *Scheduler[K, S, R]) NextPoll(key K) (time.Time, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	p, ok := s.pollers[key]
	if !ok {
		return time.Time{}, false
	}
	if p.state != idle {
		return time.Time{}, true
	}
	return p.next, true
}

// Failures returns how many polls of the source with this key failed in a row.
func (s *Scheduler[K, S, R]) Failures(key K) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	p, ok := s.pollers[key]
	if !ok {
		return 0
	}
	return s.backoff.NumRequeues(p)
}

// Start runs the scheduler until ctx ends or Stop, then waits for running polls to stop.
func (s *Scheduler[K, S, R]) Start(ctx context.Context) error {
	s.mu.Lock()
	if s.started {
		s.mu.Unlock()
		return errors.New("scheduler already started")
	}
	s.started = true
	s.mu.Unlock()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-s.stop:
			cancel()
		case <-ctx.Done():
		}
	}()

	var wg sync.WaitGroup
	defer wg.Wait()
	for range s.opts.MaxConcurrent {
		wg.Go(func() { s.worker(ctx) })
	}
	for {
		wait, ok := s.enqueueDue()
		var timer clock.Timer
		var fire <-chan time.Time
		if ok {
			timer = s.opts.Clock.NewTimer(wait)
			fire = timer.C()
		}
		select {
		case <-ctx.Done():
		case <-s.wake:
		case <-fire:
		}
		if timer != nil {
			timer.Stop()
		}
		if ctx.Err() != nil {
			return nil
		}
	}
}

// enqueueDue queues the idle pollers that are due and returns how long until the next one
// is.
func (s *Scheduler[K, S, R]) enqueueDue() (time.Duration, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.opts.Clock.Now()
	var earliest time.Time
	for _, p := range s.pollers {
		if p.state != idle {
			continue
		}
		if !p.next.After(now) {
			s.enqueueLocked(p)
			continue
		}
		if earliest.IsZero() || p.next.Before(earliest) {
			earliest = p.next
		}
	}
	if earliest.IsZero() {
		return 0, false
	}
	return earliest.Sub(now), true
}

func (s *Scheduler[K, S, R]) enqueueLocked(p *poller[K, S, R]) {
	p.state = queued
	s.queue = append(s.queue, p)
	signal(s.work)
}

func (s *Scheduler[K, S, R]) worker(ctx context.Context) {
	for {
		s.mu.Lock()
		var p *poller[K, S, R]
		if len(s.queue) > 0 {
			p = s.queue[0]
			s.queue = s.queue[1:]
			p.state = running
			p.rerun = false
			if len(s.queue) > 0 {
				signal(s.work) // wake another worker for the rest
			}
		}
		s.mu.Unlock()
		if p == nil {
			select {
			case <-ctx.Done():
				return
			case <-s.work:
				continue
			}
		}
		if !s.pollOnce(ctx, p) {
			return
		}
	}
}

// pollOnce polls p's source and tells its subscribers. It reports false when the
// scheduler is stopping.
func (s *Scheduler[K, S, R]) pollOnce(ctx context.Context, p *poller[K, S, R]) bool {
	pctx, cancel := context.WithTimeout(ctx, s.opts.PollTimeout)
	result, err := s.poll(pctx, p.src)
	cancel()
	if ctx.Err() != nil {
		return false
	}

	s.mu.Lock()
	ev := s.recordLocked(p, result, err)
	var notify []func(Event[K, R])
	for _, sub := range p.subs {
		if sub.notify != nil {
			notify = append(notify, sub.notify)
		}
	}
	s.mu.Unlock()

	// Told before the poller can run again, so that events of one source arrive in order.
	for _, n := range notify {
		n(ev)
	}

	s.mu.Lock()
	switch {
	case s.pollers[p.key] != p:
		p.state = idle // unsubscribed meanwhile
		s.backoff.Forget(p)
	case p.rerun:
		s.enqueueLocked(p)
	default:
		p.state = idle
	}
	s.mu.Unlock()
	signal(s.wake)
	return true
}

// recordLocked keeps the outcome of a poll of p and schedules its next; s.mu is held.
func (s *Scheduler[K, S, R]) recordLocked(p *poller[K, S, R], result R, err error) Event[K, R] {
	now := s.opts.Clock.Now()
	prev, polled := p.last, p.polled
	ev := Event[K, R]{Key: p.key, Time: now, Result: result, Err: err, First: !polled}
	if err != nil {
		ev.Result = prev.Result
		b := s.backoff.When(p)
		p.next = now.Add(b + s.opts.Jitter(b))
	} else {
		s.backoff.Forget(p)
		p.next = s.nextScheduled(p, now)
	}
	ev.Failures = s.backoff.NumRequeues(p)
	ev.Next = p.next
	ev.Changed = !polled || ev.Result != prev.Result || (err == nil) != (prev.Err == nil) ||
		(err != nil && prev.Err != nil && err.Error() != prev.Err.Error())
	p.last, p.polled = ev, true
	if !polled {
		close(p.first)
	}
	return ev
}

// nextScheduled is when p is due after a successful poll at now: the earliest time any
// subscriber wants. (While it fails, the backoff replaces this.)
func (s *Scheduler[K, S, R]) nextScheduled(p *poller[K, S, R], now time.Time) time.Time {
	var next time.Time
	for _, sub := range p.subs {
		if t := s.nextFor(sub, now); next.IsZero() || t.Before(next) {
			next = t
		}
	}
	return next
}

func (s *Scheduler[K, S, R]) nextFor(sub *subscriber[K, R], after time.Time) time.Time {
	if sub.cron != nil {
		if t := sub.cron.Next(after); !t.IsZero() {
			return t
		}
		return after.Add(24 * time.Hour) // no match within five years: look again tomorrow
	}
	return after.Add(sub.interval + s.opts.Jitter(sub.interval))
}

func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}
