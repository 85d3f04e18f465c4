package sources

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

// Defaults of SchedulerOptions.
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
	// ErrNotSubscribed is returned by Trigger for a key no subscriber polls.
	ErrNotSubscribed = errors.New("no subscriber polls this source")
)

// SchedulerOptions configures a Scheduler. Zero values take the defaults.
type SchedulerOptions struct {
	// Cache, when set, receives every new revision (Checkout) before subscribers are told, so
	// that they find it there; an unchanged revision is found in the cache without network.
	Cache *Cache
	// Clock drives intervals, cron schedules and backoff (default: the real clock).
	Clock clock.Clock
	// MaxConcurrent bounds the polls (ref listing and fetch) running at once (default 4).
	MaxConcurrent int
	// PollTimeout bounds one poll, ref listing and fetch together (default 2m).
	PollTimeout time.Duration
	// Jitter returns the random delay added to an interval or a backoff d, to spread polls
	// (default: up to a tenth of d). Cron schedules get none.
	Jitter func(d time.Duration) time.Duration
	// MinBackoff and MaxBackoff bound the exponential delay after failed polls (defaults 5s, 5m).
	// While a source fails, the backoff replaces its schedule.
	MinBackoff, MaxBackoff time.Duration
	// QueueSize bounds the polls waiting for a worker; Trigger returns ErrQueueFull beyond it
	// (default 1024).
	QueueSize int
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

// Scheduler polls sources: one poller per distinct (URL, ref, credentials) shared by all its
// subscribers, at most MaxConcurrent polls at once, each bounded by PollTimeout, with
// exponential backoff on failure. Triggers (webhooks) are coalesced: while a poll of a source
// runs, any number of triggers for it cause at most one more poll.
//
// It is a manager.Runnable: Start runs it until its context ends.
type Scheduler struct {
	opts SchedulerOptions

	mu      sync.Mutex
	pollers map[Key]*poller
	subs    map[string]*subscriber
	queue   []*poller
	started bool

	wake chan struct{} // the timer loop re-reads the schedule
	work chan struct{} // a worker finds a poll in the queue

	// backoff counts each poller's failures in a row and gives the delay before its next
	// attempt: MinBackoff doubled per failure up to MaxBackoff. A success or the poller's end
	// forgets them. It is keyed by poller, not by Key, so that a poller ended while its poll ran
	// and a new one for the same source never share a count.
	backoff workqueue.TypedRateLimiter[*poller]

	// resolve is Resolve; tests may count calls through it.
	resolve func(context.Context, Source) (Revision, error)
}

type pollState int

const (
	idle pollState = iota
	queued
	running
)

type subscriber struct {
	id       string
	key      Key
	interval time.Duration
	schedule string
	cron     cron.Schedule
	notify   func(Event)
}

type poller struct {
	key    Key
	src    Source
	subs   map[string]*subscriber
	state  pollState
	rerun  bool
	next   time.Time
	last   Event
	polled bool
}

// NewScheduler returns a scheduler; call Start to run it.
func NewScheduler(opts SchedulerOptions) *Scheduler {
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
		opts.Jitter = func(d time.Duration) time.Duration {
			if d < 10 {
				return 0
			}
			return rand.N(d / 10)
		}
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
	return &Scheduler{
		opts:    opts,
		pollers: map[Key]*poller{},
		subs:    map[string]*subscriber{},
		wake:    make(chan struct{}, 1),
		work:    make(chan struct{}, 1),
		backoff: workqueue.NewTypedItemExponentialFailureRateLimiter[*poller](opts.MinBackoff, opts.MaxBackoff),
		resolve: Resolve,
	}
}

// Subscribe starts (or updates) a subscription. A new source is polled at once; a subscriber
// joining a source already polled learns its state from Latest and hears of the next change.
// The source and schedule are checked here: errors match ErrInvalidSource.
func (s *Scheduler) Subscribe(sub Subscription) error {
	if sub.ID == "" {
		return fmt.Errorf("%w: subscription without id", ErrInvalidSource)
	}
	key := sub.Source.Key()
	interval := sub.Interval
	if interval <= 0 {
		interval = DefaultInterval
	}

	s.mu.Lock()
	if old, ok := s.subs[sub.ID]; ok && old.key == key && old.schedule == sub.Schedule && old.interval == interval {
		old.notify = sub.Notify
		s.mu.Unlock()
		return nil
	}
	s.mu.Unlock()

	ns, err := s.newSubscriber(sub, key, interval)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.subscribeLocked(ns, sub.Source)
	signal(s.wake)
	return nil
}

// newSubscriber checks the source and parses the schedule of sub.
func (s *Scheduler) newSubscriber(sub Subscription, key Key, interval time.Duration) (*subscriber, error) {
	if _, err := newRemote(sub.Source); err != nil {
		return nil, wrapErr(context.Background(), "poll", sub.Source.URL, newRedactor(sub.Source.URL, sub.Source.Auth), err)
	}
	ns := &subscriber{id: sub.ID, key: key, interval: interval, schedule: sub.Schedule, notify: sub.Notify}
	if sub.Schedule == "" {
		return ns, nil
	}
	sched, err := cron.ParseStandard(sub.Schedule)
	if err != nil {
		return nil, fmt.Errorf("%w: schedule %q: %v", ErrInvalidSource, sub.Schedule, err)
	}
	if sched.Next(s.opts.Clock.Now()).IsZero() {
		return nil, fmt.Errorf("%w: schedule %q never fires", ErrInvalidSource, sub.Schedule)
	}
	ns.cron = sched
	return ns, nil
}

// subscribeLocked adds ns, polling src, in place of any subscription with its id.
func (s *Scheduler) subscribeLocked(ns *subscriber, src Source) {
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
		p = &poller{key: ns.key, src: src, subs: map[string]*subscriber{}}
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
func (s *Scheduler) Unsubscribe(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.removeLocked(id)
}

func (s *Scheduler) removeLocked(id string) {
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

// Trigger asks for a poll of the source with this key now, e.g. because a webhook said it
// changed. Triggers coalesce: one for a source already waiting is absorbed, and any number
// arriving while it is polled cause one more poll after. It returns ErrQueueFull when QueueSize
// polls are waiting, and ErrNotSubscribed for an unknown key.
func (s *Scheduler) Trigger(key Key) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	p, ok := s.pollers[key]
	if !ok {
		return ErrNotSubscribed
	}
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

// Latest returns the last poll outcome of the source subscriber id follows, if it was polled.
func (s *Scheduler) Latest(id string) (Event, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sub, ok := s.subs[id]
	if !ok {
		return Event{}, false
	}
	p := s.pollers[sub.key]
	if p == nil || !p.polled {
		return Event{}, false
	}
	return p.last, true
}

// NextPoll returns when the source with this key is next due; the zero time while a poll of it
// is waiting or running.
func (s *Scheduler) NextPoll(key Key) (time.Time, bool) {
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

// Start runs the scheduler until ctx ends, then waits for running polls to stop.
func (s *Scheduler) Start(ctx context.Context) error {
	s.mu.Lock()
	if s.started {
		s.mu.Unlock()
		return errors.New("scheduler already started")
	}
	s.started = true
	s.mu.Unlock()

	var wg sync.WaitGroup
	defer wg.Wait()
	for range s.opts.MaxConcurrent {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.worker(ctx)
		}()
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

// enqueueDue queues the idle pollers that are due and returns how long until the next one is.
func (s *Scheduler) enqueueDue() (time.Duration, bool) {
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

func (s *Scheduler) enqueueLocked(p *poller) {
	p.state = queued
	s.queue = append(s.queue, p)
	signal(s.work)
}

func (s *Scheduler) worker(ctx context.Context) {
	for {
		s.mu.Lock()
		var p *poller
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
		if !s.poll(ctx, p) {
			return
		}
	}
}

// poll resolves the source and checks the revision out, then tells the subscribers when
// something changed. It reports false when the scheduler is stopping.
func (s *Scheduler) poll(ctx context.Context, p *poller) bool {
	pctx, cancel := context.WithTimeout(ctx, s.opts.PollTimeout)
	rev, err := s.resolve(pctx, p.src)
	dir := ""
	if err == nil && s.opts.Cache != nil {
		dir, err = s.opts.Cache.Checkout(pctx, p.src, rev)
	}
	cancel()
	if ctx.Err() != nil {
		return false
	}

	now := s.opts.Clock.Now()
	s.mu.Lock()
	prev, polled := p.last, p.polled
	ev := Event{Key: p.key, Time: now, Revision: rev, Dir: dir}
	if err != nil {
		ev.Revision, ev.Dir, ev.Err = prev.Revision, prev.Dir, err
		b := s.backoff.When(p)
		p.next = now.Add(b + s.opts.Jitter(b))
	} else {
		s.backoff.Forget(p)
		p.next = s.nextScheduled(p, now)
	}
	ev.Failures = s.backoff.NumRequeues(p)
	ev.Next = p.next
	p.last, p.polled = ev, true
	var notify []func(Event)
	if !polled || err != nil || prev.Err != nil || prev.Revision != rev {
		for _, sub := range p.subs {
			if sub.notify != nil {
				notify = append(notify, sub.notify)
			}
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

// nextScheduled is when p is due after a successful poll at now: the earliest time any
// subscriber wants. (While it fails, the backoff replaces this.)
func (s *Scheduler) nextScheduled(p *poller, now time.Time) time.Time {
	var next time.Time
	for _, sub := range p.subs {
		if t := s.nextFor(sub, now); next.IsZero() || t.Before(next) {
			next = t
		}
	}
	return next
}

func (s *Scheduler) nextFor(sub *subscriber, after time.Time) time.Time {
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
