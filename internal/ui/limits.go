package ui

import (
	"fmt"
	"net"
	"net/netip"
	"sync"
	"time"

	"golang.org/x/time/rate"
	"k8s.io/utils/lru"
)

// ttlCache is a bounded LRU of answers that expire: at most its size entries are held,
// the least recently used going first, and an entry past its time is not returned.
type ttlCache[V any] struct {
	lru *lru.Cache
}

type cached[V any] struct {
	value V
	until time.Time
}

func newTTLCache[V any](size int) *ttlCache[V] { return &ttlCache[V]{lru: lru.New(size)} }

func (c *ttlCache[V]) get(key [32]byte, now time.Time) (V, bool) {
	if v, ok := c.lru.Get(key); ok {
		if e := v.(cached[V]); now.Before(e.until) {
			return e.value, true
		}
		c.lru.Remove(key)
	}
	var zero V
	return zero, false
}

func (c *ttlCache[V]) add(key [32]byte, value V, until time.Time) {
	c.lru.Add(key, cached[V]{value: value, until: until})
}

// len is the number of entries held, expired or not.
func (c *ttlCache[V]) len() int { return c.lru.Len() }

// addressLimits is a token bucket per client address (see clientAddress), in a table of
// bounded size: an address pushed out of it starts again with a full bucket.
type addressLimits struct {
	mu      sync.Mutex
	buckets *lru.Cache
	limit   rate.Limit
	burst   int
}

func newAddressLimits(size int, limit rate.Limit, burst int) *addressLimits {
	return &addressLimits{buckets: lru.New(size), limit: limit, burst: burst}
}

// take takes a token of addr's bucket at now; when there is none it takes nothing and
// says how long until there is.
func (a *addressLimits) take(addr string, now time.Time) (wait time.Duration, ok bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	var l *rate.Limiter
	if v, found := a.buckets.Get(addr); found {
		l = v.(*rate.Limiter)
	} else {
		l = rate.NewLimiter(a.limit, a.burst)
		a.buckets.Add(addr, l)
	}
	r := l.ReserveN(now, 1)
	if !r.OK() {
		return time.Minute, false
	}
	if d := r.DelayFrom(now); d > 0 {
		r.CancelAt(now)
		return d, false
	}
	return 0, true
}

// len is the number of addresses in the table.
func (a *addressLimits) len() int { return a.buckets.Len() }

// clientAddress is the key a request's remote address is limited by: an IPv4 address,
// or the /64 network of an IPv6 one (a host usually has the whole /64).
func clientAddress(remote string) string {
	if ap, err := netip.ParseAddrPort(remote); err == nil {
		a := ap.Addr().Unmap()
		if a.Is4() {
			return a.String()
		}
		p, _ := a.WithZone("").Prefix(64)
		return p.String()
	}
	host, _, err := net.SplitHostPort(remote)
	if err != nil {
		return remote
	}
	return host
}

// streamLimits counts the /events streams open per user and in all.
type streamLimits struct {
	mu            sync.Mutex
	open          map[string]int
	total         int
	perUser, most int
}

// tooManyStreamsError is an /events stream past a cap.
type tooManyStreamsError struct {
	user    string
	perUser bool
	most    int
}

func (e *tooManyStreamsError) Error() string {
	if e.perUser {
		return fmt.Sprintf("too many live update streams: user %s has %d open, the most allowed; close some of the UI's tabs", e.user, e.most)
	}
	return fmt.Sprintf("too many live update streams: the UI serves at most %d at once", e.most)
}

// acquire opens a stream for user, or says which cap it is past; release closes it.
func (l *streamLimits) acquire(user string) (release func(), err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case l.open[user] >= l.perUser:
		return nil, &tooManyStreamsError{user: user, perUser: true, most: l.perUser}
	case l.total >= l.most:
		return nil, &tooManyStreamsError{most: l.most}
	}
	l.open[user]++
	l.total++
	var once sync.Once
	return func() { once.Do(func() { l.release(user) }) }, nil
}

func (l *streamLimits) release(user string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.total--
	if l.open[user]--; l.open[user] <= 0 {
		delete(l.open, user)
	}
}
