package worker

import (
	"context"
	"testing"
	"time"

	"github.com/rlsched/rlsched/codec/pb"
	"github.com/rlsched/rlsched/internal/testkit/testutil"
)

func TestCancel_TermKillsGroup(t *testing.T) {
	m := newFakeMaster(t, testToken)
	startWorker(t, m, nil)
	mc := m.next(t)
	mc.send(&pb.ExecuteTask{TaskId: "t-sleep", Attempt: 1, Fence: 2, Argv: []string{"sleep", "600"}})
	pgid := int(mc.started(t, "t-sleep").GetPid())
	if testutil.GroupGone(pgid) {
		t.Fatal("run's process group does not exist")
	}
	mc.send(&pb.CancelTask{TaskId: "t-sleep", Attempt: 1, Fence: 2, Reason: "test", GraceMs: 5000})
	testutil.WaitGroupGone(t, pgid, 4*time.Second) // sleep dies of SIGTERM, well within the grace
	fin := mc.finished(t, "t-sleep", 10*time.Second)
	if fin.GetOutcome() != pb.Outcome_OUTCOME_CANCELLED || fin.GetSignal() != "SIGTERM" || fin.GetExitCode() != -1 {
		t.Fatalf("TaskFinished: %v", fin)
	}
}

func TestCancel_KillAfterGrace(t *testing.T) {
	m := newFakeMaster(t, testToken)
	startWorker(t, m, nil)
	mc := m.next(t)
	mc.send(&pb.ExecuteTask{TaskId: "t-stubborn", Attempt: 1,
		Argv: []string{"sh", "-c", `trap "" TERM; echo ready; while :; do sleep 1; done`}})
	pgid := int(mc.started(t, "t-stubborn").GetPid())
	waitFor(t, 10*time.Second, "the trap to be set", func() bool { return m.log("t-stubborn", 1) == "ready\n" })

	const grace = 400 * time.Millisecond
	t0 := time.Now()
	mc.send(&pb.CancelTask{TaskId: "t-stubborn", Attempt: 1, GraceMs: grace.Milliseconds()})
	testutil.WaitGroupGone(t, pgid, grace+5*time.Second)
	if el := time.Since(t0); el < grace {
		t.Fatalf("group gone %s after the cancel, before the %s grace", el, grace)
	}
	fin := mc.finished(t, "t-stubborn", 10*time.Second)
	if fin.GetOutcome() != pb.Outcome_OUTCOME_CANCELLED || fin.GetSignal() != "SIGKILL" || fin.GetExitCode() != -1 {
		t.Fatalf("TaskFinished: %v", fin)
	}
}

func TestTimeout(t *testing.T) {
	m := newFakeMaster(t, testToken)
	startWorker(t, m, nil)
	mc := m.next(t)
	t0 := time.Now()
	mc.send(&pb.ExecuteTask{TaskId: "t-slow", Attempt: 1, TimeoutSeconds: 1, Argv: []string{"sleep", "600"}})
	pgid := int(mc.started(t, "t-slow").GetPid())
	fin := mc.finished(t, "t-slow", 10*time.Second)
	if fin.GetOutcome() != pb.Outcome_OUTCOME_TIMEOUT || fin.GetSignal() != "SIGTERM" {
		t.Fatalf("TaskFinished: %v", fin)
	}
	if el := time.Since(t0); el < time.Second {
		t.Fatalf("timed out after %s, before its 1s", el)
	}
	testutil.WaitGroupGone(t, pgid, 5*time.Second)
}

func TestRun_LeavesNoBackgroundChildren(t *testing.T) {
	m := newFakeMaster(t, testToken)
	startWorker(t, m, nil)
	mc := m.next(t)
	// The leader exits at once; its background child holds the output pipe.
	mc.send(&pb.ExecuteTask{TaskId: "t-bg", Attempt: 1, Argv: []string{"sh", "-c", "sleep 600 & echo started"}})
	pgid := int(mc.started(t, "t-bg").GetPid())
	fin := mc.finished(t, "t-bg", 10*time.Second)
	if fin.GetExitCode() != 0 || fin.GetOutcome() != pb.Outcome_OUTCOME_EXITED || m.log("t-bg", 1) != "started\n" {
		t.Fatalf("TaskFinished: %v, output %q", fin, m.log("t-bg", 1))
	}
	testutil.WaitGroupGone(t, pgid, 5*time.Second)
}

func TestShutdown_StopsRuns(t *testing.T) {
	m := newFakeMaster(t, testToken)
	lw := &testLog{t: t}
	defer lw.stop()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, Config{ID: "w-stop", Masters: []string{m.addr()}, JoinToken: testToken,
			DataDir: testutil.ReachableTempDir(t), Grace: 300 * time.Millisecond, Logger: newTestLogger(lw)})
	}()
	mc := m.next(t)
	mc.send(&pb.ExecuteTask{TaskId: "t-trap", Attempt: 1,
		Argv: []string{"sh", "-c", `trap "" TERM; echo ready; while :; do sleep 1; done`}})
	pgid := int(mc.started(t, "t-trap").GetPid())
	waitFor(t, 10*time.Second, "the trap to be set", func() bool { return m.log("t-trap", 1) == "ready\n" })
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after cancellation")
	}
	if !testutil.GroupGone(pgid) {
		t.Fatal("Run returned with its run's process group alive")
	}
}
