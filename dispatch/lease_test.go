package dispatch

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rlsched/rlsched/codec/pb"
	"github.com/rlsched/rlsched/core"
	"github.com/rlsched/rlsched/internal/testkit/testutil"
	"github.com/rlsched/rlsched/lease/leasetest"
	"github.com/rlsched/rlsched/store"
)

// The worker is told the lease TTL and stops its runs a TTL after it sent
// its last acknowledged renewal; the master holds the lease for the TTL
// plus a clock margin (10% + 1 s) before it requeues the run.
func TestLeaseHeldPastTheTTLTheWorkerIsTold(t *testing.T) {
	h := newClockedHarness(t, func(c *Config) { c.LeaseTTL = 10 * time.Second })
	run := h.submit(t, 0, "x")
	p := dial(t, h.m.Addr())
	if ack := p.hello("w-lease", 1, 0); ack.LeaseTtlMs != 10_000 {
		t.Fatalf("HelloAck lease_ttl_ms %d, want the configured 10000", ack.LeaseTtlMs)
	}
	p.expect(&pb.ExecuteTask{})
	p.c.Close()

	h.clock.Advance(10*time.Second + time.Second + 999*time.Millisecond) // TTL + 10% + 1 s, less 1 ms
	h.m.reap.reapOnce(context.Background())
	if got := h.task(t, run.ID); got.Status != core.StatusDispatched {
		t.Fatalf("requeued within the clock margin: %s", got.Status)
	}
	h.clock.Advance(2 * time.Millisecond)
	h.m.reap.reapOnce(context.Background())
	testutil.WaitFor(t, 10*time.Second, "requeue after TTL + margin", func() bool { return h.task(t, run.ID).Status == core.StatusQueued })
}

// A connection that sends no Hello is closed once helloTimeout passed.
func TestNoHelloIsClosedAtTheDeadline(t *testing.T) {
	h := newClockedHarness(t, func(c *Config) { c.ReapInterval = 10 * time.Millisecond })
	p := dial(t, h.m.Addr())
	h.clock.Advance(helloTimeout + time.Millisecond)
	if _, err := p.read(); err != io.EOF {
		t.Fatalf("read %v, want the master to close the connection", err)
	}
	if !strings.Contains(h.logs.String(), "no Hello within") {
		t.Fatalf("no logged reason:\n%s", h.logs.String())
	}
}

// A session silent for longer than the heartbeat TTL is closed; one that
// heartbeats stays.
func TestSilentSessionIsClosed(t *testing.T) {
	h := newClockedHarness(t, func(c *Config) { c.HeartbeatTTL = 30 * time.Second; c.ReapInterval = 10 * time.Millisecond })
	quiet, busy := dial(t, h.m.Addr()), dial(t, h.m.Addr())
	quiet.hello("w-quiet", 1, 0)
	busy.hello("w-busy", 1, 0)
	h.clock.Advance(20 * time.Second)
	busy.send(&pb.Heartbeat{Seq: 1})
	busy.expect(&pb.HeartbeatAck{})
	h.clock.Advance(15 * time.Second) // 35 s since the quiet one's Hello, 15 s since the heartbeat
	if _, err := quiet.read(); err != io.EOF {
		t.Fatalf("read %v, want the silent session closed", err)
	}
	busy.send(&pb.Heartbeat{Seq: 2})
	if ack := busy.expect(&pb.HeartbeatAck{}).(*pb.HeartbeatAck); ack.Seq != 2 {
		t.Fatalf("ack %v", ack)
	}
	if !strings.Contains(h.logs.String(), "silent for longer than the heartbeat TTL") {
		t.Fatalf("no logged reason:\n%s", h.logs.String())
	}
}

// flakyEnds is a store whose connection breaks (an error that is not
// core.ErrUnavailable, as a MySQL server going away mid-statement gives)
// on the first writes of a run's end.
type flakyEnds struct {
	store.Store
	left atomic.Int32
}

