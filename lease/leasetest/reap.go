package leasetest

import (
	"fmt"
	"testing"

	"github.com/rlsched/rlsched/lease"
)

// reapAll reaps with limit until a call returns nothing.
func reapAll(t *testing.T, b Backend, limit int) []lease.Lease {
	t.Helper()
	var all []lease.Lease
	for {
		got, err := b.Reap(t.Context(), limit)
		if err != nil {
			t.Fatalf("Reap(%d): %v", limit, err)
		}
		if limit > 0 && len(got) > limit {
			t.Fatalf("Reap(%d) returned %d leases", limit, len(got))
		}
		if len(got) == 0 {
			return all
		}
		all = append(all, got...)
	}
}

// Reap returns expired leases with their owner and token, once, and leaves
// live leases alone.
func testReap(t *testing.T, h Harness) {
	b := h.open(t)
	fa := h.claim(t, b, "a", "w1")
	fb := h.claim(t, b, "b", "w2")
	h.after(b, 0.5)
	fc := h.claim(t, b, "c", "w3")
	h.after(b, 0.7) // a and b expired, c is half-way

	got, err := b.Reap(t.Context(), 0)
	if err != nil {
		t.Fatalf("Reap: %v", err)
	}
	want := map[string]lease.Lease{
		"a": {TaskID: "a", WorkerID: "w1", Fence: fa},
		"b": {TaskID: "b", WorkerID: "w2", Fence: fb},
	}
	if len(got) != len(want) {
		t.Fatalf("Reap = %+v, want the leases of a and b", got)
	}
	for _, l := range got {
		w, ok := want[l.TaskID]
		if !ok || l.WorkerID != w.WorkerID || l.Fence != w.Fence || l.Expires.IsZero() {
			t.Fatalf("Reap returned %+v, want one of %+v with Expires", l, want)
		}
		delete(want, l.TaskID)
	}
	if again := reapAll(t, b, 0); len(again) != 0 {
		t.Fatalf("second Reap = %+v, want nothing", again)
	}
	wantLease(t, b, "c", "w3", fc)
	h.after(b, 0.5)
	if got := reapAll(t, b, 0); len(got) != 1 || got[0].TaskID != "c" {
		t.Fatalf("Reap = %+v, want the lease of c", got)
	}
}

// Reap(limit) returns at most limit leases; repeated calls drain the rest.
func testReapLimit(t *testing.T, h Harness) {
	b := h.open(t)
	for i := range 5 {
		h.claim(t, b, fmt.Sprint("t", i), "w1")
	}
	h.after(b, 1.2)
	seen := map[string]bool{}
	for _, want := range []int{2, 2, 1, 0} {
		got, err := b.Reap(t.Context(), 2)
		if err != nil || len(got) != want {
			t.Fatalf("Reap(2) = %+v, %v; want %d leases", got, err, want)
		}
		for _, l := range got {
			if seen[l.TaskID] {
				t.Fatalf("Reap returned %q twice", l.TaskID)
			}
			seen[l.TaskID] = true
		}
	}
}
