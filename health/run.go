package health

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"
)

// waitRun is one Wait under way: the report it keeps, the streams that feed it updates
// and the context they run in, cancelled as soon as the verdict is in.
type waitRun struct {
	checker *Checker
	opts    Options
	start   time.Time
	report  Report
	updates chan update
	ctx     context.Context
	cancel  context.CancelFunc
	wg      sync.WaitGroup
}

// run starts the streams and applies their updates until every object is Current, one
// has Failed, the timeout expires or ctx ends.
func (w *waitRun) run(ctx context.Context, streams []*stream) (Report, error) {
	timeout := w.opts.timeout()
	deadline := w.checker.clock.NewTimer(timeout)
	defer deadline.Stop()
	slow, stopSlow := w.slowTimer()
	defer stopSlow()
	if decide(w.report.Objects) != anyFailed {
		for _, s := range streams {
			w.startStream(s)
		}
	}
	for {
		switch decide(w.report.Objects) {
		case allCurrent:
			return w.done(nil)
		case anyFailed:
			return w.done(&Error{Err: ErrFailed, Total: len(w.report.Objects), NotReady: w.report.NotReady()})
		}
		select {
		case <-ctx.Done():
			return w.done(interrupted(ctx, w.report))
		case <-slow:
			slow = nil
			w.opts.OnSlow(w.snapshot())
		case <-deadline.C():
			return w.done(&Error{Err: ErrTimeout, Timeout: timeout, Total: len(w.report.Objects), NotReady: w.report.NotReady()})
		case u := <-w.updates:
			w.apply(u)
		}
	}
}

// slowTimer arms the call of opts.OnSlow when the wait is not over already: at once when
// opts.Slow is zero, else when the returned channel fires. The function stops the timer.
func (w *waitRun) slowTimer() (<-chan time.Time, func()) {
	if w.opts.OnSlow == nil || decide(w.report.Objects) != waiting {
		return nil, func() {}
	}
	if w.opts.Slow <= 0 {
		w.opts.OnSlow(Report{Objects: slices.Clone(w.report.Objects)})
		return nil, func() {}
	}
	t := w.checker.clock.NewTimer(w.opts.Slow)
	return t.C(), func() { t.Stop() }
}

// startStream runs s until the wait is over.
func (w *waitRun) startStream(s *stream) {
	w.wg.Go(func() { s.run(w.ctx, w.checker.clock, w.send) })
}

// send hands an update to the loop of run and waits until it is applied, so that a
// stream whose news ended the wait opens no further watch. It reports whether the wait
// goes on.
func (w *waitRun) send(u update) bool {
	u.applied = make(chan struct{})
	select {
	case w.updates <- u:
	case <-w.ctx.Done():
		return false
	}
	select {
	case <-u.applied:
	case <-w.ctx.Done():
	}
	return w.ctx.Err() == nil
}

// apply records the statuses of u and starts the stream of the objects it hands off. Once
// the verdict is in, the streams are stopped before u is acknowledged.
func (w *waitRun) apply(u update) {
	for _, r := range u.results {
		w.report.Objects[r.index].Status = r.status
		w.report.Objects[r.index].Message = r.message
	}
	if u.from != nil && len(u.handOff) > 0 {
		w.startStream(u.from.fallback(u.handOff))
	}
	if w.checker.observe != nil {
		w.checker.observe(w.snapshot())
	}
	if decide(w.report.Objects) != waiting {
		w.cancel()
	}
	close(u.applied)
}

// snapshot is a copy of the report so far.
func (w *waitRun) snapshot() Report {
	return Report{Objects: slices.Clone(w.report.Objects), Elapsed: w.checker.clock.Since(w.start)}
}

// done ends the wait with err: the report says how long it took.
func (w *waitRun) done(err error) (Report, error) {
	w.report.Elapsed = w.checker.clock.Since(w.start)
	return w.report, err
}

// stop ends the streams and waits until they are gone.
func (w *waitRun) stop() {
	w.cancel()
	w.wg.Wait()
}

// interrupted is the error of a wait whose ctx ended first: with ctx's cause when it has
// one, and as an *Error naming what was not ready when the caller's deadline passed,
// since that is a timeout too.
func interrupted(ctx context.Context, report Report) error {
	if cause := context.Cause(ctx); cause != ctx.Err() {
		return fmt.Errorf("health check interrupted: %w: %w", ctx.Err(), cause)
	}
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return &Error{Err: fmt.Errorf("health check interrupted: %w", ctx.Err()),
			Total: len(report.Objects), NotReady: report.NotReady()}
	}
	return fmt.Errorf("health check interrupted: %w", ctx.Err())
}
