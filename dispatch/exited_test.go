package dispatch

import (
	"testing"
	"time"

	"github.com/rlsched/rlsched/codec/pb"
	"github.com/rlsched/rlsched/core"
	"github.com/rlsched/rlsched/internal/testkit/testutil"
)

// TestExitedFreesTheGPUBeforeTheEnd: a TaskExited (the run's process is
// gone, its outputs still being stored) frees its GPU for the next run at
// once, while the run stays RUNNING under its lease; its TaskFinished then
// ends it as before (issue 33).
func TestExitedFreesTheGPUBeforeTheEnd(t *testing.T) {
	h := newClockedHarness(t, nil)
	p := dial(t, h.m.Addr())
	if ack := p.hello("wx", 0, 1); !ack.TaskExited {
		t.Fatal("HelloAck does not say the master takes TaskExited")
	}
	first := h.submit(t, 1, "first")
	ex := p.expect(&pb.ExecuteTask{}).(*pb.ExecuteTask)
	if ex.TaskId != first.ID {
		t.Fatalf("placed %v", ex)
	}
	p.send(&pb.TaskStarted{TaskId: first.ID, Attempt: 1, Fence: ex.Fence})
	testutil.WaitFor(t, 10*time.Second, "RUNNING", func() bool { return h.task(t, first.ID).Status == core.StatusRunning })
	second := h.submit(t, 1, "second")

	// A stale TaskExited frees nothing.
	p.send(&pb.TaskExited{TaskId: first.ID, Attempt: 1, Fence: ex.Fence + 1})
	p.send(&pb.Heartbeat{Seq: 1}) // on the same shard, after it
	p.expect(&pb.HeartbeatAck{})
	if got := h.task(t, second.ID); got.Status != core.StatusQueued {
		t.Fatalf("a stale TaskExited freed the GPU: the second run is %s", got.Status)
	}

	p.send(&pb.TaskExited{TaskId: first.ID, Attempt: 1, Fence: ex.Fence})
	ex2 := p.expect(&pb.ExecuteTask{}).(*pb.ExecuteTask)
	if ex2.TaskId != second.ID || len(ex2.GpuIndices) != 1 || ex2.GpuIndices[0] != ex.GpuIndices[0] {
		t.Fatalf("after TaskExited: %v", ex2)
	}
	if got := h.task(t, first.ID); got.Status != core.StatusRunning {
		t.Fatalf("the exited run is %s before its TaskFinished, want RUNNING", got.Status)
	}
	// Its lease is still held: a heartbeat renews it.
	p.send(&pb.Heartbeat{Seq: 2, Runs: []*pb.RunRef{{TaskId: first.ID, Attempt: 1, Fence: ex.Fence, Finished: true},
		{TaskId: second.ID, Attempt: 1, Fence: ex2.Fence}}})
	if hb := p.expect(&pb.HeartbeatAck{}).(*pb.HeartbeatAck); len(hb.LostTaskIds) != 0 {
		t.Fatalf("an exited run's lease was not renewed: lost %v", hb.LostTaskIds)
	}
	if ws := h.m.Workers(); len(ws) != 1 || ws[0].GPUs[0].TaskID != second.ID {
		t.Fatalf("the GPU's holder: %+v", ws)
	}

	p.send(&pb.TaskFinished{TaskId: first.ID, Attempt: 1, Fence: ex.Fence, Outcome: pb.Outcome_OUTCOME_EXITED})
	p.expect(&pb.TaskFinishedAck{})
	if got := h.task(t, first.ID); got.Status != core.StatusSucceeded {
		t.Fatalf("after TaskFinished: %s", got.Status)
	}
}

// TestExitedInHello: a run a reconnecting worker lists as finished (its
// process gone, its report to come) holds no GPU on the master it joins;
// a worker lost before its TaskFinished leaves the run to the reaper, LOST
// and requeued as before.
func TestExitedInHello(t *testing.T) {
	h := newClockedHarness(t, nil)
	p := dial(t, h.m.Addr())
	p.hello("wy", 0, 1)
	first := h.submit(t, 1, "first")
	ex := p.expect(&pb.ExecuteTask{}).(*pb.ExecuteTask)
	p.send(&pb.TaskStarted{TaskId: first.ID, Attempt: 1, Fence: ex.Fence})
	testutil.WaitFor(t, 10*time.Second, "RUNNING", func() bool { return h.task(t, first.ID).Status == core.StatusRunning })
	p.c.Close()

	second := h.submit(t, 1, "second")
	p2 := dial(t, h.m.Addr())
	p2.hello("wy", 0, 1, &pb.RunRef{TaskId: first.ID, Attempt: 1, Fence: ex.Fence, Finished: true})
	ex2 := p2.expect(&pb.ExecuteTask{}).(*pb.ExecuteTask)
	if ex2.TaskId != second.ID {
		t.Fatalf("placed %v", ex2)
	}
	if got := h.task(t, first.ID); got.Status != core.StatusRunning {
		t.Fatalf("the exited run is %s, want RUNNING", got.Status)
	}

	// The worker dies before the first run's outputs are stored: its lease
	// runs out and the reaper requeues it, as for any run of a lost worker.
	p2.c.Close()
	h.clock.Advance(h.m.leaseHold() + time.Millisecond)
	testutil.WaitFor(t, 10*time.Second, "the exited run requeued", func() bool {
		got := h.task(t, first.ID)
		return got.Status == core.StatusQueued && got.Attempt == 2
	})
}
