package notify

import (
	"math/rand/v2"
	gosync "sync"
	"time"
)

// backoff is the wait before try+1 after try failed: base·2^(try-1) capped at max, with
// ±20% jitter (jitter returns a number in [0,1)), and never shorter than the server's
// Retry-After.
func backoff(try int, base, maxWait, retryAfter time.Duration, jitter func() float64) time.Duration {
	d := base
	for i := 1; i < try && d < maxWait; i++ {
		d *= 2
	}
	d = min(d, maxWait)
	if jitter == nil {
		jitter = rand.Float64
	}
	d = time.Duration(float64(d) * (0.8 + 0.4*jitter()))
	return max(d, retryAfter)
}

// tokenBucket limits the requests to one provider: rate per second, burst at once. It
// takes the time from its caller, so that tests drive it with a fake clock.
type tokenBucket struct {
	mu     gosync.Mutex
	rate   float64
	burst  float64
	tokens float64
	last   time.Time
}

func newTokenBucket(rate float64, burst int) *tokenBucket {
	return &tokenBucket{rate: rate, burst: float64(burst), tokens: float64(burst)}
}

// reserve takes a token and says how long to wait before using it.
func (b *tokenBucket) reserve(now time.Time) time.Duration {
	if b == nil || b.rate <= 0 {
		return 0
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.last.IsZero() && now.After(b.last) {
		b.tokens = min(b.burst, b.tokens+now.Sub(b.last).Seconds()*b.rate)
	}
	if b.last.IsZero() || now.After(b.last) {
		b.last = now
	}
	b.tokens--
	if b.tokens >= 0 {
		return 0
	}
	return time.Duration(-b.tokens / b.rate * float64(time.Second))
}
