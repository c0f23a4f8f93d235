package leasetest

import (
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/rlsched/rlsched/core"
	"github.com/rlsched/rlsched/lease"
)

// Fifty workers claim one run at the same moment: exactly one wins, the
// others see core.ErrLeaseHeld.
func testConcurrentClaims(t *testing.T, h Harness) {
	b := h.open(t)
	const n = 50
	var (
		start  = make(chan struct{})
		wg     sync.WaitGroup
		fences [n]uint64
		errs   [n]error
	)
	for i := range n {
		wg.Go(func() {
			<-start
			fences[i], errs[i] = b.Claim(t.Context(), "t1", fmt.Sprint("w", i), h.TTL)
		})
	}
	close(start)
	wg.Wait()
	winner := -1
	for i, err := range errs {
		switch {
		case err == nil && winner >= 0:
			t.Fatalf("workers %d and %d both claimed the run", winner, i)
		case err == nil:
			winner = i
		case !errors.Is(err, core.ErrLeaseHeld):
			t.Fatalf("worker %d: got error %v, want %v", i, err, core.ErrLeaseHeld)
		}
	}
	if winner < 0 {
		t.Fatal("no worker claimed the run")
	}
	wantLease(t, b, "t1", fmt.Sprint("w", winner), fences[winner])
}

// Eight reapers with a small limit share the expired leases: each is
// returned once in total, and no live lease is returned.
func testConcurrentReapers(t *testing.T, h Harness) {
	b := h.open(t)
	const expired, live, reapers = 200, 20, 8
	for i := range expired {
		h.claim(t, b, fmt.Sprint("old", i), "w1")
	}
	h.after(b, 0.6)
	for i := range live {
		h.claim(t, b, fmt.Sprint("new", i), "w1")
	}
	h.after(b, 0.6) // the old leases are 1.2 TTL old, the new ones 0.6

	var (
		start = make(chan struct{})
		wg    sync.WaitGroup
		got   [reapers][]lease.Lease
	)
	for r := range reapers {
		wg.Go(func() {
			<-start
			for {
				ls, err := b.Reap(t.Context(), 7)
				if err != nil {
					t.Errorf("reaper %d: %v", r, err)
					return
				}
				if len(ls) == 0 {
					return
				}
				got[r] = append(got[r], ls...)
			}
		})
	}
	close(start)
	wg.Wait()
	seen := map[string]int{}
	for r := range got {
		for _, l := range got[r] {
			seen[l.TaskID]++
		}
	}
	for i := range expired {
		if c := seen[fmt.Sprint("old", i)]; c != 1 {
			t.Fatalf("expired lease old%d returned %d times, want once", i, c)
		}
	}
	if len(seen) != expired {
		t.Fatalf("reapers returned %d distinct leases, want %d (no live ones)", len(seen), expired)
	}
}
