package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
	"github.com/converge-gitops/converge/internal/actions"
	"github.com/converge-gitops/converge/sync/reconciler"
)

// waitOptions are --wait and --timeout of the verbs that ask the daemon for a sync.
type waitOptions struct {
	wait    bool
	timeout time.Duration
}

func (o *waitOptions) BindFlags(fs *pflag.FlagSet) {
	fs.BoolVar(&o.wait, "wait", true, "wait for the daemon to act on the request and report the outcome")
	fs.DurationVar(&o.timeout, "timeout", 5*time.Minute, "how long --wait waits for the outcome")
}

func (o *waitOptions) Validate() error {
	if o.wait && o.timeout <= 0 {
		return usageError(fmt.Errorf("--timeout must be positive, not %s", o.timeout))
	}
	return nil
}

// reconcileOptions are the flags of `converge reconcile`.
type reconcileOptions struct {
	cli  cliOptions
	wait waitOptions
}

func newReconcileCommand() *cobra.Command {
	o := &reconcileOptions{}
	cmd := forOneSyncTarget(&cobra.Command{
		Use:   "reconcile NAME",
		Short: "Ask the daemon to sync a SyncTarget now, and wait for the outcome",
		Long: `Ask the daemon to sync a SyncTarget now (also a revision that was rolled back before), by
setting the annotation ` + convergev1.RequestedAtAnnotation + `.

With --wait (the default) it follows the sync — on a terminal as a live progress line, otherwise
one line per step — and exits 0 once the SyncTarget is Ready, or 1 with the reason when the sync
failed or was rolled back, when the SyncTarget is suspended or stalled, or at --timeout.`,
		Example: `  converge reconcile shop -n team-a
  converge reconcile shop --timeout 10m
  converge reconcile shop --wait=false`,
	}, &o.cli, o.run)
	o.wait.BindFlags(cmd.Flags())
	return cmd
}

func (o *reconcileOptions) run(ctx context.Context, out io.Writer, name string) error {
	if err := o.wait.Validate(); err != nil {
		return err
	}
	st, c, err := getSyncTarget(ctx, &o.cli, name)
	if err != nil {
		return err
	}
	key := client.ObjectKeyFromObject(st)
	if st.Spec.Suspend {
		return suspendedError(key)
	}
	requested := newRequestToken()
	if err := actions.RequestReconcile(ctx, c, st, requested); err != nil {
		return err
	}
	if _, err := fmt.Fprintf(out, "requested a reconcile of SyncTarget %s\n", key); err != nil {
		return err
	}
	if !o.wait.wait {
		return nil
	}
	return waitForSync(ctx, &o.cli, out, key, requested, o.wait.timeout)
}

// newRequestToken is a fresh value for the requestedAt annotation.
func newRequestToken() string { return actions.NewRequestToken() }

func suspendedError(key client.ObjectKey) error { return actions.SuspendedError(key) }

// syncProgress is what a SyncTarget's status says about a requested sync.
type syncProgress struct {
	// message says what is happening, in one line.
	message string
	// handled is true once the daemon has taken up the request.
	handled bool
	// done is true at the outcome: err is nil when the SyncTarget is Ready.
	done bool
	err  error
}

// waitingForDaemon is the message shown until the daemon takes up the request.
const waitingForDaemon = "waiting for the daemon to take up the request"

