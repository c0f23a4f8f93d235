package dispatch

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rlsched/rlsched/codec/pb"
	"github.com/rlsched/rlsched/core"
	"github.com/rlsched/rlsched/internal/testkit/testutil"
)

// groupBed is a master with two fake workers, w1 (2 slots: rank 0 of a CPU
// group, which goes to the most free slots first) and w2 (1 slot).
func groupBed(t *testing.T) (*harness, *peer, *peer) {
	h := newClockedHarness(t, nil)
	p0, p1 := dial(t, h.m.Addr()), dial(t, h.m.Addr())
	p0.hello("w1", 2, 0)
	p1.hello("w2", 1, 0)
	return h, p0, p1
}

func (h *harness) submitGroup(t *testing.T, argv ...string) core.Task {
	t.Helper()
	task := core.Task{ID: core.NewTaskID(), UserID: h.owner.ID, Command: argv, Nodes: 2, Attempt: 1,
		MaxRetries: 1, TraceID: core.NewTraceID(), Status: core.StatusQueued}
	if err := h.st.CreateTask(context.Background(), &task); err != nil {
		t.Fatal(err)
	}
	h.m.Notify()
	return task
}

// A group starts rank 0 first, then rank 1 with the port rank 0's worker
// reported; each member's log is its own file; the run is RUNNING from
// rank 0's start and SUCCEEDED once both exited 0.
func TestGroupStartsRankZeroFirstAndSucceedsAsOne(t *testing.T) {
	h, p0, p1 := groupBed(t)
	g := h.submitGroup(t, "train")
	ex0 := p0.expect(&pb.ExecuteTask{}).(*pb.ExecuteTask)
	if ex0.TaskId != g.ID || ex0.NodeRank != 0 || ex0.Nodes != 2 || ex0.MasterPort != 0 || len(ex0.Hosts) != 2 || ex0.Hosts[0] != "127.0.0.1" {
		t.Fatalf("rank 0's ExecuteTask %v", ex0)
	}
	if got := h.task(t, g.ID); got.Status != core.StatusDispatched || got.Worker != "w1" {
		t.Fatalf("after dispatch: %+v", got)
	}
	p0.send(&pb.TaskStarted{TaskId: g.ID, Attempt: 1, Fence: ex0.Fence, Pid: 7, MasterPort: 40123})
	ex1 := p1.expect(&pb.ExecuteTask{}).(*pb.ExecuteTask)
	if ex1.TaskId != g.ID || ex1.Fence != ex0.Fence || ex1.NodeRank != 1 || ex1.Nodes != 2 || ex1.MasterPort != 40123 || len(ex1.Restore) != 0 {
		t.Fatalf("rank 1's ExecuteTask %v", ex1)
	}
	p1.send(&pb.TaskStarted{TaskId: g.ID, Attempt: 1, Fence: ex1.Fence, Pid: 8})
	p0.send(&pb.LogData{TaskId: g.ID, Attempt: 1, Fence: ex0.Fence, Data: []byte("zero\n")})
	p1.send(&pb.LogData{TaskId: g.ID, Attempt: 1, Fence: ex1.Fence, Data: []byte("one\n")})
	if a := p0.expect(&pb.LogAck{}).(*pb.LogAck); a.Error != "" || a.TaskId != g.ID || a.Offset != 5 {
		t.Fatalf("rank 0's LogAck %v", a)
	}
	if a := p1.expect(&pb.LogAck{}).(*pb.LogAck); a.Error != "" || a.TaskId != g.ID || a.Offset != 4 {
		t.Fatalf("rank 1's LogAck %v", a)
	}
	for rank, want := range []string{"zero\n", "one\n"} {
		b, err := os.ReadFile(filepath.Join(h.dir, "logs", core.LogFile(g.ID, rank)))
		if err != nil || !strings.HasSuffix(string(b), "\n"+want) { // after the file's TRACE_ID line
			t.Fatalf("rank %d's log file: %q %v", rank, b, err)
		}
	}
	testutil.WaitFor(t, 5*time.Second, "RUNNING", func() bool { return h.task(t, g.ID).Status == core.StatusRunning })

	p1.send(&pb.TaskFinished{TaskId: g.ID, Attempt: 1, Fence: ex1.Fence, Outcome: pb.Outcome_OUTCOME_EXITED})
	p1.expect(&pb.TaskFinishedAck{})
	if got := h.task(t, g.ID); got.Status != core.StatusRunning {
		t.Fatalf("one member's end ended the group: %s", got.Status)
	}
	p0.send(&pb.TaskFinished{TaskId: g.ID, Attempt: 1, Fence: ex0.Fence, Outcome: pb.Outcome_OUTCOME_EXITED})
	p0.expect(&pb.TaskFinishedAck{})
	if got := h.task(t, g.ID); got.Status != core.StatusSucceeded || got.Attempt != 1 {
		t.Fatalf("finished: %+v", got)
	}
	testutil.WaitFor(t, 5*time.Second, "both workers idle", func() bool {
		ws := h.m.Workers()
		return len(ws) == 2 && ws[0].State == core.WorkerIdle && ws[1].State == core.WorkerIdle
	})
}

