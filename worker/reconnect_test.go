package worker

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/rlsched/rlsched/codec/pb"
)

func TestReconnect_ResendsFromAckedOffset(t *testing.T) {
	m := newFakeMaster(t, testToken)
	cfg := startWorker(t, m, nil)
	mc := m.next(t)
	// Three bursts of 100 lines; the run waits for a file in its cwd between them.
	const burst = `j=$((i+100)); while [ $i -lt $j ]; do echo "line $i"; i=$((i+1)); done; `
	const await = `while [ ! -e %s ]; do sleep 0.02; done; `
	script := "i=0; " + burst + fmt.Sprintf(await, "go1") + burst + fmt.Sprintf(await, "go2") + burst
	mc.send(&pb.ExecuteTask{TaskId: "t-rc", Attempt: 1, Fence: 9, Argv: []string{"sh", "-c", script}})
	mc.started(t, "t-rc")
	var want strings.Builder
	var burstEnd []uint64
	for i := range 300 {
		fmt.Fprintf(&want, "line %d\n", i)
		if i%100 == 99 {
			burstEnd = append(burstEnd, uint64(want.Len()))
		}
	}
	release := func(name string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(cfg.DataDir, "private", "t-rc.1", name), nil, 0o644); err != nil { // where the run starts
			t.Fatal(err)
		}
	}

	// The first burst is acked; then acks stop and the second burst stays unacked.
	waitFor(t, 10*time.Second, "the first burst acked", func() bool { return mc.acked("t-rc") == burstEnd[0] })
	mc.ackLogs.Store(false)
	acked := mc.acked("t-rc")
	waitFor(t, 10*time.Second, "the worker to see the last ack", func() bool {
		_, hb := mc.heartbeats()
		return len(hb.GetRuns()) == 1 && hb.GetRuns()[0].GetAckedLogOffset() == acked
	})
	release("go1")
	waitFor(t, 10*time.Second, "the second burst, unacked", func() bool { return len(m.log("t-rc", 1)) == int(burstEnd[1]) })
	mc.c.Close() // the master drops the connection mid-run

	mc2 := m.next(t)
	runs := mc2.hello.GetRuns()
	if len(runs) != 1 || runs[0].GetTaskId() != "t-rc" || runs[0].GetAttempt() != 1 || runs[0].GetFence() != 9 ||
		runs[0].GetAckedLogOffset() != acked || runs[0].GetFinished() {
		t.Fatalf("Hello.runs = %v, want t-rc running with acked offset %d", runs, acked)
	}
	first := mc2.expect(t, 10*time.Second, "LogData after reconnect", func(m proto.Message) bool {
		_, ok := m.(*pb.LogData)
		return ok
	}).(*pb.LogData)
	if first.GetOffset() != acked {
		t.Fatalf("first LogData after reconnect at offset %d, want the acked offset %d", first.GetOffset(), acked)
	}
	release("go2")
	fin := mc2.finished(t, "t-rc", 30*time.Second)
	if got := m.log("t-rc", 1); got != want.String() {
		t.Fatalf("log after reconnect is not exact: %d bytes, want %d", len(got), want.Len())
	}
	if fin.GetExitCode() != 0 || fin.GetLogBytes() != uint64(want.Len()) {
		t.Fatalf("TaskFinished: %v", fin)
	}
	if n := m.gapCount(); n != 0 {
		t.Fatalf("the master saw %d gaps", n)
	}
}

func TestReconnect_FinishedRunReportedAgain(t *testing.T) {
	m := newFakeMaster(t, testToken)
	startWorker(t, m, nil)
	mc := m.next(t)
	mc.send(&pb.ExecuteTask{TaskId: "t-done", Attempt: 1, Argv: []string{"echo", "done"}})
	mc.finished(t, "t-done", 10*time.Second)
	mc.c.Close() // before the TaskFinishedAck

	mc2 := m.next(t)
	runs := mc2.hello.GetRuns()
	if len(runs) != 1 || !runs[0].GetFinished() || runs[0].GetAckedLogOffset() != 5 {
		t.Fatalf("Hello.runs = %v, want t-done finished with 5 bytes acked", runs)
	}
	fin := mc2.finished(t, "t-done", 10*time.Second)
	if fin.GetExitCode() != 0 || fin.GetLogBytes() != 5 {
		t.Fatalf("TaskFinished: %v", fin)
	}
}

func TestLogAck_GapResends(t *testing.T) {
	m := newFakeMaster(t, testToken)
	startWorker(t, m, nil)
	mc := m.next(t)
	mc.ackLogs.Store(false)
	mc.send(&pb.ExecuteTask{TaskId: "t-gap", Attempt: 1, Argv: []string{"sh", "-c", "echo 0123456789"}})
	waitFor(t, 10*time.Second, "output", func() bool { return m.log("t-gap", 1) == "0123456789\n" })
	// Pretend the master lost everything after byte 4: it must get it again.
	m.mu.Lock()
	m.logs["t-gap/1"] = m.logs["t-gap/1"][:4]
	m.mu.Unlock()
	mc.ackLogs.Store(true)
	mc.ackLog("t-gap", 1, 4, true)
	fin := mc.finished(t, "t-gap", 10*time.Second)
	if got := m.log("t-gap", 1); got != "0123456789\n" || fin.GetLogBytes() != 11 {
		t.Fatalf("after gap: %q, %v", got, fin)
	}
}

// TestReconnect_StartedSentAgain: a run's TaskStarted goes again on every
// new session while the run runs, with its first start time: the one
// written into a connection that died may never have been read, and the
// master would keep the run DISPATCHED until its end.
func TestReconnect_StartedSentAgain(t *testing.T) {
	m := newFakeMaster(t, testToken)
	startWorker(t, m, nil)
	mc := m.next(t)
	mc.send(&pb.ExecuteTask{TaskId: "t-long", Attempt: 1, Fence: 1, Argv: []string{"sleep", "30"}})
	isStarted := func(m proto.Message) bool { s, ok := m.(*pb.TaskStarted); return ok && s.GetTaskId() == "t-long" }
	first := mc.expect(t, 10*time.Second, "TaskStarted", isStarted).(*pb.TaskStarted)
	mc.c.Close()

	mc2 := m.next(t)
	again := mc2.expect(t, 10*time.Second, "TaskStarted again", isStarted).(*pb.TaskStarted)
	if again.GetStartedUnixMs() != first.GetStartedUnixMs() || again.GetFence() != 1 || again.GetPid() != first.GetPid() {
		t.Fatalf("TaskStarted again: %v, first %v", again, first)
	}
	mc2.send(&pb.CancelTask{TaskId: "t-long", Attempt: 1, Fence: 1, GraceMs: 100})
	if fin := mc2.finished(t, "t-long", 10*time.Second); fin.GetOutcome() != pb.Outcome_OUTCOME_CANCELLED {
		t.Fatalf("TaskFinished: %v", fin)
	}
}
