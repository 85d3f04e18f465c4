package charts

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/robfig/cron/v3"

	"github.com/converge-gitops/converge/sources"
)

// Defaults of the Scheduler.
const (
	DefaultPollInterval = time.Minute
	DefaultPollTimeout  = 2 * time.Minute
	DefaultMaxPolls     = 4
	minBackoff          = 5 * time.Second
	maxBackoff          = 5 * time.Minute
)

// ErrNotSubscribed is returned for an id that follows no chart.
var ErrNotSubscribed = errors.New("not subscribed to a chart")

// Subscription asks for a chart to be polled.
type Subscription struct {
	// ID identifies the subscriber, e.g. "<namespace>/<name>" of a SyncTarget; subscribing
	// again with the same ID replaces its subscription (for free when nothing changed).
	ID string
	// Source is the chart. Subscribers of sources with the same Key share one poller.
	Source Source
	// Interval between polls (default 1m). Ignored when Schedule is set.
	Interval time.Duration
	// Schedule polls on a cron schedule instead (five fields or a descriptor, optionally
	// prefixed with CRON_TZ=<zone>).
	Schedule string
	// Notify is called after every poll, from the poller's goroutine; it must return
	// quickly.
	Notify func(Event)
}

// Event is the outcome of a poll.
type Event struct {
	// Resolved is the version found by the last successful poll (zero until one succeeds).
	Resolved Resolved
	// Err is this poll's error, nil when it succeeded.
	Err error
	// Changed says the poll found another version than the one before, or failed, or
	// recovered; First says it is the poller's first poll.
	Changed, First bool
	// Time is when the poll ended.
	Time time.Time
}

// Scheduler polls charts: one poller per Source.Key shared by its subscribers, at the
// shortest interval (or the earliest cron time) they ask for, at most DefaultMaxPolls at
// once, backing off exponentially while polls fail. Pollers run from the first
// subscription to the last unsubscription, or Stop.
type Scheduler struct {
	// Client resolves the charts.
	Client *Client
	// Now tells the time of events (default time.Now).
	Now func() time.Time
	// PollTimeout bounds one poll (default 2m).
	PollTimeout time.Duration

	mu      sync.Mutex
	pollers map[string]*poller
	subs    map[string]*subscriber
	slots   chan struct{}
	stopped bool
}

type subscriber struct {
	id, key  string
	interval time.Duration
	schedule string
	cron     cron.Schedule
	notify   func(Event)
}

type poller struct {
	src     Source
	subs    map[string]*subscriber
	last    Event
	polled  bool
	first   chan struct{} // closed when the first poll ended
	trigger chan struct{} // poll now
	resched chan struct{} // the subscribers changed: compute the next poll again
	stop    chan struct{}
	failing int
	ended   time.Time // when the last poll ended, by the real clock
}

// Subscribe starts (or changes) a subscription; a new chart is polled at once. A bad
// schedule is an error matching sources.ErrInvalidSource.
func (s *Scheduler) Subscribe(sub Subscription) error {
	if sub.ID == "" {
		return fmt.Errorf("%w: subscription without id", sources.ErrInvalidSource)
	}
	ns := &subscriber{id: sub.ID, key: sub.Source.Key(), interval: sub.Interval, schedule: sub.Schedule, notify: sub.Notify}
	if ns.interval <= 0 {
		ns.interval = DefaultPollInterval
	}
	if sub.Schedule != "" {
		sched, err := cron.ParseStandard(sub.Schedule)
		if err != nil {
			return fmt.Errorf("%w: schedule %q: %v", sources.ErrInvalidSource, sub.Schedule, err)
		}
		ns.cron = sched
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		return errors.New("the chart scheduler is stopped")
	}
	if s.pollers == nil {
		s.pollers, s.subs = map[string]*poller{}, map[string]*subscriber{}
	}
	if old, ok := s.subs[sub.ID]; ok && old.key == ns.key {
		p := s.pollers[ns.key]
		p.subs[ns.id] = ns
		s.subs[ns.id] = ns
		if old.interval != ns.interval || old.schedule != ns.schedule {
			signal(p.resched)
		}
		return nil
	}
	s.removeLocked(sub.ID)
	p, ok := s.pollers[ns.key]
	if !ok {
		p = &poller{src: sub.Source, subs: map[string]*subscriber{}, first: make(chan struct{}),
			trigger: make(chan struct{}, 1), resched: make(chan struct{}, 1), stop: make(chan struct{})}
		s.pollers[ns.key] = p
		go s.run(p)
	}
	p.subs[ns.id] = ns
	s.subs[ns.id] = ns
	signal(p.resched)
	return nil
}

