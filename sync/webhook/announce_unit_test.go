package webhook

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	. "github.com/onsi/gomega"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// heldWriter holds every Patch until release is closed, counting those under way.
type heldWriter struct {
	client.Writer
	release           chan struct{}
	inFlight, maxSeen atomic.Int32
	done              atomic.Int32
}

func (w *heldWriter) Patch(context.Context, client.Object, client.Patch, ...client.PatchOption) error {
	n := w.inFlight.Add(1)
	for {
		m := w.maxSeen.Load()
		if n <= m || w.maxSeen.CompareAndSwap(m, n) {
			break
		}
	}
	<-w.release
	w.inFlight.Add(-1)
	w.done.Add(1)
	return nil
}

// TestAnnouncementsAreSentByFewWorkers: announcing a push to many SyncTargets returns at
// once and sends at most maxAnnouncing patches at a time, all of them in the end.
func TestAnnouncementsAreSentByFewWorkers(t *testing.T) {
	g := NewWithT(t)
	w := &heldWriter{release: make(chan struct{})}
	a := newAnnouncer(w, clock.RealClock{}, time.Minute, logr.Discard())
	const targets = 50
	for i := range targets {
		a.announce(client.ObjectKey{Namespace: "team", Name: fmt.Sprint("t", i)})
	}
	g.Eventually(w.inFlight.Load).Should(BeEquivalentTo(maxAnnouncing))
	g.Consistently(w.inFlight.Load).WithTimeout(100 * time.Millisecond).Should(BeEquivalentTo(maxAnnouncing))
	close(w.release)
	g.Eventually(w.done.Load).Should(BeEquivalentTo(targets))
	g.Expect(w.maxSeen.Load()).To(BeEquivalentTo(maxAnnouncing))
	a.mu.Lock()
	defer a.mu.Unlock()
	g.Expect(a.workers).To(BeZero(), "the workers stop when the queue is empty")
}
