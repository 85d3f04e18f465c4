package sources

import (
	"net"
	"net/netip"
	gosync "sync"
	"time"

	"golang.org/x/time/rate"
	"k8s.io/utils/clock"
)

// maxLimitedAddresses bounds the table of the webhook rate limit.
const maxLimitedAddresses = 16384

// addrLimiter is a token bucket (golang.org/x/time/rate) per client address: rate requests a
// second, burst at once. A refused request takes no token.
//
// A bucket that is full again is exactly like one never used, so its entry is dropped:
// eviction changes no answer. The table holds at most max addresses; when it is full of busy
// ones, the addresses it cannot hold share one more bucket, so that many addresses cannot buy
// more than one more address's worth of requests (legitimate senders with no entry yet may
// then be refused for a while).
type addrLimiter struct {
	rate  rate.Limit
	burst int
	idle  time.Duration // after which any bucket is full again
	max   int
	clock clock.PassiveClock

	mu        gosync.Mutex
	buckets   map[string]*rate.Limiter
	overflow  *rate.Limiter
	lastSweep time.Time
}

func newAddrLimiter(r float64, burst int, clk clock.PassiveClock) *addrLimiter {
	if burst < 1 {
		burst = max(1, int(r))
	}
	return &addrLimiter{
		rate: rate.Limit(r), burst: burst, clock: clk, max: maxLimitedAddresses,
		idle:    time.Duration(float64(burst) / r * float64(time.Second)),
		buckets: map[string]*rate.Limiter{}, overflow: rate.NewLimiter(rate.Limit(r), burst), lastSweep: clk.Now(),
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
	switch {
	case known:
	case len(l.buckets) >= l.max:
		b = l.overflow
	default:
		b = rate.NewLimiter(l.rate, l.burst)
		l.buckets[addr] = b
	}
	if b.AllowN(now, 1) {
		return 0, true
	}
	return time.Duration((1 - b.TokensAt(now)) / float64(l.rate) * float64(time.Second)), false
}

// sweep drops the buckets that are full again.
func (l *addrLimiter) sweep(now time.Time) {
	for addr, b := range l.buckets {
		if b.TokensAt(now) >= float64(l.burst) {
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
