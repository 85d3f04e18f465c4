package webhook

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	clocktesting "k8s.io/utils/clock/testing"
)

// TestTTLCache: concurrent callers of a key share one lookup; its outcome, an error too, is
// kept for the TTL and looked up again after it; a caller that gives up does not cancel the
// lookup the others wait for.
func TestTTLCache(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	start := time.Unix(1_700_000_000, 0)
	clk := clocktesting.NewFakePassiveClock(start)
	c := newTTLCache[string](time.Minute, clk)
	var loads atomic.Int64
	release := make(chan struct{})
	load := func(ctx context.Context) (string, error) {
		loads.Add(1)
		select {
		case <-release:
			return "v1", nil
		case <-ctx.Done():
			return "", ctx.Err()
		}
	}

	impatient, cancel := context.WithCancel(context.Background())
	first := make(chan error, 1)
	go func() {
		_, err := c.get(impatient, "k", load)
		first <- err
	}()
	g.Eventually(loads.Load).Should(BeEquivalentTo(1))
	var wg sync.WaitGroup
	got := make([]string, 50)
	for i := range got {
		wg.Go(func() { got[i], _ = c.get(context.Background(), "k", load) })
	}
	cancel() // the caller that started the lookup leaves; the lookup goes on
	close(release)
	wg.Wait()
	g.Expect(<-first).NotTo(HaveOccurred())
	g.Expect(loads.Load()).To(BeEquivalentTo(1))
	for _, v := range got {
		g.Expect(v).To(Equal("v1"))
	}

	failed := errors.New("secrets \"absent\" not found")
	var failures atomic.Int64
	fail := func(context.Context) (string, error) { failures.Add(1); return "", failed }
	for range 10 {
		_, err := c.get(context.Background(), "absent", fail)
		g.Expect(err).To(MatchError(failed))
	}
	g.Expect(failures.Load()).To(BeEquivalentTo(1), "a failed lookup is kept too")

	clk.SetTime(start.Add(59 * time.Second))
	v, _ := c.get(context.Background(), "k", func(context.Context) (string, error) { return "v2", nil })
	g.Expect(v).To(Equal("v1"), "within the TTL")
	clk.SetTime(start.Add(time.Minute))
	v, _ = c.get(context.Background(), "k", func(context.Context) (string, error) { return "v2", nil })
	g.Expect(v).To(Equal("v2"), "after the TTL")
	_, err := c.get(context.Background(), "absent", func(context.Context) (string, error) { return "now here", nil })
	g.Expect(err).NotTo(HaveOccurred())

	clk.SetTime(start.Add(3 * time.Minute))
	_, _ = c.get(context.Background(), "other", func(context.Context) (string, error) { return "", nil })
	c.mu.Lock()
	defer c.mu.Unlock()
	g.Expect(c.entries).To(HaveLen(1), "expired entries dropped")
}
