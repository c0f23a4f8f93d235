// Package backoff is the one retry delay of rlsched: a minimum doubling to
// a maximum, each delay jittered, so that peers failing together do not come
// back together. Every retry loop (a worker's reconnects and output resends,
// the master's store retries, the metric queue, the cluster subscription)
// uses it.
package backoff

import (
	"context"
	"math/rand/v2"
	"time"
)

// Defaults of a zero Backoff.
const (
	DefaultMin    = 100 * time.Millisecond
	DefaultMax    = 5 * time.Second
	DefaultJitter = 0.2
)

// Backoff yields delays: Min doubling to Max, each ±Jitter (a fraction; 0
// takes DefaultJitter, a negative value none). Not safe for concurrent use:
// its owner serialises it.
type Backoff struct {
	Min, Max time.Duration // 0: DefaultMin, DefaultMax
	Jitter   float64
	next     time.Duration
}

// Delay returns the next delay and doubles the one after it.
func (b *Backoff) Delay() time.Duration {
	lo, hi := b.Min, b.Max
	if lo <= 0 {
		lo = DefaultMin
	}
	if hi <= 0 {
		hi = DefaultMax
	}
	if b.next < lo {
		b.next = lo
	}
	d := b.next
	b.next = min(b.next*2, hi)
	j := b.Jitter
	if j == 0 {
		j = DefaultJitter
	}
	if j < 0 {
		return d
	}
	return time.Duration(float64(d) * (1 + j*(2*rand.Float64()-1)))
}

// Reset starts the sequence again from the minimum.
func (b *Backoff) Reset() { b.next = 0 }

// Sleep waits d or until ctx is done; it reports whether d elapsed.
func Sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
