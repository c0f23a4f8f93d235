package dispatch

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/rlsched/rlsched/codec/pb"
	"github.com/rlsched/rlsched/core"
	"github.com/rlsched/rlsched/internal/testkit/testutil"
	"github.com/rlsched/rlsched/logpipe"
	"github.com/rlsched/rlsched/store"
)

// TestCancelThroughAnotherMaster: two masters on one store and one lease
// backend. A cancel sent to the master that does not hold the worker is
// passed on at once (OnCancel → CancelNotified), and is in the store: when
// the worker moves to that master, which never placed the run, the master
// adopts the run from the store and stops it.
func TestCancelThroughAnotherMaster(t *testing.T) {
	h := newHarness(t, nil)
	m2 := secondMaster(t, h, h.m.CancelNotified)
	run := h.submit(t, 0, "x") // after m2 started: m2 knows nothing of it
	p := dial(t, h.m.Addr())
	p.hello("w1", 1, 0)
	ex := p.expect(&pb.ExecuteTask{}).(*pb.ExecuteTask)
	p.send(&pb.TaskStarted{TaskId: run.ID, Attempt: 1, Fence: ex.Fence})
	testutil.WaitFor(t, 10*time.Second, "RUNNING", func() bool { return h.task(t, run.ID).Status == core.StatusRunning })

	if _, err := m2.Cancel(context.Background(), run.ID); err != nil {
		t.Fatal(err)
	}
	if ct := p.expect(&pb.CancelTask{}).(*pb.CancelTask); ct.TaskId != run.ID || ct.Fence != ex.Fence {
		t.Fatalf("CancelTask through the other master: %v", ct)
	}

	// The worker moves to m2 before stopping the run.
	p.c.Close()
	p2 := dial(t, m2.Addr())
	ack := p2.hello("w1", 1, 0, &pb.RunRef{TaskId: run.ID, Attempt: 1, Fence: ex.Fence})
	if len(ack.KillTaskIds) != 0 {
		t.Fatalf("m2 killed the run it did not place: %v", ack.KillTaskIds)
	}
	if ct := p2.expect(&pb.CancelTask{}).(*pb.CancelTask); ct.TaskId != run.ID || ct.Fence != ex.Fence {
		t.Fatalf("CancelTask after the move: %v", ct)
	}
	p2.send(&pb.TaskFinished{TaskId: run.ID, Attempt: 1, Fence: ex.Fence, Outcome: pb.Outcome_OUTCOME_CANCELLED, Signal: "SIGTERM", ExitCode: -1})
	p2.expect(&pb.TaskFinishedAck{})
	if got := h.task(t, run.ID); got.Status != core.StatusCancelled {
		t.Fatalf("status %s, want CANCELLED", got.Status)
	}
}

// TestCancelLostRunEndsCancelled: a request recorded by another master (or
// before a restart) is found in the store when the run is lost, and the run
// ends CANCELLED instead of being requeued.
func TestCancelLostRunEndsCancelled(t *testing.T) {
	h := newHarness(t, nil)
	run := h.submit(t, 0, "x")
	p := dial(t, h.m.Addr())
	p.hello("w1", 1, 0)
	ex := p.expect(&pb.ExecuteTask{}).(*pb.ExecuteTask)
	p.send(&pb.TaskStarted{TaskId: run.ID, Attempt: 1, Fence: ex.Fence})
	testutil.WaitFor(t, 10*time.Second, "RUNNING", func() bool { return h.task(t, run.ID).Status == core.StatusRunning })
	// Recorded by another master: this one's memory knows nothing.
	if err := h.st.RequestCancel(context.Background(), run.ID); err != nil {
		t.Fatal(err)
	}
	// The worker comes back without the run: it is lost, and ends CANCELLED.
	p.c.Close()
	p2 := dial(t, h.m.Addr())
	p2.hello("w1", 1, 0)
	testutil.WaitFor(t, 10*time.Second, "CANCELLED", func() bool { return h.task(t, run.ID).Status == core.StatusCancelled })
}

// secondMaster starts another master on h's store and lease backend.
func secondMaster(t *testing.T, h *harness, onCancel func(string)) *Dispatcher {
	t.Helper()
	return secondMasterWith(t, h, func(c *Config) { c.OnCancel = onCancel })
}

