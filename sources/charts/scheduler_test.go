package charts

import (
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/converge-gitops/converge/sources"
)

// TestSchedulerSharesAPollerAndReportsFailures: subscribers of one chart share a poller;
// a failed poll is an event with its error and the last version found, its recovery
// another.
func TestSchedulerSharesAPollerAndReportsFailures(t *testing.T) {
	g := NewWithT(t)
	repo := newHelmRepo(t, false)
	repo.add(repoChart{name: "small", version: "1.0.0", archive: packageChart(t, "small", small("1.0.0"))})
	var failing atomic.Bool
	inner := repo.srv.Config.Handler
	repo.srv.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if failing.Load() {
			http.Error(w, "down", http.StatusServiceUnavailable)
			return
		}
		inner.ServeHTTP(w, r)
	})
	s := &Scheduler{Client: newClient(t)}
	t.Cleanup(s.Stop)
	events := make(chan Event, 16)
	src := Source{Repository: repo.srv.URL, Name: "small"}
	g.Expect(s.Subscribe(Subscription{ID: "a", Source: src, Interval: time.Hour, Notify: func(ev Event) { events <- ev }})).To(Succeed())
	g.Expect(s.Subscribe(Subscription{ID: "b", Source: src, Schedule: "@every 1h"})).To(Succeed())
	ev, err := s.Wait(t.Context(), "b")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(ev.Result.Version).To(Equal("1.0.0"))
	g.Expect(ev.First).To(BeTrue())
	g.Eventually(events).Should(Receive())
	g.Expect(repo.requests.Load()).To(Equal(int64(1)), "one poll for both")

	failing.Store(true)
	g.Expect(s.Trigger("b")).To(Succeed())
	g.Eventually(events).WithTimeout(10 * time.Second).Should(Receive(&ev))
	g.Expect(ev.Err).To(MatchError(ContainSubstring("503 Service Unavailable")))
	g.Expect(ev.Changed).To(BeTrue())
	g.Expect(ev.Result.Version).To(Equal("1.0.0"), "the last version found outlives a failure")

	failing.Store(false)
	g.Expect(s.Trigger("a")).To(Succeed())
	g.Eventually(events).WithTimeout(10 * time.Second).Should(Receive(&ev))
	g.Expect(ev.Err).NotTo(HaveOccurred())
	g.Expect(ev.Changed).To(BeTrue(), "recovered")

	g.Expect(s.Subscribe(Subscription{ID: "c", Source: src, Schedule: "every day"})).To(MatchError(sources.ErrInvalidSource))
	s.Unsubscribe("a")
	s.Unsubscribe("b")
	g.Expect(s.Trigger("a")).To(MatchError(ErrNotSubscribed))
}

// TestSchedulerTriggerKey: a trigger by source key polls the chart its subscribers share
// once more, and tells them; a key no subscriber follows is ErrNotSubscribed.
func TestSchedulerTriggerKey(t *testing.T) {
	g := NewWithT(t)
	repo := newHelmRepo(t, false)
	repo.add(repoChart{name: "small", version: "1.0.0", archive: packageChart(t, "small", small("1.0.0"))})
	s := &Scheduler{Client: newClient(t)}
	t.Cleanup(s.Stop)
	src := Source{Repository: repo.srv.URL, Name: "small"}
	g.Expect(s.TriggerKey(src.Key())).To(MatchError(ErrNotSubscribed), "before any subscription")
	events := make(chan Event, 16)
	g.Expect(s.Subscribe(Subscription{ID: "a", Source: src, Interval: time.Hour, Notify: func(ev Event) { events <- ev }})).To(Succeed())
	g.Expect(s.Subscribe(Subscription{ID: "b", Source: src, Interval: time.Hour})).To(Succeed())
	_, err := s.Wait(t.Context(), "b")
	g.Expect(err).NotTo(HaveOccurred())
	g.Eventually(events).Should(Receive())
	g.Expect(repo.requests.Load()).To(Equal(int64(1)))

	repo.add(repoChart{name: "small", version: "1.1.0", archive: packageChart(t, "small", small("1.1.0"))})
	g.Expect(s.TriggerKey(src.Key())).To(Succeed())
	var ev Event
	g.Eventually(events).WithTimeout(10 * time.Second).Should(Receive(&ev))
	g.Expect(ev.Result.Version).To(Equal("1.1.0"))
	g.Expect(ev.Changed).To(BeTrue())
	g.Expect(repo.requests.Load()).To(Equal(int64(2)), "one more poll for both subscribers")

	g.Expect(s.TriggerKey(Source{Repository: repo.srv.URL, Name: "other"}.Key())).To(MatchError(ErrNotSubscribed))
	s.Stop()
	g.Expect(s.TriggerKey(src.Key())).To(MatchError(ErrNotSubscribed), "once stopped")
}
