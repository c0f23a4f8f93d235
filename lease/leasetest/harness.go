// Package leasetest is the conformance suite every lease.Leases backend
// must pass. A backend's test calls Run with a Harness; the suite never
// sleeps by itself: it moves time through the harness, so a memory backend
// runs it instantly on a fake clock and a Redis backend on real, short TTLs.
package leasetest

import (
	"testing"
	"time"

	"github.com/rlsched/rlsched/lease"
)

// Harness tells the suite how to get backends and how long a TTL is.
type Harness struct {
	// New returns a fresh, empty backend for one test (for Redis: its own
	// database or key prefix). The suite closes it when the test ends.
	New func(t *testing.T) Backend
	// TTL is the lease and presence TTL the suite uses; it waits in
	// fractions of it (0.5 TTL, 1.2 TTL). A fake clock can take anything;
	// real time needs a TTL far above one operation's latency (200ms for a
	// local Redis). Default 1 minute.
	TTL time.Duration
	// RandomSteps is how many random operations the property test runs
	// (default 400); with real time each step may wait up to TTL/3.
	RandomSteps int
	// ExactClock says that Advance moves the backend's time by exactly d
	// and nothing else moves it (a fake clock). The property test then
	// predicts every expiry to the tick; on real time it only judges leases
	// more than TTL/4 away from their expiry, since sleeps and round trips
	// add time the suite cannot count.
	ExactClock bool
}

// Backend is one backend under test plus the way to move its time.
type Backend struct {
	lease.Leases
	// Advance moves the backend's clock forward by d: a fake clock's
	// Advance, or time.Sleep for a backend on real time.
	Advance func(d time.Duration)
}

// Run runs the whole suite, one subtest per behaviour, each on a fresh
// backend: claims and conflicts, take-over of an expired lease, tokens
// growing across runs and re-claims, renewal and release with right, wrong
// and expired tokens, reaping (once, never live leases, with a limit),
// 50 concurrent claims of one run, 8 concurrent reapers, Restore,
// EnsureFenceAbove, presence TTLs, and a seeded random sequence checked
// against a model. A memory backend's test:
//
//	leasetest.Run(t, leasetest.Harness{
//		New: func(t *testing.T) leasetest.Backend {
//			c := leasetest.NewClock()
//			return leasetest.Backend{Leases: memory.New(memory.WithClock(c.Now)), Advance: c.Advance}
//		},
//		ExactClock: true,
//	})
//
// A Redis backend passes Advance: time.Sleep and a TTL of a few hundred
// milliseconds.
func Run(t *testing.T, h Harness) {
	if h.New == nil {
		t.Fatal("leasetest: Harness.New is nil")
	}
	if h.TTL <= 0 {
		h.TTL = time.Minute
	}
	if h.RandomSteps <= 0 {
		h.RandomSteps = 400
	}
	tests := []struct {
		name string
		f    func(t *testing.T, h Harness)
	}{
		{"Claim", testClaim},
		{"ClaimConflict", testClaimConflict},
		{"ClaimTakesOverExpired", testClaimTakesOverExpired},
		{"ClaimInvalid", testClaimInvalid},
		{"FencesIncrease", testFencesIncrease},
		{"Renew", testRenew},
		{"RenewKeepsFromReaper", testRenewKeepsFromReaper},
		{"Release", testRelease},
		{"Reap", testReap},
		{"ReapLimit", testReapLimit},
		{"ConcurrentClaims", testConcurrentClaims},
		{"ConcurrentReapers", testConcurrentReapers},
		{"Restore", testRestore},
		{"EnsureFenceAbove", testEnsureFenceAbove},
		{"Presence", testPresence},
		{"RandomOps", testRandomOps},
		{"Quota", testQuota},
		{"ConcurrentQuota", testConcurrentQuota},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { tc.f(t, h) })
	}
}

// open returns a fresh backend that is closed when t ends.
func (h Harness) open(t *testing.T) Backend {
	t.Helper()
	b := h.New(t)
	if b.Leases == nil || b.Advance == nil {
		t.Fatal("leasetest: Harness.New returned a Backend without Leases or Advance")
	}
	// A fresh backend is empty and complete: what a master marks after
	// rebuilding it from the store.
	if err := b.MarkReady(t.Context()); err != nil {
		t.Fatalf("MarkReady: %v", err)
	}
	t.Cleanup(func() {
		if err := b.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return b
}

// after advances b's clock by frac of the harness TTL.
func (h Harness) after(b Backend, frac float64) {
	b.Advance(time.Duration(float64(h.TTL) * frac))
}