// secondMasterWith starts another master on h's store and lease backend,
// its Config as mut leaves it.
func secondMasterWith(t *testing.T, h *harness, mut func(*Config)) *Dispatcher {
	t.Helper()
	logs, err := logpipe.NewWriter(logpipe.WriterConfig{Dir: filepath.Join(h.dir, "logs2"), Store: h.st, Logger: zerolog.New(h.logs)})
	if err != nil {
		t.Fatal(err)
	}
	ls := h.m.ls.(*resetGuard).Leases
	cfg := Config{Addr: "127.0.0.1:0", MasterID: "m2", JoinToken: token, HeartbeatInterval: 200 * time.Millisecond,
		LeaseTTL: 5 * time.Second, Logger: zerolog.New(h.logs), Logs: logs}
	mut(&cfg)
	m2, err := New(cfg, store.MetricsFirst(h.st, logs), ls)
	if err != nil {
		t.Fatal(err)
	}
	if err := m2.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = m2.Stop(ctx)
		logs.Close()
	})
	return m2
}

// TestRecoveredRunForgottenWhenItEnds: a master started while another one
// runs a run keeps it from recovery (its worker may move here), and drops
// it when the other master reports the run ended.
func TestRecoveredRunForgottenWhenItEnds(t *testing.T) {
	h := newHarness(t, nil)
	run := h.submit(t, 0, "x")
	p := dial(t, h.m.Addr())
	p.hello("w1", 1, 0)
	ex := p.expect(&pb.ExecuteTask{}).(*pb.ExecuteTask)
	p.send(&pb.TaskStarted{TaskId: run.ID, Attempt: 1, Fence: ex.Fence})
	testutil.WaitFor(t, 10*time.Second, "RUNNING", func() bool { return h.task(t, run.ID).Status == core.StatusRunning })
	m2 := secondMaster(t, h, nil)
	lists := func() bool {
		for _, w := range m2.Workers() {
			if w.ID == "w1" && len(w.RunningTasks) == 1 {
				return true
			}
		}
		return false
	}
	if !lists() {
		t.Fatalf("m2 did not recover the run: %+v", m2.Workers())
	}
	p.send(&pb.TaskFinished{TaskId: run.ID, Attempt: 1, Fence: ex.Fence, Outcome: pb.Outcome_OUTCOME_EXITED})
	p.expect(&pb.TaskFinishedAck{})
	m2.RemoteTaskChanged(h.task(t, run.ID))
	if lists() {
		t.Fatalf("m2 still lists the ended run: %+v", m2.Workers())
	}
}

// TestRunRequeuedElsewhereLeavesConnectedWorker: another master's reaper
// requeues a run placed here whose worker is connected here but never
// reported it (it refused the ExecuteTask as past its lease, issue 11).
// This master must drop its dead claim, so the worker's slot is free and
// the run is scheduled again: it once kept the claim for good, the run
// QUEUED ("waits: starting on w1") and the worker idle.
func TestRunRequeuedElsewhereLeavesConnectedWorker(t *testing.T) {
	h := newClockedHarness(t, nil)
	p := dial(t, h.m.Addr())
	p.hello("w1", 1, 0)
	run := h.submit(t, 0, "x")
	ex := p.expect(&pb.ExecuteTask{}).(*pb.ExecuteTask)

	// What the other master's reaper does with the expired lease.
	ctx := context.Background()
	if err := h.m.ls.Release(ctx, run.ID, ex.Fence); err != nil {
		t.Fatal(err)
	}
	tk := h.task(t, run.ID)
	exp := store.Expect{Fence: tk.Fence, Status: tk.Status}
	if err := tk.Lose("lease of worker w1 expired"); err != nil {
		t.Fatal(err)
	}
	if err := h.st.UpdateTask(ctx, &tk, exp); err != nil {
		t.Fatal(err)
	}
	exp = store.Expect{Fence: tk.Fence, Status: tk.Status}
	if ok, err := tk.Requeue("lease of worker w1 expired", time.Now()); !ok || err != nil {
		t.Fatalf("requeue: %v %v", ok, err)
	}
	if err := h.st.UpdateTask(ctx, &tk, exp); err != nil {
		t.Fatal(err)
	}
	h.m.RemoteTaskChanged(h.task(t, run.ID))

	again := p.expect(&pb.ExecuteTask{}).(*pb.ExecuteTask)
	if again.TaskId != run.ID || again.Attempt != 2 || again.Fence <= ex.Fence {
		t.Fatalf("ExecuteTask %v after the requeue, want attempt 2 of %s with a new fence", again, run.ID)
	}
}