// observeSync reads the outcome of the sync requested with the requestedAt value
// requested from a SyncTarget, the way the daemon (sync.Reconciler) writes its status:
//
//   - before it takes up a request, it may report why it cannot: a fetch that fails or a
//     dependency that is not ready (Reconciling=True with that reason), a closed sync
//     window (Ready=False, OutsideSyncWindow), a bad spec (Stalled=True), a suspension;
//   - it takes it up in the first status write that sets status.lastHandledReconcileAt to
//     the value: with Reconciling=True ("applying <revision>", "waiting for N objects …")
//     when the revision adds objects or a step lasts, else with the outcome itself;
//   - at the outcome it removes Reconciling and sets Ready=True, or Ready=False with the
//     reason (RolledBack, HealthCheckFailed, ApplyFailed, BuildFailed, …) and a history
//     entry saying why; transient failures (FetchFailed, PruneFailed) keep Reconciling=True
//     while they are retried.
func observeSync(st *convergev1.SyncTarget, requested string) syncProgress {
	key := client.ObjectKeyFromObject(st)
	if !st.DeletionTimestamp.IsZero() {
		return syncProgress{done: true, err: fmt.Errorf("SyncTarget %s is being deleted", key)}
	}
	if st.Spec.Suspend {
		return syncProgress{done: true, err: suspendedError(key)}
	}
	conds := st.Status.Conditions
	ready := apimeta.FindStatusCondition(conds, convergev1.ReadyCondition)
	reconciling := apimeta.FindStatusCondition(conds, convergev1.ReconcilingCondition)
	if reconciling != nil && reconciling.Status != metav1.ConditionTrue {
		reconciling = nil
	}
	// Stalled stays until a sync succeeds; only one about the current spec counts.
	if s := apimeta.FindStatusCondition(conds, convergev1.StalledCondition); s != nil &&
		s.Status == metav1.ConditionTrue && s.ObservedGeneration == st.Generation {
		return syncProgress{done: true, err: fmt.Errorf("SyncTarget %s is stalled (%s): %s", key, s.Reason, s.Message)}
	}

	handled := requested != "" && st.Status.LastHandledReconcileAt == requested
	if !handled {
		switch {
		case reconciling != nil && reconciling.Reason != convergev1.ProgressingReason:
			return syncProgress{message: retrying(reconciling)}
		case ready != nil && ready.Status == metav1.ConditionFalse && ready.Reason == convergev1.OutsideSyncWindowReason:
			return syncProgress{message: "waiting: " + progressMessage(ready.Message)}
		}
		return syncProgress{message: waitingForDaemon}
	}
	if reconciling != nil {
		if reconciling.Reason != convergev1.ProgressingReason {
			return syncProgress{handled: true, message: retrying(reconciling)}
		}
		return syncProgress{handled: true, message: progressMessage(reconciling.Message)}
	}
	if ready == nil || ready.Status == metav1.ConditionUnknown {
		return syncProgress{handled: true, message: "waiting for the outcome"}
	}
	if ready.Status == metav1.ConditionTrue {
		return syncProgress{handled: true, done: true, message: progressMessage(ready.Message)}
	}
	why := ready.Message
	if h := st.Status.History; len(h) > 0 && h[0].Result != convergev1.SyncSucceeded && h[0].Message != "" &&
		h[0].Revision == st.Status.LastAttemptedRevision {
		why = h[0].Message
	}
	return syncProgress{handled: true, done: true,
		err: fmt.Errorf("sync of %s failed (%s): %s", key, ready.Reason, oneLine(why, 0))}
}

// retrying describes a failure the daemon retries.
func retrying(c *metav1.Condition) string {
	msg := c.Reason + ": " + c.Message
	if !strings.Contains(c.Message, "retrying") {
		msg += " (retrying)"
	}
	return progressMessage(msg)
}

// progressMessage is a status message fit for a progress line.
func progressMessage(msg string) string {
	return oneLine(longSHA.ReplaceAllString(msg, "$1$2"), maxTableMessage)
}

// waitForSync follows the SyncTarget key until the daemon has handled the request
// requested and reports the outcome: nil when it is Ready, an error saying why otherwise.
func waitForSync(ctx context.Context, cli *cliOptions, out io.Writer, key client.ObjectKey,
	requested string, timeout time.Duration) error {
	cfg, err := cli.kube.restConfig()
	if err != nil {
		return err
	}
	wc, err := client.NewWithWatch(cfg, client.Options{Scheme: cliScheme()})
	if err != nil {
		return fmt.Errorf("connecting to the cluster: %w", err)
	}
	deadline := time.Now().Add(timeout)
	waitCtx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	w := &syncWaiter{key: key, requested: requested, deadline: deadline, last: syncProgress{message: waitingForDaemon},
		line: &progressLine{out: out, tty: isTerminal(out), now: time.Now}}
	w.line.color = colorizer(w.line.tty)
	defer w.spin()()
	lw := syncTargetListWatch(wc, client.InNamespace(key.Namespace), client.MatchingFields{"metadata.name": key.Name})
	err = followSyncTargets(waitCtx, lw, w.listed, w.changed)

	w.mu.Lock()
	defer w.mu.Unlock()
	if w.succeeded {
		return err // whether the success could be written
	}
	w.line.stop()
	switch {
	case err != nil:
		return err
	case ctx.Err() != nil:
		return ctx.Err()
	}
	msg := fmt.Sprintf("timed out after %s waiting for SyncTarget %s: %s", timeout, key, w.last.message)
	if !w.last.handled && w.last.message == waitingForDaemon {
		msg += " (is converge serve running, and does it watch this SyncTarget?)"
	}
	return errors.New(msg)
}

// syncWaiter is what waitForSync knows of the sync it waits for, and its progress line.
type syncWaiter struct {
	key       client.ObjectKey
	requested string
	deadline  time.Time

	mu        sync.Mutex // the spinner redraws the line meanwhile
	line      *progressLine
	last      syncProgress
	seen      string // the resourceVersion observed last
	succeeded bool
}

