package ui

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// change says that one SyncTarget (Kind "target") or its events (Kind "event") changed;
// Key is "namespace/name".
type change struct {
	Kind string
	Key  string
}

// hub fans the changes the shared informers see out to every open /events stream. A
// viewer that does not keep up loses changes rather than slowing the others: its
// buffer is dropped and it is told to reload everything.
type hub struct {
	mu   sync.Mutex
	subs map[chan change]struct{}
}

func newHub() *hub { return &hub{subs: map[chan change]struct{}{}} }

// subscriberBuffer is how many changes one viewer may lag behind.
const subscriberBuffer = 256

func (h *hub) subscribe() (<-chan change, func()) {
	ch := make(chan change, subscriberBuffer)
	h.mu.Lock()
	h.subs[ch] = struct{}{}
	h.mu.Unlock()
	return ch, func() {
		h.mu.Lock()
		delete(h.subs, ch)
		h.mu.Unlock()
	}
}

func (h *hub) publish(c change) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for ch := range h.subs {
		select {
		case ch <- c:
		default:
			// Too slow: empty its buffer and ask it to reload.
			for len(ch) > 0 {
				<-ch
			}
			ch <- change{Kind: "reload"}
		}
	}
}

// subscribers counts the open streams.
func (h *hub) subscribers() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.subs)
}

// keepAlive is how often an idle stream gets a comment, so that proxies keep it open.
const keepAlive = 25 * time.Second

// streamRetry is the Retry-After of a stream refused for the caps.
const streamRetry = 30 * time.Second

// openStream counts an /events stream against the caps of in-cluster mode (per user and
// in all); release ends it. `converge ui` serves one user and counts nothing.
func (s *Server) openStream(ctx context.Context) (release func(), err error) {
	ic := s.opts.InCluster
	if ic == nil {
		return func() {}, nil
	}
	ic.init()
	return ic.streams.acquire(requestUser(ctx))
}

// serveEvents streams changes as server-sent events: "event: target" or "event: event",
// the data "namespace/name".
func (s *Server) serveEvents(w http.ResponseWriter, r *http.Request) {
	flusher, ok := w.(http.Flusher)
	if !ok {
		http.Error(w, "streaming is not supported", http.StatusInternalServerError)
		return
	}
	release, err := s.openStream(r.Context())
	if err != nil {
		w.Header().Set("Retry-After", strconv.Itoa(retrySeconds(streamRetry)))
		http.Error(w, err.Error(), http.StatusTooManyRequests)
		return
	}
	defer release()
	ch, cancel := s.hub.subscribe()
	defer cancel()
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	_, _ = fmt.Fprint(w, "retry: 1000\n\n")
	flusher.Flush()
	tick := time.NewTicker(keepAlive)
	defer tick.Stop()
	for {
		select {
		case <-r.Context().Done():
			return
		case <-tick.C:
			_, _ = fmt.Fprint(w, ": keep-alive\n\n")
		case c := <-ch:
			if c.Key != "" && !s.mayFollow(r.Context(), c.Key) {
				continue
			}
			if _, err := fmt.Fprintf(w, "event: %s\ndata: %s\n\n", c.Kind, c.Key); err != nil {
				return
			}
		}
		flusher.Flush()
	}
}
