// Package memory is the in-process lease backend of `rlsched up`: run leases
// with fencing tokens and worker presence, held in maps under one mutex.
//
// Guarantees:
//   - Every operation is atomic: it runs entirely under the one mutex, so
//     concurrent callers see the operations in some total order.
//   - Fencing tokens come from one uint64 counter that only grows: each Claim
//     returns a token greater than every token handed out, restored or
//     passed to EnsureFenceAbove before, and a token is never handed out twice.
//   - A run has at most one live lease. A lease is live while now < Expires.
//   - Only a live lease can be renewed or released; an expired one belongs to
//     the reaper, and Reap returns it to exactly one caller.
//   - An expired lease that has not been reaped yet may be taken over by Claim
//     or Restore; it is then replaced and never reaped: the caller owns the
//     run from then on, and its newer token fences the old owner out of the
//     durable store.
//
// Reap costs O(k log n) for k expired leases among n: leases sit in a
// min-heap ordered by expiry, so live leases are never scanned.
//
// The state lives and dies with the process: after a restart the master
// restores leases from the durable store (Restore, EnsureFenceAbove). Time
// comes from an injectable clock, so tests advance it instead of sleeping.
package memory

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/rlsched/rlsched/lease"
)

// errClosed is returned by every method called after Close.
var errClosed = errors.New("memory lease store is closed")

// Leases is the memory backend of lease.Leases. All methods are safe for
// concurrent use.
type Leases struct {
	now func() time.Time

	mu     sync.Mutex
	closed bool
	// fence is the highest token handed out, restored or ensured; the next
	// claim gets fence+1.
	fence    uint64
	leases   expirySet[holder] // by task ID
	presence expirySet[string] // worker ID → master ID
	// charges are the quota charges of leases (ClaimCharged) by task ID,
	// and charged their sums by user (quota.go).
	charges map[string]lease.Charge
	charged map[string]*use
}

// holder is who holds a run's lease, under which token.
type holder struct {
	worker string
	fence  uint64
}

var _ lease.Leases = (*Leases)(nil)

// Option configures New.
type Option func(*Leases)

// WithClock makes the store read time from now instead of time.Now; tests
// pass a fake clock and advance it instead of sleeping.
func WithClock(now func() time.Time) Option {
	return func(l *Leases) { l.now = now }
}

// New returns an empty store; the first claim gets token 1.
func New(opts ...Option) *Leases {
	l := &Leases{
		now:      time.Now,
		leases:   newExpirySet[holder](),
		presence: newExpirySet[string](),
		charges:  map[string]lease.Charge{},
		charged:  map[string]*use{},
	}
	for _, o := range opts {
		o(l)
	}
	return l
}

// Kind returns "memory".
func (l *Leases) Kind() string { return "memory" }

// Close drops all leases and presence; every later call fails. Closing
// twice is harmless.
func (l *Leases) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.closed = true
	l.leases = newExpirySet[holder]()
	l.presence = newExpirySet[string]()
	l.charges, l.charged = map[string]lease.Charge{}, map[string]*use{}
	return nil
}

// lock takes the mutex after checking ctx and returns the current time, or
// an error (with the mutex released) when ctx is done or the store closed.
// Callers unlock the mutex themselves when err is nil.
func (l *Leases) lock(ctx context.Context) (time.Time, error) {
	if err := ctx.Err(); err != nil {
		return time.Time{}, err
	}
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return time.Time{}, errClosed
	}
	return l.now(), nil
}

func checkTTL(ttl time.Duration) error {
	if ttl <= 0 {
		return fmt.Errorf("ttl must be positive, got %v", ttl)
	}
	return nil
}
