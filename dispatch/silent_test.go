package dispatch

import (
	"context"
	"testing"
	"time"

	"github.com/rlsched/rlsched/codec/pb"
	"github.com/rlsched/rlsched/core"
	"github.com/rlsched/rlsched/internal/testkit/testutil"
)

// A run whose worker goes silent gets one worker_silent warning that says
// for how long and when the run is requeued (its lease's end); the worker
// coming back without the run frees it at once, lease or not.
func TestSilentWorkerWarnsItsRuns(t *testing.T) {
	h := newClockedHarness(t, func(c *Config) { c.LeaseTTL = time.Minute; c.HeartbeatTTL = 5 * time.Second })
	p := dial(t, h.m.Addr())
	p.hello("w-quiet", 1, 0)
	run := h.submit(t, 0, "x")
	ex := p.expect(&pb.ExecuteTask{}).(*pb.ExecuteTask)
	p.send(&pb.TaskStarted{TaskId: run.ID, Attempt: 1, Fence: ex.Fence, Pid: 42})
	testutil.WaitFor(t, 10*time.Second, "the run RUNNING", func() bool { return h.task(t, run.ID).Status == core.StatusRunning })
	l, ok, err := h.m.ls.Get(context.Background(), run.ID)
	if err != nil || !ok {
		t.Fatalf("the run's lease: %v %v", ok, err)
	}

	h.clock.Advance(7 * time.Second) // past the heartbeat TTL: the reaper closes the session
	var got core.Task
	testutil.WaitFor(t, 10*time.Second, "the worker_silent warning", func() bool {
		got = h.task(t, run.ID)
		return len(got.Warnings) > 0
	})
	want := SilentMessage("w-quiet", 7*time.Second, l.Expires.Add(h.m.cfg.ReapInterval))
	if want != "worker w-quiet silent for 7 s; the run is requeued at "+l.Expires.Add(h.m.cfg.ReapInterval).UTC().Format("15:04:05")+" UTC unless it returns" {
		t.Fatalf("the sentence: %q", want)
	}
	if w := got.Warnings[0]; w.Code != core.WarnWorkerSilent || w.Message != want || got.Status != core.StatusRunning {
		t.Fatalf("warnings %+v on a %s run, want one %q", got.Warnings, got.Status, want)
	}
	if info, _ := h.m.reg.info("w-quiet", "m1"); info.State != core.WorkerPending {
		t.Fatalf("the silent worker is %s", info.State)
	}
	h.m.reap.reapOnce(context.Background()) // once per absence
	if n := len(h.task(t, run.ID).Warnings); n != 1 {
		t.Fatalf("%d warnings after another reap, want 1", n)
	}

	p2 := dial(t, h.m.Addr())
	p2.hello("w-quiet", 1, 0) // restarted: without the run
	testutil.WaitFor(t, 10*time.Second, "the run requeued before its lease ends", func() bool {
		t := h.task(t, run.ID)
		return t.Attempt == 2 && t.Status != core.StatusRunning
	})
}
