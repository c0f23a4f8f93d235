package leasetest

import (
	"testing"

	"github.com/rlsched/rlsched/core"
)

func testRestore(t *testing.T, h Harness) {
	ctx := t.Context()
	b := h.open(t)

	// Absent: the lease is created and the counter raised past it.
	wantIs(t, "Restore of an absent lease", b.Restore(ctx, "t1", "w1", 500, h.TTL), nil)
	wantLease(t, b, "t1", "w1", 500)
	if f := h.claim(t, b, "t2", "w2"); f <= 500 {
		t.Fatalf("Claim after Restore(500) = fence %d, want > 500", f)
	}

	// Live with the same claim: nothing to do, and it counts as a renewal.
	h.after(b, 0.6)
	wantIs(t, "Restore of the same live lease", b.Restore(ctx, "t1", "w1", 500, h.TTL), nil)
	h.after(b, 0.6)
	wantLease(t, b, "t1", "w1", 500)

	// Live with another token (or owner): the live lease wins.
	wantIs(t, "Restore over another token", b.Restore(ctx, "t1", "w1", 499, h.TTL), core.ErrLeaseHeld)
	wantIs(t, "Restore over another owner", b.Restore(ctx, "t1", "w9", 500, h.TTL), core.ErrLeaseHeld)
	wantLease(t, b, "t1", "w1", 500)

	// Even a refused Restore raises the counter: the token exists somewhere.
	wantIs(t, "Restore over a live lease", b.Restore(ctx, "t1", "w1", 900, h.TTL), core.ErrLeaseHeld)
	f3 := h.claim(t, b, "t3", "w2")
	if f3 <= 900 {
		t.Fatalf("Claim after Restore(900) = fence %d, want > 900", f3)
	}

	// A lower token than the counter is put back as is; the counter stays.
	wantIs(t, "Restore of a low token", b.Restore(ctx, "t4", "w4", 3, h.TTL), nil)
	wantLease(t, b, "t4", "w4", 3)
	if f := h.claim(t, b, "t5", "w2"); f <= f3 {
		t.Fatalf("Claim after Restore(3) = fence %d, want > %d", f, f3)
	}

	// Expired: Restore takes over like Claim does.
	h.after(b, 1.2)
	wantIs(t, "Restore over an expired lease", b.Restore(ctx, "t1", "w7", 950, h.TTL), nil)
	wantLease(t, b, "t1", "w7", 950)

	for _, err := range []error{
		b.Restore(ctx, "t6", "w1", 0, h.TTL),
		b.Restore(ctx, "", "w1", 7, h.TTL),
		b.Restore(ctx, "t6", "", 7, h.TTL),
		b.Restore(ctx, "t6", "w1", 7, 0),
	} {
		if err == nil {
			t.Fatal("Restore with an invalid argument succeeded")
		}
	}
	wantNoLease(t, b, "t6")
}

func testEnsureFenceAbove(t *testing.T, h Harness) {
	ctx := t.Context()
	b := h.open(t)
	f := h.claim(t, b, "t1", "w1")
	wantIs(t, "EnsureFenceAbove(1000)", b.EnsureFenceAbove(ctx, f+1000), nil)
	f2 := h.claim(t, b, "t2", "w1")
	if f2 <= f+1000 {
		t.Fatalf("Claim after EnsureFenceAbove(%d) = fence %d", f+1000, f2)
	}
	// It never lowers the counter.
	wantIs(t, "EnsureFenceAbove(1)", b.EnsureFenceAbove(ctx, 1), nil)
	if f3 := h.claim(t, b, "t3", "w1"); f3 <= f2 {
		t.Fatalf("Claim after EnsureFenceAbove(1) = fence %d, want > %d", f3, f2)
	}
	// Existing leases are untouched.
	wantLease(t, b, "t1", "w1", f)
}
