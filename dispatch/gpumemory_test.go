package dispatch

import (
	"context"
	"testing"
	"time"

	"github.com/rlsched/rlsched/codec/pb"
	"github.com/rlsched/rlsched/core"
)

// A run its worker stopped for its GPU memory (issue 28) is FAILED with
// reason gpu_memory and the worker's sentence, even when it exited 0 on
// the SIGTERM; a cancel asked for meanwhile still makes it CANCELLED.
func TestFinishFromReport_GPUMemory(t *testing.T) {
	sentence := "used 9,210 MiB of GPU 0, over its 4,096 MiB share for 30 s; ask for more with --gpu-memory"
	f := func(tf *pb.TaskFinished, cancelled bool, status core.Status, reason, msg string) {
		t.Helper()
		now := time.Unix(1_800_000_000, 0)
		started := now.Add(-time.Minute)
		task := core.Task{ID: "t", Status: core.StatusRunning, GPUs: 1, StartedAt: &started}
		if err := finishFromReport(&task, tf, cancelled, cancelCause{msg: "cancelled by its owner"}, now); err != nil {
			t.Fatal(err)
		}
		if task.Status != status || task.Reason != reason || task.Error != msg {
			t.Fatalf("%v: %s reason %q error %q, want %s %q %q", tf, task.Status, task.Reason, task.Error, status, reason, msg)
		}
	}
	f(&pb.TaskFinished{Outcome: pb.Outcome_OUTCOME_EXITED, ExitCode: 0, Reason: core.ReasonGPUMemory, Error: sentence},
		false, core.StatusFailed, core.ReasonGPUMemory, sentence)
	f(&pb.TaskFinished{Outcome: pb.Outcome_OUTCOME_EXITED, ExitCode: -1, Signal: "SIGKILL", Reason: core.ReasonGPUMemory, Error: sentence},
		false, core.StatusFailed, core.ReasonGPUMemory, sentence)
	f(&pb.TaskFinished{Outcome: pb.Outcome_OUTCOME_EXITED, ExitCode: 0, Reason: core.ReasonGPUMemory, Error: sentence},
		true, core.StatusCancelled, "", sentence) // the worker's error is kept, as for any cancel
	// The disk watchdog's stop is the same kind (issue 26).
	disk := "used 20 MiB of disk (its outputs, HOME, TMPDIR and its files in /tmp and /var/tmp), over the 8 MiB a run may fill on this worker (DISK_MAX_MB); keep less on disk"
	f(&pb.TaskFinished{Outcome: pb.Outcome_OUTCOME_EXITED, ExitCode: -1, Signal: "SIGTERM", Reason: core.ReasonDisk, Error: disk},
		false, core.StatusFailed, core.ReasonDisk, disk)
}

// Through a master: the Task keeps the reason and the worker's sentence.
func TestGPUMemoryReasonOnTheTask(t *testing.T) {
	h := newClockedHarness(t, nil)
	p := dial(t, h.m.Addr())
	if _, ok := p.join(&pb.Hello{WorkerId: "w", Host: "test", Slots: 1, Gpus: []*pb.GPU{{Index: 0, Name: "gpu"}}}).(*pb.HelloAck); !ok {
		t.Fatal("Hello refused")
	}
	task := core.Task{ID: core.NewTaskID(), UserID: h.owner.ID, Command: []string{"x"}, GPUs: 1,
		Attempt: 1, MaxRetries: 1, TraceID: core.NewTraceID(), Status: core.StatusQueued}
	if err := h.st.CreateTask(context.Background(), &task); err != nil {
		t.Fatal(err)
	}
	h.m.Notify()
	ex := p.expect(&pb.ExecuteTask{}).(*pb.ExecuteTask)
	p.send(&pb.TaskStarted{TaskId: task.ID, Attempt: 1, Fence: ex.Fence})
	sentence := "used 9,210 MiB of GPU 0, over its 4,096 MiB share for 30 s; ask for more with --gpu-memory"
	p.send(&pb.TaskFinished{TaskId: task.ID, Attempt: 1, Fence: ex.Fence, Outcome: pb.Outcome_OUTCOME_EXITED,
		Signal: "SIGTERM", ExitCode: -1, Reason: core.ReasonGPUMemory, Error: sentence})
	p.expect(&pb.TaskFinishedAck{})
	got := h.task(t, task.ID)
	if got.Status != core.StatusFailed || got.Reason != core.ReasonGPUMemory || got.Error != sentence {
		t.Fatalf("after the watchdog's stop: %s reason %q error %q", got.Status, got.Reason, got.Error)
	}
}
