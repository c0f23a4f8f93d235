package dispatch

import (
	"testing"
	"time"

	"github.com/rlsched/rlsched/codec/pb"
	"github.com/rlsched/rlsched/core"
	"github.com/rlsched/rlsched/internal/testkit/testutil"
)

// A failed run's record keeps the last lines of its log, metric lines left
// out; a run that succeeds keeps none.
func TestFailedRunKeepsItsErrorTail(t *testing.T) {
	h := newClockedHarness(t, nil)
	p := dial(t, h.m.Addr())
	p.hello("w1", 2, 0)
	end := func(out string, code int32) core.Task {
		t.Helper()
		run := h.submit(t, 0, "x")
		ex := p.expect(&pb.ExecuteTask{}).(*pb.ExecuteTask)
		p.send(&pb.TaskStarted{TaskId: run.ID, Attempt: 1, Fence: ex.Fence, Pid: 42})
		p.send(&pb.LogData{TaskId: run.ID, Attempt: 1, Fence: ex.Fence, Offset: 0, Data: []byte(out)})
		if ack := p.expect(&pb.LogAck{}).(*pb.LogAck); ack.Error != "" {
			t.Fatalf("LogAck %v", ack)
		}
		p.send(&pb.TaskFinished{TaskId: run.ID, Attempt: 1, Fence: ex.Fence, Outcome: pb.Outcome_OUTCOME_EXITED, ExitCode: code})
		p.expect(&pb.TaskFinishedAck{})
		var got core.Task
		testutil.WaitFor(t, 10*time.Second, "the run's end", func() bool { got = h.task(t, run.ID); return got.Status.Terminal() })
		return got
	}
	got := end("loading\nRLSCHED_METRIC {\"step\":1,\"r\":2}\nTraceback (most recent call last):\nModuleNotFoundError: No module named 'gym'\n", 1)
	if want := "loading\nTraceback (most recent call last):\nModuleNotFoundError: No module named 'gym'"; got.Status != core.StatusFailed || got.ErrorTail != want {
		t.Fatalf("a failed run: %s with errorTail %q, want %q", got.Status, got.ErrorTail, want)
	}
	if got := end("fine\n", 0); got.Status != core.StatusSucceeded || got.ErrorTail != "" {
		t.Fatalf("a run that succeeded: %s with errorTail %q", got.Status, got.ErrorTail)
	}
}