// Unsubscribe ends a subscription; a chart left without subscribers stops being polled.
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
	delete(p.subs, id)
	if len(p.subs) == 0 {
		delete(s.pollers, sub.key)
		close(p.stop)
	}
}

// Stop ends every poller; the scheduler takes no subscription afterwards.
func (s *Scheduler) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stopped = true
	for id := range s.subs {
		s.removeLocked(id)
	}
}

// Latest returns the last poll's outcome of the chart id follows, once polled.
func (s *Scheduler) Latest(id string) (Event, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.pollerLocked(id)
	if p == nil || !p.polled {
		return Event{}, false
	}
	return p.last, true
}

// Wait waits for the first poll of the chart id follows and returns its latest outcome.
func (s *Scheduler) Wait(ctx context.Context, id string) (Event, error) {
	s.mu.Lock()
	p := s.pollerLocked(id)
	s.mu.Unlock()
	if p == nil {
		return Event{}, ErrNotSubscribed
	}
	select {
	case <-p.first:
	case <-ctx.Done():
		return Event{}, ctx.Err()
	}
	if ev, ok := s.Latest(id); ok {
		return ev, nil
	}
	return Event{}, ErrNotSubscribed
}

// Trigger asks for a poll of the chart id follows now; triggers coalesce.
func (s *Scheduler) Trigger(id string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.pollerLocked(id)
	if p == nil {
		return ErrNotSubscribed
	}
	signal(p.trigger)
	return nil
}

func (s *Scheduler) pollerLocked(id string) *poller {
	sub, ok := s.subs[id]
	if !ok {
		return nil
	}
	return s.pollers[sub.key]
}

// run polls p until it is stopped.
func (s *Scheduler) run(p *poller) {
	for {
		s.poll(p)
		if !s.wait(p) {
			return
		}
	}
}

// wait waits for p's next poll; false when p was stopped.
func (s *Scheduler) wait(p *poller) bool {
	for {
		timer := time.NewTimer(s.delay(p))
		select {
		case <-p.stop:
			timer.Stop()
			return false
		case <-p.trigger:
			timer.Stop()
			return true
		case <-timer.C:
			return true
		case <-p.resched:
			timer.Stop()
		}
	}
}

// poll resolves p's chart once and tells its subscribers.
func (s *Scheduler) poll(p *poller) {
	s.mu.Lock()
	if s.slots == nil {
		s.slots = make(chan struct{}, DefaultMaxPolls)
	}
	slots := s.slots
	s.mu.Unlock()
	slots <- struct{}{}
	timeout := s.PollTimeout
	if timeout <= 0 {
		timeout = DefaultPollTimeout
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	go func() {
		select {
		case <-p.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	r, err := s.Client.Resolve(ctx, p.src)
	cancel()
	<-slots

	s.mu.Lock()
	ev := s.record(p, r, err)
	notify := make([]func(Event), 0, len(p.subs))
	for _, sub := range p.subs {
		if sub.notify != nil {
			notify = append(notify, sub.notify)
		}
	}
	s.mu.Unlock()
	for _, n := range notify {
		n(ev)
	}
}

// record keeps the outcome of a poll of p; s.mu is held.
func (s *Scheduler) record(p *poller, r Resolved, err error) Event {
	prev, polled := p.last, p.polled
	ev := Event{Resolved: r, Err: err, First: !polled, Time: s.now()}
	if err != nil {
		ev.Resolved = prev.Resolved
		p.failing++
	} else {
		p.failing = 0
	}
	ev.Changed = !polled || ev.Resolved != prev.Resolved || (err == nil) != (prev.Err == nil) ||
		(err != nil && prev.Err != nil && err.Error() != prev.Err.Error())
	p.last, p.polled, p.ended = ev, true, time.Now()
	if !polled {
		close(p.first)
	}
	return ev
}

// delay is how long p waits before its next poll: until the earliest time any subscriber
// wants after the last poll, or the backoff while polls fail.
func (s *Scheduler) delay(p *poller) time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	var next time.Time
	for _, sub := range p.subs {
		t := p.ended.Add(sub.interval)
		if sub.cron != nil {
			if t = sub.cron.Next(p.ended); t.IsZero() {
				t = p.ended.Add(24 * time.Hour)
			}
		}
		if next.IsZero() || t.Before(next) {
			next = t
		}
	}
	if p.failing > 0 {
		b := min(minBackoff<<min(p.failing-1, 10), maxBackoff)
		if t := p.ended.Add(b); t.Before(next) {
			next = t
		}
	}
	if next.IsZero() {
		return time.Hour // no subscriber left: p is being stopped
	}
	return max(time.Until(next), 0)
}

func (s *Scheduler) now() time.Time {
	if s.Now != nil {
		return s.Now()
	}
	return time.Now()
}

func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}
