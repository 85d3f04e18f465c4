package notify

import (
	"net/url"
	"strings"
	gosync "sync"
	"time"

	"golang.org/x/time/rate"
	"k8s.io/apimachinery/pkg/types"
)

// limiters holds the rate limit of each Notifier towards each host it posts to, so that
// one tenant's notifications never hold another's back. A limiter that is full again (it
// was idle for burst/rate) is forgotten: a new one would be the same, so forgetting it
// changes nothing but the memory held.
type limiters struct {
	rate  rate.Limit
	burst int

	mu      gosync.Mutex
	buckets map[limiterKey]*rate.Limiter
}

// limiterKey is a Notifier and the host (with its port) it posts to.
type limiterKey struct {
	notifier types.NamespacedName
	host     string
}

func newLimiters(perSecond float64, burst int) *limiters {
	return &limiters{rate: rate.Limit(perSecond), burst: max(burst, 1), buckets: map[limiterKey]*rate.Limiter{}}
}

// delay takes a token of the Notifier's bucket for the host of rawURL at now and says how
// long to wait before using it; zero when there is no limit. It takes the time from its
// caller, so that tests drive it with a fake clock.
func (l *limiters) delay(notifier types.NamespacedName, rawURL string, now time.Time) time.Duration {
	if l.rate <= 0 {
		return 0
	}
	key := limiterKey{notifier: notifier, host: hostOf(rawURL)}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.evict(now)
	b, ok := l.buckets[key]
	if !ok {
		b = rate.NewLimiter(l.rate, l.burst)
		l.buckets[key] = b
	}
	return b.ReserveN(now, 1).DelayFrom(now)
}

// evict forgets the buckets that are full at now.
func (l *limiters) evict(now time.Time) {
	for k, b := range l.buckets {
		if b.TokensAt(now) >= float64(l.burst) {
			delete(l.buckets, k)
		}
	}
}

// hostOf is the host (and port) of a request's URL, lower case; never its path, which may
// be a credential.
func hostOf(rawURL string) string {
	u, err := url.Parse(rawURL)
	if err != nil {
		return ""
	}
	return strings.ToLower(u.Host)
}
