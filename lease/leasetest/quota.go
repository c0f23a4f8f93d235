package leasetest

import (
	"fmt"
	"sync"
	"testing"

	"github.com/rlsched/rlsched/lease"
)

// charged fails the test unless user has gpus GPUs and runs runs charged.
func charged(t *testing.T, b Backend, user string, gpus, runs int) {
	t.Helper()
	g, r, err := b.Charged(t.Context(), user)
	if err != nil || g != gpus || r != runs {
		t.Fatalf("Charged(%s) = %d GPUs, %d runs, %v; want %d, %d", user, g, r, err, gpus, runs)
	}
}

// ClaimCharged charges the owner and refuses past a cap, claiming nothing;
// release, reap and a take-over of an expired lease drop the charge.
func testQuota(t *testing.T, h Harness) {
	b := h.open(t)
	c := func(gpus int) lease.Charge { return lease.Charge{User: "7", GPUs: gpus, MaxGPUs: 3, MaxRuns: 2} }
	f1, err := b.ClaimCharged(t.Context(), "t1", "w", h.TTL, c(2))
	wantIs(t, "first charged claim", err, nil)
	charged(t, b, "7", 2, 1)
	_, err = b.ClaimCharged(t.Context(), "t2", "w", h.TTL, c(2))
	wantIs(t, "claim past the GPU cap", err, lease.ErrQuota)
	wantNoLease(t, b, "t2")
	_, err = b.ClaimCharged(t.Context(), "t2", "w", h.TTL, c(1))
	wantIs(t, "claim up to the GPU cap", err, nil)
	charged(t, b, "7", 3, 2)
	_, err = b.ClaimCharged(t.Context(), "t3", "w", h.TTL, c(0))
	wantIs(t, "claim past the run cap", err, lease.ErrQuota)
	// Another user and an uncharged claim are not held by it.
	_, err = b.ClaimCharged(t.Context(), "t4", "w", h.TTL, lease.Charge{User: "8", GPUs: 5, MaxGPUs: -1, MaxRuns: -1})
	wantIs(t, "another user's claim", err, nil)
	h.claim(t, b, "t5", "w")
	charged(t, b, "8", 5, 1)

	wantIs(t, "release", b.Release(t.Context(), "t1", f1), nil)
	charged(t, b, "7", 1, 1)
	h.after(b, 1.2) // every lease expires
	got, err := b.Reap(t.Context(), 0)
	if err != nil || len(got) != 3 {
		t.Fatalf("Reap: %v, %v; want the 3 leases left (t2, t4, t5)", got, err)
	}
	charged(t, b, "7", 0, 0)
	charged(t, b, "8", 0, 0)

	// An expired, unreaped lease taken over gives its charge back first.
	_, err = b.ClaimCharged(t.Context(), "t6", "w", h.TTL, c(3))
	wantIs(t, "claim after the reap", err, nil)
	h.after(b, 1.2)
	_, err = b.ClaimCharged(t.Context(), "t6", "w2", h.TTL, c(3))
	wantIs(t, "take-over of an expired charged lease", err, nil)
	charged(t, b, "7", 3, 1)

	// CPU runs (0 GPUs) are charged a run each and given back the same way.
	cpu := lease.Charge{User: "9", MaxGPUs: -1, MaxRuns: 2}
	fc, err := b.ClaimCharged(t.Context(), "c1", "w", h.TTL, cpu)
	wantIs(t, "a CPU run's claim", err, nil)
	_, err = b.ClaimCharged(t.Context(), "c2", "w", h.TTL, cpu)
	wantIs(t, "a second CPU run's claim", err, nil)
	charged(t, b, "9", 0, 2)
	wantIs(t, "release of a CPU run", b.Release(t.Context(), "c1", fc), nil)
	charged(t, b, "9", 0, 1)
	h.after(b, 1.2)
	_, err = b.ClaimCharged(t.Context(), "c3", "w", h.TTL, cpu) // c2 expired but not reaped: still charged
	wantIs(t, "a CPU run's claim beside an expired one", err, nil)
	if _, err := b.Reap(t.Context(), 0); err != nil {
		t.Fatalf("Reap of charged CPU runs: %v", err)
	}
	charged(t, b, "9", 0, 1)
}

// 40 claims of one user at once, each of one GPU, under a cap of 5 GPUs:
// exactly 5 succeed, whatever the interleaving.
func testConcurrentQuota(t *testing.T, h Harness) {
	b := h.open(t)
	var wg sync.WaitGroup
	var mu sync.Mutex
	ok, quota := 0, 0
	for i := range 40 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := b.ClaimCharged(t.Context(), fmt.Sprint("t", i), "w", h.TTL,
				lease.Charge{User: "u", GPUs: 1, MaxGPUs: 5, MaxRuns: -1})
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				ok++
			case errorsIs(err, lease.ErrQuota):
				quota++
			default:
				t.Errorf("claim %d: %v", i, err)
			}
		}()
	}
	wg.Wait()
	if ok != 5 || quota != 35 {
		t.Fatalf("%d claims succeeded and %d met the quota; want 5 and 35", ok, quota)
	}
	charged(t, b, "u", 5, 5)
}