func (s *flakyEnds) UpdateTask(ctx context.Context, t *core.Task, exp store.Expect) error {
	if t.Status.Terminal() && s.left.Add(-1) >= 0 {
		return errors.New("cannot update run: cannot commit transaction: invalid connection")
	}
	return s.Store.UpdateTask(ctx, t, exp)
}

// A run's end that the store did not take is retried, and acked to the
// worker only once stored: the run never stays DISPATCHED with its report
// forgotten.
func TestUnrecordedEndIsRetried(t *testing.T) {
	flaky := &flakyEnds{}
	flaky.left.Store(3)
	clock := leasetest.NewClock() // stands still: the silent fake worker stays connected
	h := startHarness(t, clock, func(s store.Store) store.Store { flaky.Store = s; return flaky }, nil)
	p := dial(t, h.m.Addr())
	p.hello("w-flaky", 1, 0)
	run := h.submit(t, 0, "x")
	ex := p.expect(&pb.ExecuteTask{}).(*pb.ExecuteTask)
	p.send(&pb.TaskFinished{TaskId: run.ID, Attempt: 1, Fence: ex.Fence, Outcome: pb.Outcome_OUTCOME_EXITED})
	p.expect(&pb.TaskFinishedAck{})
	if got := h.task(t, run.ID); got.Status != core.StatusSucceeded {
		t.Fatalf("acked with the run %s; want the end stored first", got.Status)
	}
	if flaky.left.Load() >= 0 {
		t.Fatalf("the end was stored without the failures (%d left)", flaky.left.Load())
	}
}

// storeOutage is a store whose writes fail as a stopped MariaDB's do while
// down is set.
type storeOutage struct {
	store.Store
	down atomic.Bool
}

func (s *storeOutage) UpdateTask(ctx context.Context, t *core.Task, exp store.Expect) error {
	if s.down.Load() {
		return fmt.Errorf("cannot update run: %w", core.ErrUnavailable)
	}
	return s.Store.UpdateTask(ctx, t, exp)
}

// A run that its worker comes back without, while the store is down, is
// requeued once the store is back: its lease is released when the Hello is
// handled, so only the retry of the LOST write can end it (issue 11,
// TestChaosLostDuringStoreOutage: the run stayed RUNNING for good).
func TestLostRunIsRequeuedAfterStoreOutage(t *testing.T) {
	outage := &storeOutage{}
	clock := leasetest.NewClock()
	clock.Advance(time.Since(clock.Now()))
	h := startHarness(t, clock, func(s store.Store) store.Store { outage.Store = s; return outage }, nil)
	p := dial(t, h.m.Addr())
	p.hello("w-lost", 1, 0)
	run := h.submit(t, 0, "x")
	ex := p.expect(&pb.ExecuteTask{}).(*pb.ExecuteTask)
	p.send(&pb.TaskStarted{TaskId: run.ID, Attempt: 1, Fence: ex.Fence, Pid: 42})
	testutil.WaitFor(t, 10*time.Second, "the run RUNNING", func() bool { return h.task(t, run.ID).Status == core.StatusRunning })

	outage.down.Store(true)
	p2 := dial(t, h.m.Addr())
	p2.hello("w-lost", 1, 0) // a new incarnation: without the run
	testutil.WaitFor(t, 10*time.Second, "the failed LOST write queued for a retry", func() bool {
		return strings.Contains(h.logs.String(), "the store did not record a lost run")
	})
	if got := h.task(t, run.ID); got.Status != core.StatusRunning {
		t.Fatalf("the run is %s while the store takes no writes", got.Status)
	}

	outage.down.Store(false)
	testutil.WaitFor(t, 10*time.Second, "the run requeued as attempt 2", func() bool {
		clock.Advance(500 * time.Millisecond) // the retry's backoff is on the master's clock
		return h.task(t, run.ID).Attempt == 2
	})
}
