package dispatch

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/rlsched/rlsched/codec/pb"
	"github.com/rlsched/rlsched/core"
	"github.com/rlsched/rlsched/dispatch/gpuwatch"
	"github.com/rlsched/rlsched/internal/testkit/testutil"
)

// INTERACTIVE_IDLE_MINUTES: an interactive run whose GPU stays idle and
// whose terminal gets no input is told in its terminal, then cancelled
// ("interactive session idle"); a batch run on an idle GPU beside it is
// only warned (IDLE_GPU_ACTION=warn). Its attempt's terminal frames are
// relayed, a stale fence's are not.
func TestInteractiveIdleEnds(t *testing.T) {
	h := newHarness(t, func(c *Config) {
		c.GPUWatch = gpuwatch.Config{IdleUtilPct: 5, IdleAfter: time.Second, MaxGap: time.Minute}
		c.InteractiveIdle = time.Second
	})
	p := dial(t, h.m.Addr())
	p.hello("w-sess", 2, 2)
	sh := core.Task{ID: core.NewTaskID(), UserID: h.owner.ID, GPUs: 1, Attempt: 1, MaxRetries: 1,
		TraceID: core.NewTraceID(), Status: core.StatusQueued, Kind: core.KindInteractive}
	if err := h.st.CreateTask(context.Background(), &sh); err != nil {
		t.Fatal(err)
	}
	h.m.Notify()
	ex := p.expect(&pb.ExecuteTask{}).(*pb.ExecuteTask)
	if !ex.Interactive || ex.TaskId != sh.ID {
		t.Fatalf("ExecuteTask of a session: %v", ex)
	}
	batch := h.submit(t, 1, "sleep")
	exb := p.expect(&pb.ExecuteTask{}).(*pb.ExecuteTask)
	if exb.Interactive {
		t.Fatal("a batch run started interactive")
	}
	p.send(&pb.TaskStarted{TaskId: sh.ID, Attempt: ex.Attempt, Fence: ex.Fence, Pid: 1})
	p.send(&pb.TaskStarted{TaskId: batch.ID, Attempt: exb.Attempt, Fence: exb.Fence, Pid: 2})
	testutil.WaitFor(t, 10*time.Second, "RUNNING", func() bool {
		return h.task(t, sh.ID).Status == core.StatusRunning && h.task(t, batch.ID).Status == core.StatusRunning
	})
	ts, err := h.m.Terminal(sh.ID)
	if err != nil {
		t.Fatal(err)
	}
	v, err := ts.Attach()
	if err != nil {
		t.Fatal(err)
	}
	p.send(&pb.TermData{TaskId: sh.ID, Attempt: ex.Attempt, Fence: ex.Fence + 1, Data: []byte("stale")})
	p.send(&pb.TermData{TaskId: sh.ID, Attempt: ex.Attempt, Fence: ex.Fence, Data: []byte("$ ")})

	refs := []*pb.RunRef{{TaskId: sh.ID, Attempt: ex.Attempt, Fence: ex.Fence}, {TaskId: batch.ID, Attempt: exb.Attempt, Fence: exb.Fence}}
	var ct *pb.CancelTask
	seq := uint64(0)
	testutil.Eventually(t, 15*time.Second, func() (bool, string) {
		seq++
		p.send(&pb.Heartbeat{Seq: seq, Runs: refs, Gpus: gpuSample([]uint32{1, 2})})
		for {
			m, err := p.read()
			if err != nil {
				t.Fatal(err)
			}
			if c, ok := m.(*pb.CancelTask); ok {
				ct = c
				return true, ""
			}
			if _, ok := m.(*pb.HeartbeatAck); ok {
				return false, "no CancelTask for an idle session"
			}
		}
	})
	if ct.TaskId != sh.ID {
		t.Fatalf("CancelTask of %s, want the session %s (the batch run is only warned)", ct.TaskId, sh.ID)
	}
	var screen strings.Builder
	testutil.WaitFor(t, 10*time.Second, "the notice in the terminal", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		out, _, _, _ := v.Next(ctx)
		for _, b := range out {
			screen.Write(b)
		}
		return strings.Contains(screen.String(), "INTERACTIVE_IDLE_MINUTES")
	})
	if s := screen.String(); !strings.HasPrefix(s, "$ ") || strings.Contains(s, "stale") {
		t.Fatalf("terminal: %q", s)
	}
	p.send(&pb.TaskFinished{TaskId: sh.ID, Attempt: ex.Attempt, Fence: ex.Fence, Outcome: pb.Outcome_OUTCOME_CANCELLED, Signal: "SIGTERM", ExitCode: -1})
	p.expect(&pb.TaskFinishedAck{})
	if got := h.task(t, sh.ID); got.Status != core.StatusCancelled || !strings.Contains(got.Error, "interactive session idle") {
		t.Fatalf("%s %q", got.Status, got.Error)
	}
	if h.m.terms.Lookup(sh.ID) != nil {
		t.Fatal("the ended session's terminal is still held")
	}
}
