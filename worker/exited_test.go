package worker

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/rlsched/rlsched/codec/pb"
)

// exitedAck is the HelloAck of a master that takes TaskExited.
func exitedAck(*pb.Hello) *pb.HelloAck {
	return &pb.HelloAck{Session: "s1", HeartbeatIntervalMs: 100, LeaseTtlMs: 30_000, MasterId: "m1",
		ArtifactWindow: 1 << 20, TaskExited: true}
}

// TestExitedBeforeOutputsStored: once a run's process is gone the worker
// says so (TaskExited) while its outputs are still being stored, takes the
// next run on the same GPU meanwhile, lists the run as finished in a
// Hello, and sends its TaskFinished only once every file is stored (issue
// 33).
func TestExitedBeforeOutputsStored(t *testing.T) {
	m := newFakeMaster(t, testToken)
	m.setAck(exitedAck)
	cfg := startWorker(t, m, nil)
	mc := m.next(t)
	mc.holdChunksFrom.Store(1 << 20) // a congested master: the upload stalls past 1 MiB
	script := `head -c 4194304 /dev/urandom > "$RLSCHED_OUTPUT_DIR/model.bin"`
	mc.send(&pb.ExecuteTask{TaskId: "t-ex1", Attempt: 1, Fence: 1, GpuIndices: []int32{0}, Argv: []string{"sh", "-c", script}})
	mc.started(t, "t-ex1")
	mc.expect(t, 30*time.Second, "TaskExited of t-ex1", func(msg proto.Message) bool {
		if f, ok := msg.(*pb.TaskFinished); ok && f.GetTaskId() == "t-ex1" {
			t.Fatalf("TaskFinished before TaskExited, with the upload stalled: %v", f)
		}
		e, ok := msg.(*pb.TaskExited)
		return ok && e.GetTaskId() == "t-ex1" && e.GetAttempt() == 1 && e.GetFence() == 1
	})

	// The GPU is free: the next run on it starts while the first's file is
	// still on its way.
	mc.send(&pb.ExecuteTask{TaskId: "t-ex2", Attempt: 1, Fence: 2, GpuIndices: []int32{0}, Argv: []string{"sleep", "30"}})
	mc.expect(t, 10*time.Second, "TaskStarted of t-ex2", func(msg proto.Message) bool {
		if f, ok := msg.(*pb.TaskFinished); ok {
			t.Fatalf("%s finished: %v (log %q)", f.GetTaskId(), f, m.log(f.GetTaskId(), 1))
		}
		s, ok := msg.(*pb.TaskStarted)
		return ok && s.GetTaskId() == "t-ex2"
	})
	want, err := os.ReadFile(filepath.Join(cfg.DataDir, "outputs", "t-ex1", "1", "model.bin"))
	if err != nil {
		t.Fatal(err)
	}

	// A reconnect (the next connection stores everything): its Hello says
	// the first run's process is gone, and its report comes once the file
	// is stored whole.
	mc.c.Close()
	mc2 := m.next(t)
	var listed bool
	for _, r := range mc2.hello.GetRuns() {
		if r.GetTaskId() == "t-ex1" {
			listed = r.GetFinished()
		}
	}
	if !listed {
		t.Fatalf("the Hello does not list t-ex1 as finished: %v", mc2.hello.GetRuns())
	}
	fin := mc2.finished(t, "t-ex1", 60*time.Second)
	if fin.GetExitCode() != 0 {
		t.Fatalf("t-ex1: %v", fin)
	}
	if f := m.file("t-ex1", 1, "model.bin"); f == nil || !bytes.Equal(f.data, want) {
		t.Fatal("TaskFinished came before model.bin was stored whole")
	}
}

// TestNoExitedToAnOlderMaster: a master whose HelloAck does not take
// TaskExited never gets one (it would close the connection on a frame
// type it does not know).
func TestNoExitedToAnOlderMaster(t *testing.T) {
	m := newFakeMaster(t, testToken)
	startWorker(t, m, nil)
	mc := m.next(t)
	mc.send(&pb.ExecuteTask{TaskId: "t-old", Attempt: 1, Fence: 1, GpuIndices: []int32{0}, Argv: []string{"true"}})
	mc.expect(t, 30*time.Second, "TaskFinished of t-old", func(msg proto.Message) bool {
		if _, ok := msg.(*pb.TaskExited); ok {
			t.Fatal("TaskExited sent to a master that does not take it")
		}
		return isFinished("t-old")(msg)
	})
}
