package webhook

import (
	"context"
	"encoding/json"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	convergev1 "github.com/converge-gitops/converge/api/v1alpha1"
)

// DefaultAnnounceEvery is the least time between two announcements of pushes to one SyncTarget.
const DefaultAnnounceEvery = time.Second

// announcer tells the replica that reconciles a SyncTarget, whichever it is (the leader, or
// the shard that owns it), that a push was accepted for its repository: it merge-patches the
// converge.dev/pushedAt annotation, whose change wakes that replica's reconciler. Pushes to one
// SyncTarget are coalesced to one patch every `every`: a push within it is announced when it
// ends, so that the last push is never lost, and a flood of valid pushes costs one request per
// target and second.
type announcer struct {
	writer client.Writer
	clock  clock.PassiveClock
	every  time.Duration
	log    logr.Logger

	mu      sync.Mutex
	targets map[client.ObjectKey]*announced
	// queue holds the announcements to send, by at most maxAnnouncing workers: they are
	// sent beside the answer to the push, which waits for none of them (a repository many
	// SyncTargets follow would otherwise hold the push for a round trip each, and its first
	// poll for one).
	queue   []announcement
	workers int
}

// maxAnnouncing is how many announcements are sent at once.
const maxAnnouncing = 8

// announcement is a patch of pushedAt to send.
type announcement struct {
	key client.ObjectKey
	at  time.Time
}

// announced is when a SyncTarget's pushedAt was last patched, and whether a patch waits for
// the end of the window.
type announced struct {
	at      time.Time
	pending bool
}

func newAnnouncer(w client.Writer, clk clock.PassiveClock, every time.Duration, log logr.Logger) *announcer {
	if every <= 0 {
		every = DefaultAnnounceEvery
	}
	return &announcer{writer: w, clock: clk, every: every, log: log, targets: map[client.ObjectKey]*announced{}}
}

// announce patches pushedAt on the SyncTarget now, or once the window of its last patch ends;
// it does not wait for the patch.
func (a *announcer) announce(key client.ObjectKey) {
	a.mu.Lock()
	now := a.clock.Now()
	a.sweep(now)
	t, ok := a.targets[key]
	switch {
	case !ok || now.Sub(t.at) >= a.every:
		a.targets[key] = &announced{at: now}
		a.enqueueLocked(key, now)
		a.mu.Unlock()
		return
	case !t.pending:
		t.pending = true
		time.AfterFunc(t.at.Add(a.every).Sub(now), func() { a.trailing(key) })
	}
	a.mu.Unlock()
}

// trailing announces the pushes that arrived during a window, at its end.
func (a *announcer) trailing(key client.ObjectKey) {
	a.mu.Lock()
	now := a.clock.Now()
	a.targets[key] = &announced{at: now}
	a.enqueueLocked(key, now)
	a.mu.Unlock()
}

// sweep forgets the SyncTargets whose window ended with nothing pending.
func (a *announcer) sweep(now time.Time) {
	for k, t := range a.targets {
		if !t.pending && now.Sub(t.at) >= a.every {
			delete(a.targets, k)
		}
	}
}

// enqueueLocked queues an announcement, and starts a worker for it when fewer than
// maxAnnouncing run.
func (a *announcer) enqueueLocked(key client.ObjectKey, at time.Time) {
	a.queue = append(a.queue, announcement{key: key, at: at})
	if a.workers < maxAnnouncing {
		a.workers++
		go a.work()
	}
}

// work sends queued announcements until none is left.
func (a *announcer) work() {
	for {
		a.mu.Lock()
		if len(a.queue) == 0 {
			a.workers--
			a.mu.Unlock()
			return
		}
		next := a.queue[0]
		a.queue = a.queue[1:]
		a.mu.Unlock()
		a.patch(next.key, next.at)
	}
}

// patch sets pushedAt to at: one merge patch of the annotation alone.
func (a *announcer) patch(key client.ObjectKey, at time.Time) {
	body, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{
		convergev1.PushedAtAnnotation: at.UTC().Format(time.RFC3339Nano)}}})
	if err != nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), webhookLoadTimeout)
	defer cancel()
	st := &convergev1.SyncTarget{}
	st.Namespace, st.Name = key.Namespace, key.Name
	if err := a.writer.Patch(ctx, st, client.RawPatch(types.MergePatchType, body)); err != nil {
		a.log.Error(err, "webhook: announcing the push", "target", key.String())
	}
}
