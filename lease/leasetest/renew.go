package leasetest

import (
	"testing"

	"github.com/rlsched/rlsched/core"
	"github.com/rlsched/rlsched/lease"
)

// renewals builds a renewal list from task, fence pairs.
func renewals(pairs ...any) []lease.Renewal {
	var rs []lease.Renewal
	for i := 0; i < len(pairs); i += 2 {
		rs = append(rs, lease.Renewal{TaskID: pairs[i].(string), Fence: pairs[i+1].(uint64)})
	}
	return rs
}

// One heartbeat renews several leases; each gets its own verdict.
func testRenew(t *testing.T, h Harness) {
	b := h.open(t)
	ok := h.claim(t, b, "ok", "w1")
	other := h.claim(t, b, "other", "w1")
	expiring := h.claim(t, b, "expiring", "w1")
	h.after(b, 0.6)
	errs := b.Renew(t.Context(), renewals("ok", ok, "other", other), h.TTL)
	if len(errs) != 2 || errs[0] != nil || errs[1] != nil {
		t.Fatalf("Renew = %v, want two nil errors", errs)
	}
	h.after(b, 0.6) // "expiring" is now past its TTL, the others are not

	errs = b.Renew(t.Context(), renewals(
		"ok", ok,
		"other", other+1000, // wrong token
		"missing", ok, // no such lease
		"expiring", expiring, // expired: the reaper owns it
	), h.TTL)
	if len(errs) != 4 {
		t.Fatalf("Renew returned %d errors for 4 renewals", len(errs))
	}
	wantIs(t, "Renew with the right token", errs[0], nil)
	wantIs(t, "Renew with a wrong token", errs[1], core.ErrLeaseLost)
	wantIs(t, "Renew of a missing lease", errs[2], core.ErrLeaseLost)
	wantIs(t, "Renew of an expired lease", errs[3], core.ErrLeaseLost)
	wantLease(t, b, "other", "w1", other) // a wrong token changes nothing

	if errs := b.Renew(t.Context(), nil, h.TTL); len(errs) != 0 {
		t.Fatalf("Renew(nil) = %v, want no errors", errs)
	}
	for _, err := range b.Renew(t.Context(), renewals("ok", ok), 0) {
		if err == nil {
			t.Fatal("Renew with ttl 0 succeeded, want an error")
		}
	}
}

// A renewed lease outlives its first TTL and is not reaped until the
// renewed TTL runs out.
func testRenewKeepsFromReaper(t *testing.T, h Harness) {
	b := h.open(t)
	f := h.claim(t, b, "t1", "w1")
	h.after(b, 0.6)
	wantIs(t, "Renew", b.Renew(t.Context(), renewals("t1", f), h.TTL)[0], nil)
	h.after(b, 0.6) // past the first TTL, inside the renewed one
	wantLease(t, b, "t1", "w1", f)
	if got, err := b.Reap(t.Context(), 0); err != nil || len(got) != 0 {
		t.Fatalf("Reap = %+v, %v; want nothing (the lease was renewed)", got, err)
	}
	h.after(b, 0.6)
	got, err := b.Reap(t.Context(), 0)
	if err != nil || len(got) != 1 || got[0].TaskID != "t1" || got[0].Fence != f {
		t.Fatalf("Reap = %+v, %v; want the lease of t1 with fence %d", got, err, f)
	}
}

func testRelease(t *testing.T, h Harness) {
	b := h.open(t)
	f := h.claim(t, b, "t1", "w1")
	wantIs(t, "Release with a wrong token", b.Release(t.Context(), "t1", f+1000), core.ErrLeaseLost)
	wantLease(t, b, "t1", "w1", f)
	wantIs(t, "Release of a missing lease", b.Release(t.Context(), "nope", f), core.ErrLeaseLost)
	wantIs(t, "Release", b.Release(t.Context(), "t1", f), nil)
	wantNoLease(t, b, "t1")
	wantIs(t, "second Release", b.Release(t.Context(), "t1", f), core.ErrLeaseLost)
	wantIs(t, "Renew after Release", b.Renew(t.Context(), renewals("t1", f), h.TTL)[0], core.ErrLeaseLost)

	// A released run can be claimed again at once, and the old token stays dead.
	f2 := h.claim(t, b, "t1", "w2")
	wantIs(t, "Release with the old token", b.Release(t.Context(), "t1", f), core.ErrLeaseLost)
	wantLease(t, b, "t1", "w2", f2)

	// An expired lease cannot be released: the reaper reports it.
	h.after(b, 1.2)
	wantIs(t, "Release of an expired lease", b.Release(t.Context(), "t1", f2), core.ErrLeaseLost)
	got, err := b.Reap(t.Context(), 0)
	if err != nil || len(got) != 1 || got[0].Fence != f2 {
		t.Fatalf("Reap = %+v, %v; want the expired lease with fence %d", got, err, f2)
	}
}
