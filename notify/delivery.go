package notify

import (
	"math/rand/v2"
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