// TestLateEventOfAnotherMasterKeepsTheClaim: the cluster delivers the
// QUEUED of a submission made at another master after this master claimed
// and dispatched the run; that older state must not drop the claim (it
// did: the worker's output was refused as fenced and the run ran twice).
func TestLateEventOfAnotherMasterKeepsTheClaim(t *testing.T) {
	h := newClockedHarness(t, nil)
	p := dial(t, h.m.Addr())
	p.hello("w1", 1, 0)
	run := h.submit(t, 0, "x") // as the other master stored it: QUEUED, fence 0
	ex := p.expect(&pb.ExecuteTask{}).(*pb.ExecuteTask)
	if !h.m.reg.heldLive(run.ID, ex.Fence) {
		t.Fatal("the dispatched run is not held")
	}
	h.m.RemoteTaskChanged(run)
	if !h.m.reg.heldLive(run.ID, ex.Fence) {
		t.Fatal("a late QUEUED event of the submission dropped this master's claim")
	}
}

// TestStopEarly: only the master holding the run's worker stops it for its
// sweep's early stopping (another answers ErrNotPlacedHere and sends
// nothing); it goes through the cancel path (CancelTask with the grace)
// and ends CANCELLED with reason early_stopped and the controller's
// message, whatever error the worker's report gives.
func TestStopEarly(t *testing.T) {
	h := newHarness(t, nil)
	m2 := secondMaster(t, h, h.m.CancelNotified)
	run := h.submit(t, 0, "x")
	p := dial(t, h.m.Addr())
	p.hello("w1", 1, 0)
	ex := p.expect(&pb.ExecuteTask{}).(*pb.ExecuteTask)
	p.send(&pb.TaskStarted{TaskId: run.ID, Attempt: 1, Fence: ex.Fence})
	testutil.WaitFor(t, 10*time.Second, "RUNNING", func() bool { return h.task(t, run.ID).Status == core.StatusRunning })

	const why = "stopped at rung 1 (step 10): episode_reward 1 below the cut 5 of 3 members"
	if err := m2.StopEarly(context.Background(), run.ID, why); !errors.Is(err, ErrNotPlacedHere) {
		t.Fatalf("StopEarly on the master not holding the run: %v, want ErrNotPlacedHere", err)
	}
	if req, _ := h.st.CancelRequested(context.Background(), []string{run.ID}); req[run.ID] {
		t.Fatal("the refused StopEarly recorded a cancel request")
	}
	if err := h.m.StopEarly(context.Background(), run.ID, why); err != nil {
		t.Fatal(err)
	}
	if ct := p.expect(&pb.CancelTask{}).(*pb.CancelTask); ct.TaskId != run.ID || ct.Fence != ex.Fence {
		t.Fatalf("CancelTask: %v", ct)
	}
	p.send(&pb.TaskFinished{TaskId: run.ID, Attempt: 1, Fence: ex.Fence, Outcome: pb.Outcome_OUTCOME_CANCELLED,
		Signal: "SIGTERM", ExitCode: -1, Error: "terminated"})
	p.expect(&pb.TaskFinishedAck{})
	got := h.task(t, run.ID)
	if got.Status != core.StatusCancelled || got.Reason != core.ReasonEarlyStopped || got.Error != why {
		t.Fatalf("stopped run: %s, reason %q, error %q; want CANCELLED, early_stopped, %q", got.Status, got.Reason, got.Error, why)
	}
	if err := h.m.StopEarly(context.Background(), run.ID, why); !errors.Is(err, ErrNotPlacedHere) && !errors.Is(err, core.ErrConflict) {
		t.Fatalf("StopEarly of an ended run: %v", err)
	}
}