// A member that exits non-zero stops the other (CancelTask, a short
// grace) and the group fails as one, its error naming the rank.
func TestGroupMemberFailureStopsTheOthers(t *testing.T) {
	h, p0, p1 := groupBed(t)
	g := h.submitGroup(t, "train")
	ex0 := p0.expect(&pb.ExecuteTask{}).(*pb.ExecuteTask)
	p0.send(&pb.TaskStarted{TaskId: g.ID, Attempt: 1, Fence: ex0.Fence, Pid: 7, MasterPort: 40124})
	ex1 := p1.expect(&pb.ExecuteTask{}).(*pb.ExecuteTask)
	p1.send(&pb.TaskFinished{TaskId: g.ID, Attempt: 1, Fence: ex1.Fence, Outcome: pb.Outcome_OUTCOME_EXITED, ExitCode: 3})
	ct := p0.expect(&pb.CancelTask{}).(*pb.CancelTask)
	if ct.TaskId != g.ID || ct.Fence != ex0.Fence || ct.GraceMs != groupStopGrace.Milliseconds() {
		t.Fatalf("rank 0's CancelTask %v", ct)
	}
	if got := h.task(t, g.ID); got.Status.Terminal() {
		t.Fatalf("the group ended before rank 0 stopped: %+v", got)
	}
	p0.send(&pb.TaskFinished{TaskId: g.ID, Attempt: 1, Fence: ex0.Fence, Outcome: pb.Outcome_OUTCOME_CANCELLED, Signal: "SIGTERM", ExitCode: -1})
	p0.expect(&pb.TaskFinishedAck{})
	got := h.task(t, g.ID)
	if got.Status != core.StatusFailed || got.Error != "rank 1 (worker w2) exited with code 3" || got.ExitCode == nil || *got.ExitCode != 3 {
		t.Fatalf("finished: %s %q %v", got.Status, got.Error, got.ExitCode)
	}
}

// Rank 0 that cannot start fails the group; rank 1 is never sent.
func TestGroupRankZeroStartFailure(t *testing.T) {
	h, p0, _ := groupBed(t)
	g := h.submitGroup(t, "train")
	ex0 := p0.expect(&pb.ExecuteTask{}).(*pb.ExecuteTask)
	p0.send(&pb.TaskFinished{TaskId: g.ID, Attempt: 1, Fence: ex0.Fence, Outcome: pb.Outcome_OUTCOME_START_FAILED, Error: "no such file: train"})
	p0.expect(&pb.TaskFinishedAck{})
	got := h.task(t, g.ID)
	if got.Status != core.StatusFailed || got.Error != "rank 0 (worker w1) could not start: no such file: train" {
		t.Fatalf("finished: %s %q", got.Status, got.Error)
	}
	testutil.WaitFor(t, 5*time.Second, "both workers idle", func() bool {
		ws := h.m.Workers()
		return len(ws) == 2 && ws[0].State == core.WorkerIdle && ws[1].State == core.WorkerIdle
	})
}

// A member's worker that disconnects loses the attempt: the other member
// is stopped and the group requeued as one run, attempt 2.
func TestGroupMemberLostRequeues(t *testing.T) {
	h, p0, p1 := groupBed(t)
	g := h.submitGroup(t, "train")
	ex0 := p0.expect(&pb.ExecuteTask{}).(*pb.ExecuteTask)
	p0.send(&pb.TaskStarted{TaskId: g.ID, Attempt: 1, Fence: ex0.Fence, Pid: 7, MasterPort: 40125})
	p1.expect(&pb.ExecuteTask{})
	p1.c.Close()
	ct := p0.expect(&pb.CancelTask{}).(*pb.CancelTask)
	if ct.TaskId != g.ID || ct.GraceMs != groupStopGrace.Milliseconds() {
		t.Fatalf("rank 0's CancelTask %v", ct)
	}
	p0.send(&pb.TaskFinished{TaskId: g.ID, Attempt: 1, Fence: ex0.Fence, Outcome: pb.Outcome_OUTCOME_CANCELLED, Signal: "SIGTERM", ExitCode: -1})
	p0.expect(&pb.TaskFinishedAck{})
	testutil.WaitFor(t, 5*time.Second, "requeued", func() bool {
		got := h.task(t, g.ID)
		return got.Status == core.StatusQueued && got.Attempt == 2
	})
}
