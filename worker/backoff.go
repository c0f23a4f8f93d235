package worker

import (
	"context"
	"math/rand/v2"
	"time"
)

// backoff yields reconnect delays: 100 ms doubling to 5 s, each ±20%.
// Not safe for concurrent use; the connect loop owns it.
type backoff struct {
	next time.Duration
}

const (
	backoffMin    = 100 * time.Millisecond
	backoffMax    = 5 * time.Second
	backoffJitter = 0.2
)

// Delay returns the next delay and doubles the one after it.
func (b *backoff) Delay() time.Duration {
	if b.next < backoffMin {
		b.next = backoffMin
	}
	d := b.next
	b.next = min(b.next*2, backoffMax)
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
