package leasetest

import (
	"testing"
	"time"

	"github.com/rlsched/rlsched/core"
)

func testClaim(t *testing.T, h Harness) {
	b := h.open(t)
	wantNoLease(t, b, "t1")
	f := h.claim(t, b, "t1", "w1")
	if f == 0 {
		t.Fatal("Claim returned fence 0; tokens start above 0")
	}
	wantLease(t, b, "t1", "w1", f)
	l, _, _ := b.Get(t.Context(), "t1")
	if l.Expires.IsZero() {
		t.Fatal("Get returned a lease without Expires")
	}
	h.after(b, 0.5)
	wantLease(t, b, "t1", "w1", f)
}

func testClaimConflict(t *testing.T, h Harness) {
	b := h.open(t)
	f := h.claim(t, b, "t1", "w1")
	for _, w := range []string{"w1", "w2"} {
		_, err := b.Claim(t.Context(), "t1", w, h.TTL)
		wantIs(t, "second Claim by "+w, err, core.ErrLeaseHeld)
	}
	wantLease(t, b, "t1", "w1", f)
	// Another run is independent.
	h.claim(t, b, "t2", "w2")
}

// An expired lease that no reaper took yet may be claimed again; the new
// claim replaces it, so the reaper never reports it and its old token is
// dead.
func testClaimTakesOverExpired(t *testing.T, h Harness) {
	b := h.open(t)
	old := h.claim(t, b, "t1", "w1")
	h.after(b, 1.2)
	wantNoLease(t, b, "t1")
	f := h.claim(t, b, "t1", "w2")
	if f <= old {
		t.Fatalf("fence after take-over %d, want > %d", f, old)
	}
	wantLease(t, b, "t1", "w2", f)
	errs := b.Renew(t.Context(), renewals("t1", old), h.TTL)
	wantIs(t, "Renew with the replaced token", errs[0], core.ErrLeaseLost)
	got, err := b.Reap(t.Context(), 0)
	wantIs(t, "Reap", err, nil)
	if len(got) != 0 {
		t.Fatalf("Reap after take-over = %+v, want nothing", got)
	}
}

func testClaimInvalid(t *testing.T, h Harness) {
	b := h.open(t)
	for _, c := range []struct {
		task, worker string
		ttl          time.Duration
	}{
		{"", "w1", h.TTL},
		{"t1", "", h.TTL},
		{"t1", "w1", 0},
		{"t1", "w1", -time.Second},
	} {
		if _, err := b.Claim(t.Context(), c.task, c.worker, c.ttl); err == nil {
			t.Fatalf("Claim(%q, %q, %v) succeeded, want an error", c.task, c.worker, c.ttl)
		}
	}
	wantNoLease(t, b, "t1")
}

// Tokens grow across runs and across re-claims of one run, whatever ended
// the previous lease.
func testFencesIncrease(t *testing.T, h Harness) {
	b := h.open(t)
	var last uint64
	next := func(task string) uint64 {
		t.Helper()
		f := h.claim(t, b, task, "w1")
		if f <= last {
			t.Fatalf("Claim(%q) = fence %d, want > %d", task, f, last)
		}
		last = f
		return f
	}
	f1 := next("t1")
	next("t2")
	wantIs(t, "Release", b.Release(t.Context(), "t1", f1), nil)
	next("t1") // re-claim after release
	next("t3")
	h.after(b, 1.2)
	if _, err := b.Reap(t.Context(), 0); err != nil {
		t.Fatalf("Reap: %v", err)
	}
	next("t1") // re-claim after reap
	h.after(b, 1.2)
	next("t1") // re-claim over an expired lease
}
