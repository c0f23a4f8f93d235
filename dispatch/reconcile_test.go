package dispatch

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rlsched/rlsched/core"
	"github.com/rlsched/rlsched/internal/testkit/testutil"
	"github.com/rlsched/rlsched/store"
)

// reconcileTTL is the lease TTL of the reconciliation tests: the period is
// one TTL ±25%, the restored lease is held for leaseHold.
const reconcileTTL = 10 * time.Second

// activeRun puts a run into the store as RUNNING on worker under fence,
// as a master that then died left it; no lease is taken.
func activeRun(t *testing.T, h *harness, worker string, fence uint64) core.Task {
	t.Helper()
	ctx := context.Background()
	run := h.submit(t, 0, "x")
	tk := h.task(t, run.ID)
	exp := store.Expect{Fence: tk.Fence, Status: tk.Status}
	if err := tk.Dispatch(worker, nil, fence); err != nil {
		t.Fatal(err)
	}
	if err := h.st.UpdateTask(ctx, &tk, exp); err != nil {
		t.Fatal(err)
	}
	exp = store.Expect{Fence: tk.Fence, Status: tk.Status}
	if err := tk.Start(h.clock.Now()); err != nil {
		t.Fatal(err)
	}
	if err := h.st.UpdateTask(ctx, &tk, exp); err != nil {
		t.Fatal(err)
	}
	return tk
}

// requeuedLogs counts the "run lost" lines that requeued id.
func requeuedLogs(h *harness, id string) int {
	n := 0
	for _, l := range strings.Split(h.logs.String(), "\n") {
		if strings.Contains(l, `"task":"`+id+`"`) && strings.Contains(l, `"requeued":true`) {
			n++
		}
	}
	return n
}

// A run RUNNING in the store with no lease and no worker (its master
// released the lease, then died before the store took the requeue) is
// requeued within one period plus one lease hold; a run whose lease lives
// is left alone.
func TestReconcileRequeuesActiveRunWithoutLease(t *testing.T) {
	h := newClockedHarness(t, func(c *Config) { c.LeaseTTL = reconcileTTL; c.ReapInterval = 10 * time.Millisecond })
	ctx := context.Background()
	orphan := activeRun(t, h, "w-gone", 1000)

	live := h.submit(t, 0, "y")
	fence, err := h.m.ls.Claim(ctx, live.ID, "w-live", time.Hour) // its worker renews it, elsewhere
	if err != nil {
		t.Fatal(err)
	}
	live = h.task(t, live.ID)
	exp := store.Expect{Fence: live.Fence, Status: live.Status}
	_ = live.Dispatch("w-live", nil, fence)
	if err := h.st.UpdateTask(ctx, &live, exp); err != nil {
		t.Fatal(err)
	}

	h.clock.Advance(reconcileTTL/2 - time.Millisecond) // before any period ends
	h.m.reap.reapOnce(ctx)
	if got := h.task(t, orphan.ID); got.Status != core.StatusRunning {
		t.Fatalf("orphan %s before the reconciliation", got.Status)
	}

	h.clock.Advance(reconcileTTL) // past 1.25 TTL: the period ended
	testutil.WaitFor(t, 10*time.Second, "the orphan's lease restored", func() bool {
		l, ok, err := h.m.ls.Get(ctx, orphan.ID)
		return err == nil && ok && l.Fence == orphan.Fence
	})
	if got := h.task(t, orphan.ID); got.Status != core.StatusRunning {
		t.Fatalf("orphan %s within the restored hold, want RUNNING (its worker may renew it)", got.Status)
	}

	h.clock.Advance(h.m.leaseHold() + time.Millisecond)
	// The requeue is logged after the store took it: wait for both.
	testutil.WaitFor(t, 10*time.Second, "orphan requeued", func() bool {
		got := h.task(t, orphan.ID)
		return got.Status == core.StatusQueued && got.Attempt == 2 && requeuedLogs(h, orphan.ID) > 0
	})
	if n := requeuedLogs(h, orphan.ID); n != 1 {
		t.Fatalf("orphan requeued %d times:\n%s", n, h.logs.String())
	}

	// Two more periods: the live run was never touched.
	for range 2 {
		h.clock.Advance(reconcileTTL * 5 / 4)
		h.m.rec.reconcile(ctx)
		h.m.reap.reapOnce(ctx)
	}
	if got := h.task(t, live.ID); got.Status != core.StatusDispatched || got.Attempt != 1 || got.Fence != fence {
		t.Fatalf("live run %s attempt %d fence %d, want DISPATCHED attempt 1 fence %d", got.Status, got.Attempt, got.Fence, fence)
	}
	if l, ok, err := h.m.ls.Get(ctx, live.ID); err != nil || !ok || l.Fence != fence || l.WorkerID != "w-live" {
		t.Fatalf("live lease %+v %v %v", l, ok, err)
	}
}

