package dispatch

import (
	"context"
	"testing"
	"time"

	"github.com/rlsched/rlsched/codec/pb"
	"github.com/rlsched/rlsched/core"
	"github.com/rlsched/rlsched/dispatch/plan"
	"github.com/rlsched/rlsched/internal/testkit/testutil"
)

// A worker's cores and memory (issue 26): Hello's offer in the worker
// list, a run placed only where its cores fit, ExecuteTask carrying its
// limits, a run that does not fit waiting with cpu or no_worker, and the
// out-of-memory verdict and usage of TaskFinished on the Task.
func TestResourcesOnTheMaster(t *testing.T) {
	h := newClockedHarness(t, nil)
	p := dial(t, h.m.Addr())
	if _, ok := p.join(&pb.Hello{WorkerId: "w", Host: "test", Slots: 4, CpuMillis: 4000, MemoryMb: 8192,
		Enforcement: core.EnforcementNone, EnforcementWarning: "not root",
		Gpus: []*pb.GPU{{Index: 0, Name: "gpu", CpuAffinity: "0-3"}}}).(*pb.HelloAck); !ok {
		t.Fatal("Hello refused")
	}
	run := func(gpus int, cpus float64, mem int64) core.Task {
		t.Helper()
		task := core.Task{ID: core.NewTaskID(), UserID: h.owner.ID, Command: []string{"x"}, GPUs: gpus, CPUs: cpus, MemoryMB: mem,
			Attempt: 1, MaxRetries: 1, TraceID: core.NewTraceID(), Status: core.StatusQueued}
		if err := h.st.CreateTask(context.Background(), &task); err != nil {
			t.Fatal(err)
		}
		h.m.Notify()
		return task
	}
	big := run(0, 3, 6144)
	ex := p.expect(&pb.ExecuteTask{}).(*pb.ExecuteTask)
	if ex.TaskId != big.ID || ex.CpuMillis != 3000 || ex.MemoryMb != 6144 {
		t.Fatalf("ExecuteTask %s: cpu_millis %d memory_mb %d, want %s 3000 6144", ex.TaskId, ex.CpuMillis, ex.MemoryMb, big.ID)
	}
	ws := h.m.Workers()
	if len(ws) != 1 || ws[0].CPUs != 4 || ws[0].MemoryMB != 8192 || ws[0].CPUsUsed != 3 || ws[0].MemoryMBUsed != 6144 ||
		ws[0].Enforcement != core.EnforcementNone || ws[0].EnforcementWarning != "not root" || ws[0].GPUs[0].CPUAffinity != "0-3" {
		t.Fatalf("worker list %+v", ws)
	}
	p.send(&pb.TaskStarted{TaskId: big.ID, Attempt: 1, Fence: ex.Fence})
	testutil.Eventually(t, 10*time.Second, func() (bool, string) {
		got := h.task(t, big.ID)
		return len(got.Warnings) == 1 && got.Warnings[0].Code == core.WarnUnenforced, "no unenforced warning on a run of a best-effort worker"
	})

	// Two cores are more than the one left; 1 GiB of memory the CPU slots
	// leave only 2 GiB of; 64 cores no worker has.
	cores, mem, never := run(0, 2, 1024), run(0, 1, 4096), run(1, 64, 1024)
	explainNow(t, h.m, []core.Task{cores, mem, never}, map[string]core.QueueInfo{
		cores.ID: {Position: 1, Code: plan.CodeCPU, Reason: "needs 2 cores, the most free on a worker with a free CPU slot is 1 core"},
		mem.ID:   {Position: 2, Code: plan.CodeMemory, Reason: "needs 4 GiB of memory, the most free on a worker with a free CPU slot is 2 GiB"},
		never.ID: {Position: 3, Code: plan.CodeNoWorker, Reason: "needs 64 cores, no worker with 1 GPU has that many (the largest offers 4 cores)"},
	})

	// Killed at its memory limit: FAILED out_of_memory with its peak, and
	// usage; its cores free for the run that waited for them.
	p.send(&pb.TaskFinished{TaskId: big.ID, Attempt: 1, Fence: ex.Fence, Outcome: pb.Outcome_OUTCOME_EXITED, ExitCode: -1,
		Signal: "SIGKILL", Reason: core.ReasonOutOfMemory, CpuSeconds: 12.5, PeakMemoryMb: 6300})
	p.expect(&pb.TaskFinishedAck{})
	got := h.task(t, big.ID)
	if got.Status != core.StatusFailed || got.Reason != core.ReasonOutOfMemory ||
		got.Error != "out of memory: used 6.2 GiB of its 6 GiB limit; ask for more with --memory" {
		t.Fatalf("after the OOM kill: %s reason %q error %q", got.Status, got.Reason, got.Error)
	}
	if got.Usage == nil || got.Usage.CPUSeconds != 12.5 || got.Usage.PeakMemoryMB != 6300 || got.Usage.GPUSeconds != 0 {
		t.Fatalf("usage %+v", got.Usage)
	}
	next := p.expect(&pb.ExecuteTask{}).(*pb.ExecuteTask)
	if next.TaskId != cores.ID && next.TaskId != mem.ID {
		t.Fatalf("started %s after the cores freed", next.TaskId)
	}

	// A plain SIGKILL stays one.
	p.send(&pb.TaskFinished{TaskId: next.TaskId, Attempt: 1, Fence: next.Fence, Outcome: pb.Outcome_OUTCOME_EXITED, ExitCode: -1, Signal: "SIGKILL"})
	p.expect(&pb.TaskFinishedAck{})
	if got := h.task(t, next.TaskId); got.Reason != "" || got.Error != "killed by SIGKILL" || got.Usage == nil {
		t.Fatalf("a plain kill: reason %q error %q usage %v", got.Reason, got.Error, got.Usage)
	}
}
