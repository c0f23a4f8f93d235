package worker

import (
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/rlsched/rlsched/codec/pb"
	"github.com/rlsched/rlsched/internal/testkit/testutil"
)

func TestKillTaskIDs_OnReconnect(t *testing.T) {
	m := newFakeMaster(t, testToken)
	startWorker(t, m, nil)
	mc := m.next(t)
	mc.send(&pb.ExecuteTask{TaskId: "t-kill", Attempt: 1, Argv: []string{"sleep", "600"}})
	pgid := int(mc.started(t, "t-kill").GetPid())
	m.setAck(func(h *pb.Hello) *pb.HelloAck {
		ack := &pb.HelloAck{Session: "s2", HeartbeatIntervalMs: 100, LeaseTtlMs: 30_000}
		for _, r := range h.GetRuns() {
			ack.KillTaskIds = append(ack.KillTaskIds, r.GetTaskId())
		}
		return ack
	})
	mc.c.Close()

	mc2 := m.next(t)
	if runs := mc2.hello.GetRuns(); len(runs) != 1 || runs[0].GetTaskId() != "t-kill" {
		t.Fatalf("Hello.runs = %v", runs)
	}
	testutil.WaitGroupGone(t, pgid, 5*time.Second)
	waitFor(t, 5*time.Second, "heartbeats without the run", func() bool {
		n, hb := mc2.heartbeats()
		return n >= 2 && len(hb.GetRuns()) == 0
	})
	mc2.expectNone(t, 300*time.Millisecond, "report of a killed run", func(m proto.Message) bool {
		f, ok := m.(*pb.TaskFinished)
		return ok && f.GetTaskId() == "t-kill"
	})
}

func TestLostTaskIDs_FromHeartbeatAck(t *testing.T) {
	m := newFakeMaster(t, testToken)
	startWorker(t, m, nil)
	mc := m.next(t)
	mc.send(&pb.ExecuteTask{TaskId: "t-lost", Attempt: 1, Argv: []string{"sleep", "600"}})
	pgid := int(mc.started(t, "t-lost").GetPid())
	mc.setLost("t-lost")
	testutil.WaitGroupGone(t, pgid, 5*time.Second)
	waitFor(t, 5*time.Second, "heartbeats without the run", func() bool {
		_, hb := mc.heartbeats()
		return len(hb.GetRuns()) == 0
	})
	mc.expectNone(t, 300*time.Millisecond, "report of a lost run", isFinished("t-lost"))
}

func TestSelfFence_KillsRunsWhenAcksStop(t *testing.T) {
	m := newFakeMaster(t, testToken)
	const ttl = time.Second // acks may stall for a good part of it on a loaded machine
	m.setAck(func(*pb.Hello) *pb.HelloAck {
		return &pb.HelloAck{Session: "s1", HeartbeatIntervalMs: 50, LeaseTtlMs: ttl.Milliseconds()}
	})
	startWorker(t, m, nil)
	mc := m.next(t)
	mc.send(&pb.ExecuteTask{TaskId: "t-fence", Attempt: 1, Argv: []string{"sleep", "600"}})
	pgid := int(mc.started(t, "t-fence").GetPid())

	// While renewals are acked the run outlives several TTLs.
	n0, _ := mc.heartbeats()
	waitFor(t, 20*time.Second, "60 acked heartbeats (3s, 3 TTLs)", func() bool { n, _ := mc.heartbeats(); return n >= n0+60 })
	if testutil.GroupGone(pgid) {
		t.Fatal("run killed although its renewals were acked")
	}

	mc.ackHB.Store(false)
	t0 := time.Now()
	testutil.WaitGroupGone(t, pgid, 5*time.Second)
	if el := time.Since(t0); el > ttl+2*time.Second {
		t.Fatalf("self-fencing took %s with a TTL of %s", el, ttl)
	}
	waitFor(t, 5*time.Second, "heartbeats without the run", func() bool {
		_, hb := mc.heartbeats()
		return len(hb.GetRuns()) == 0
	})
	mc.expectNone(t, 200*time.Millisecond, "report of a fenced run", isFinished("t-fence"))
}

// TestExecute_RefusedPastItsLeaseDeadline: an ExecuteTask that reaches the
// worker after no renewal was acked on its connection for a whole lease TTL
// (it waited in a partition while the master reaped the lease and gave the
// run to another worker) is not started; the next one, after renewals are
// acked again, is. Issue 11, TestChaosStaleExecute.
func TestExecute_RefusedPastItsLeaseDeadline(t *testing.T) {
	m := newFakeMaster(t, testToken)
	const ttl = time.Second
	m.setAck(func(*pb.Hello) *pb.HelloAck {
		return &pb.HelloAck{Session: "s1", HeartbeatIntervalMs: 50, LeaseTtlMs: ttl.Milliseconds()}
	})
	startWorker(t, m, nil)
	mc := m.next(t)
	waitFor(t, 10*time.Second, "an acked heartbeat", func() bool { return mc.hbAckAt.Load() != 0 })

	mc.ackHB.Store(false)
	// The worker's read deadline (3 intervals + 5 s) keeps the connection
	// open well past the TTL without a frame from the master.
	waitFor(t, 5*time.Second, "a lease TTL since the last HeartbeatAck", func() bool {
		return time.Since(time.Unix(0, mc.hbAckAt.Load())) > ttl+200*time.Millisecond
	})
	mc.send(&pb.ExecuteTask{TaskId: "t-stale", Attempt: 1, Fence: 7, Argv: []string{"sleep", "600"}})
	mc.expectNone(t, time.Second, "TaskStarted of an ExecuteTask past its lease", func(m proto.Message) bool {
		s, ok := m.(*pb.TaskStarted)
		return ok && s.GetTaskId() == "t-stale"
	})

	mc.ackHB.Store(true)
	acked := mc.hbAckAt.Load()
	waitFor(t, 5*time.Second, "a HeartbeatAck again", func() bool { return mc.hbAckAt.Load() != acked })
	mc.send(&pb.ExecuteTask{TaskId: "t-fresh", Attempt: 1, Fence: 8, Argv: []string{"sleep", "600"}})
	mc.started(t, "t-fresh")
	_, hb := mc.heartbeats()
	for _, r := range hb.GetRuns() {
		if r.GetTaskId() == "t-stale" {
			t.Fatalf("the worker holds the refused run: %v", hb.GetRuns())
		}
	}
}
