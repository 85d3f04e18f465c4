package sources

import (
	"net"
	"net/netip"
	gosync "sync"
	"time"

	"k8s.io/utils/clock"
)

// maxLimitedAddresses bounds the table of the webhook rate limit (about 100 bytes an entry).
const maxLimitedAddresses = 16384

// addrLimiter is a token bucket per client address: rate requests a second, burst at once.
//
// An address idle for burst/rate has a full bucket again, exactly like an address never
// seen, so its entry is dropped: eviction changes no answer. The table holds at most max
// addresses; when it is full of busy ones, the addresses it cannot hold share one more
// bucket, so that many addresses cannot buy more than one more address's worth of requests
// (legitimate senders with no entry yet may then be refused for a while).
type addrLimiter struct {
	rate  float64 // tokens a second
	burst float64
	idle  time.Duration // after which a bucket is full again
	max   int
	clock clock.PassiveClock

	mu        gosync.Mutex
	buckets   map[string]bucket
	overflow  bucket
	lastSweep time.Time
}

type bucket struct {
	tokens float64
	at     time.Time
}

func newAddrLimiter(rate float64, burst int, clk clock.PassiveClock) *addrLimiter {
	if burst < 1 {
		burst = max(1, int(rate))
	}
	now := clk.Now()
	return &addrLimiter{
		rate: rate, burst: float64(burst), clock: clk, max: maxLimitedAddresses,
		idle:    time.Duration(float64(burst) / rate * float64(time.Second)),
		buckets: map[string]bucket{}, overflow: bucket{tokens: float64(burst), at: now}, lastSweep: now,
	}
}

// allow takes a token of addr's bucket, or reports how long until there is one.
func (l *addrLimiter) allow(addr string) (wait time.Duration, ok bool) {
	now := l.clock.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	sinceSweep := now.Sub(l.lastSweep)
	if sinceSweep >= max(l.idle, time.Second) || (len(l.buckets) >= l.max && sinceSweep >= time.Second) {
		l.sweep(now)
	}
	b, known := l.buckets[addr]
	if !known {
		if len(l.buckets) >= l.max {
			return l.take(&l.overflow, now)
		}
		b = bucket{tokens: l.burst, at: now}
	}
	wait, ok = l.take(&b, now)
	l.buckets[addr] = b
	return wait, ok
}

func (l *addrLimiter) take(b *bucket, now time.Time) (time.Duration, bool) {
	if now.After(b.at) {
		b.tokens = min(l.burst, b.tokens+now.Sub(b.at).Seconds()*l.rate)
		b.at = now
	}
	if b.tokens >= 1 {
		b.tokens--
		return 0, true
	}
	return time.Duration((1 - b.tokens) / l.rate * float64(time.Second)), false
}

// sweep drops the buckets that are full again.
func (l *addrLimiter) sweep(now time.Time) {
	for addr, b := range l.buckets {
		if now.Sub(b.at) >= l.idle {
			delete(l.buckets, addr)
		}
	}
	l.lastSweep = now
}

// size is the number of addresses in the table.
func (l *addrLimiter) size() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.buckets)
}

// clientAddr is the rate limit key of a request's remote address: the IPv4 address, or the
// /64 of an IPv6 one (what one host usually holds).
func clientAddr(remote string) string {
	host, _, err := net.SplitHostPort(remote)
	if err != nil {
		host = remote
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return host
	}
	ip = ip.Unmap().WithZone("")
	if ip.Is6() {
		if p, err := ip.Prefix(64); err == nil {
			return p.String()
		}
	}
	return ip.String()
}
