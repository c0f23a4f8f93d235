package worker

import (
	"context"
	"math/rand/v2"
	"time"
)

// backoff yields delays: min doubling to max (default 100 ms to 5 s), each
// ±20%. Not safe for concurrent use; its owner (the connect loop, a run
// under agent.mu) serialises it.
type backoff struct {
	next     time.Duration
	min, max time.Duration // 0: backoffMin, backoffMax
}

const (
	backoffMin    = 100 * time.Millisecond
	backoffMax    = 5 * time.Second
	backoffJitter = 0.2
	// busyBackoffMin and busyBackoffMax bound the pause after "busy".
	busyBackoffMin = 20 * time.Millisecond
	busyBackoffMax = time.Second
)

// Delay returns the next delay and doubles the one after it.
func (b *backoff) Delay() time.Duration {
	lo, hi := b.min, b.max
	if lo <= 0 {
		lo = backoffMin
	}
	if hi <= 0 {
		hi = backoffMax
	}
	if b.next < lo {
		b.next = lo
	}
	d := b.next
	b.next = min(b.next*2, hi)
	f := 1 + backoffJitter*(2*rand.Float64()-1)
	return time.Duration(float64(d) * f)
}

// Reset starts the sequence again from the minimum.
func (b *backoff) Reset() { b.next = 0 }

// sleepCtx waits d or until ctx is done; it reports whether d elapsed.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