func (w *syncWaiter) listed(items []convergev1.SyncTarget) (bool, error) {
	if len(items) == 0 {
		return w.observe(nil)
	}
	return w.observe(&items[0])
}

func (w *syncWaiter) changed(typ watch.EventType, st *convergev1.SyncTarget) (bool, error) {
	if typ == watch.Deleted {
		st = nil
	}
	return w.observe(st)
}

// observe shows how far the sync of st (nil: deleted) is, and is done once it has an outcome.
func (w *syncWaiter) observe(st *convergev1.SyncTarget) (bool, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if st == nil {
		return true, fmt.Errorf("SyncTarget %s was deleted", w.key)
	}
	if w.seen != "" && !newerResourceVersion(st.ResourceVersion, w.seen) {
		return false, nil // the follow replaying its first list
	}
	w.seen = st.ResourceVersion
	w.last = observeSync(st, w.requested)
	if !w.last.handled && !w.last.done {
		if err := closedWindowError(st, time.Now(), w.deadline); err != nil {
			return true, err
		}
	}
	switch {
	case !w.last.done:
		return false, w.line.update(w.last.message)
	case w.last.err != nil:
		return true, w.last.err
	}
	w.succeeded = true
	return true, w.line.succeed(fmt.Sprintf("SyncTarget %s is ready: %s", w.key, w.last.message))
}

// spin redraws the progress line every 100ms on a terminal until the function it returns
// is called.
func (w *syncWaiter) spin() (stop func()) {
	if !w.line.tty {
		return func() {}
	}
	t := time.NewTicker(100 * time.Millisecond)
	quit, ended := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(ended)
		for {
			select {
			case <-quit:
				return
			case <-t.C:
				w.mu.Lock()
				w.line.redraw()
				w.mu.Unlock()
			}
		}
	}()
	return func() {
		t.Stop()
		close(quit)
		<-ended
	}
}

// closedWindowError fails a wait at once when the sync windows of st stay closed past
// deadline: the daemon takes a request up only while they allow a sync.
func closedWindowError(st *convergev1.SyncTarget, now, deadline time.Time) error {
	if len(st.Spec.SyncWindows) == 0 {
		return nil
	}
	allowed, next, err := reconciler.SyncAllowed(now, st.Spec.SyncWindows)
	if err != nil || allowed || !next.After(deadline) {
		return nil
	}
	return fmt.Errorf("SyncTarget %s is outside its sync windows until %s: the daemon takes the request up then",
		client.ObjectKeyFromObject(st), next.UTC().Format(time.RFC3339))
}

// progressLine shows the steps of a sync: on a terminal one live line with a spinner and
// the time spent in the step, which stays behind when the next step begins; elsewhere
// one line per step.
type progressLine struct {
	out   io.Writer
	tty   bool
	color colorizer
	now   func() time.Time

	current string
	since   time.Time
	frame   int
}

var spinnerFrames = []string{"⠋", "⠙", "⠹", "⠸", "⠼", "⠴", "⠦", "⠧", "⠇", "⠏"}

func (p *progressLine) update(msg string) error {
	if msg == p.current {
		return nil
	}
	if !p.tty {
		p.current = msg
		_, err := fmt.Fprintln(p.out, msg)
		return err
	}
	p.stop()
	p.current, p.since = msg, p.now()
	p.redraw()
	return nil
}

func (p *progressLine) elapsed() string {
	return p.now().Sub(p.since).Round(time.Second).String()
}

// redraw rewrites the live line (terminal only).
func (p *progressLine) redraw() {
	if !p.tty || p.current == "" {
		return
	}
	p.frame = (p.frame + 1) % len(spinnerFrames)
	_, _ = fmt.Fprintf(p.out, "\r\x1b[K%s %s %s", p.color.wrap(ansiCyan, spinnerFrames[p.frame]), p.current,
		p.color.wrap(ansiYellow, "("+p.elapsed()+")"))
}

// stop leaves the current step behind as a finished line (terminal only).
func (p *progressLine) stop() {
	if !p.tty || p.current == "" {
		return
	}
	_, _ = fmt.Fprintf(p.out, "\r\x1b[K  %s (%s)\n", p.current, p.elapsed())
	p.current = ""
}

func (p *progressLine) succeed(msg string) error {
	p.stop()
	if p.tty {
		msg = p.color.wrap(ansiGreen, "✓") + " " + msg
	}
	_, err := fmt.Fprintln(p.out, msg)
	return err
}