// Two masters reconcile the same orphan: it is requeued once. And when both
// call it lost at the same time, the fenced writes let one requeue land.
func TestReconcileTwoMastersRequeueOnce(t *testing.T) {
	h := newClockedHarness(t, func(c *Config) { c.LeaseTTL = reconcileTTL; c.ReapInterval = 10 * time.Millisecond })
	m2 := secondMasterWith(t, h, func(c *Config) {
		c.LeaseTTL, c.ReapInterval, c.Clock = h.m.cfg.LeaseTTL, h.m.cfg.ReapInterval, h.clock.Now
	})
	ctx := context.Background()
	orphan := activeRun(t, h, "w-gone", 1000)

	h.clock.Advance(reconcileTTL * 5 / 4)
	h.m.rec.reconcile(ctx)
	m2.rec.reconcile(ctx)
	h.clock.Advance(h.m.leaseHold() + time.Millisecond)
	testutil.WaitFor(t, 10*time.Second, "orphan requeued", func() bool {
		got := h.task(t, orphan.ID)
		return got.Status == core.StatusQueued && got.Attempt == 2
	})

	// Not through the lease (whose reap goes to one master): both at once.
	both := activeRun(t, h, "w-gone", 1001)
	var wg sync.WaitGroup
	for _, m := range []*Dispatcher{h.m, m2} {
		wg.Add(1)
		go func() { defer wg.Done(); m.reap.lost(ctx, both.ID, both.Fence, "test: both masters") }()
	}
	wg.Wait()
	for range 2 { // and later periods find nothing more to do
		h.clock.Advance(reconcileTTL * 5 / 4)
		h.m.rec.reconcile(ctx)
		m2.rec.reconcile(ctx)
		h.clock.Advance(h.m.leaseHold() + time.Millisecond)
		h.m.reap.reapOnce(ctx)
		m2.reap.reapOnce(ctx)
	}
	for _, id := range []string{orphan.ID, both.ID} {
		if got := h.task(t, id); got.Status != core.StatusQueued || got.Attempt != 2 {
			t.Fatalf("run %s: %s attempt %d, want QUEUED attempt 2", id, got.Status, got.Attempt)
		}
		testutil.WaitFor(t, 10*time.Second, "the requeue's log line", func() bool { return requeuedLogs(h, id) > 0 })
		if n := requeuedLogs(h, id); n != 1 {
			t.Fatalf("run %s requeued %d times:\n%s", id, n, h.logs.String())
		}
	}
}

// A lease restored at the fence of a run that is then found lost (a
// reconciliation racing the reaper's write on another master) is released
// with the requeue, so the next attempt's claim does not wait a hold.
func TestLostReleasesRestoredLease(t *testing.T) {
	h := newClockedHarness(t, func(c *Config) { c.LeaseTTL = reconcileTTL })
	ctx := context.Background()
	run := activeRun(t, h, "w-gone", 1000)
	if err := h.m.rec.restoreLease(ctx, run); err != nil {
		t.Fatal(err)
	}
	h.m.reap.lost(ctx, run.ID, run.Fence, "test: found lost")
	if got := h.task(t, run.ID); got.Status != core.StatusQueued || got.Attempt != 2 {
		t.Fatalf("run %s attempt %d, want QUEUED attempt 2", got.Status, got.Attempt)
	}
	if l, ok, err := h.m.ls.Get(ctx, run.ID); err != nil || ok {
		t.Fatalf("lease after the requeue: %+v %v %v, want none", l, ok, err)
	}
	if _, err := h.m.ls.Claim(ctx, run.ID, "w-next", time.Minute); err != nil {
		t.Fatalf("claim of attempt 2: %v", err)
	}
}
