package dispatch

import (
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/rlsched/rlsched/codec"
	"github.com/rlsched/rlsched/codec/pb"
	"github.com/rlsched/rlsched/core"
	"github.com/rlsched/rlsched/internal/testkit/testutil"
)

// join sends h and returns the master's answer: a HelloAck or a Goodbye.
func (p *peer) join(h *pb.Hello) proto.Message {
	p.t.Helper()
	p.send(h)
	for {
		m, err := p.read()
		if err != nil {
			p.t.Fatalf("waiting for the answer to Hello: %v", err)
		}
		switch m.(type) {
		case *pb.HelloAck, *pb.Goodbye:
			return m
		}
	}
}

// Two workers started under one id (another instance token): the second is
// refused while the first is connected, and the first goes on; the same
// instance reconnecting replaces its old session.
func TestSecondWorkerUnderOneIDIsRefused(t *testing.T) {
	h := newClockedHarness(t, nil)
	first := dial(t, h.m.Addr())
	if _, ok := first.join(&pb.Hello{WorkerId: "w1", Instance: "aaaa", Slots: 1}).(*pb.HelloAck); !ok {
		t.Fatal("the first worker was refused")
	}
	second := dial(t, h.m.Addr())
	bye, ok := second.join(&pb.Hello{WorkerId: "w1", Instance: "bbbb", Slots: 1}).(*pb.Goodbye)
	if !ok {
		t.Fatal("a second worker under w1 was accepted")
	}
	if want := "worker id w1 is already connected from 127.0.0.1:"; !strings.HasPrefix(bye.Reason, want) ||
		!strings.HasSuffix(bye.Reason, "; give each worker its own --id") {
		t.Fatalf("Goodbye %q, want %q…; give each worker its own --id", bye.Reason, want)
	}
	if !strings.Contains(h.logs.String(), "refusing worker: worker id w1 is already connected") {
		t.Fatalf("the refusal is not logged:\n%s", h.logs.String())
	}
	// The first one is still the worker: its heartbeats are answered and
	// a run goes to it.
	first.send(&pb.Heartbeat{Seq: 1})
	first.expect(&pb.HeartbeatAck{})
	run := h.submit(t, 0, "x")
	if ex := first.expect(&pb.ExecuteTask{}).(*pb.ExecuteTask); ex.TaskId != run.ID {
		t.Fatalf("ExecuteTask %v", ex)
	}

	// A reconnect of the same instance takes over, with the run.
	again := dial(t, h.m.Addr())
	ex := h.task(t, run.ID)
	if _, ok := again.join(&pb.Hello{WorkerId: "w1", Instance: "aaaa", Slots: 1,
		Runs: []*pb.RunRef{{TaskId: run.ID, Attempt: 1, Fence: ex.Fence}}}).(*pb.HelloAck); !ok {
		t.Fatal("a reconnect of the same instance was refused")
	}
	if _, err := first.read(); err == nil {
		t.Fatal("the replaced session stays open")
	}
	if got := h.task(t, run.ID); got.Status != core.StatusDispatched || got.Worker != "w1" {
		t.Fatalf("run after the reconnect: %s on %q", got.Status, got.Worker)
	}
}

// A Hello that lists one run twice adopts it once; one that lists a run
// placed on another worker gets it killed, never adopted, and that run
// goes on where it is.
func TestHelloListingARunTwiceOrAnotherWorkersRun(t *testing.T) {
	h := newClockedHarness(t, nil)
	a := dial(t, h.m.Addr())
	a.hello("wa", 1, 0)
	runA := h.submit(t, 0, "x")
	exA := a.expect(&pb.ExecuteTask{}).(*pb.ExecuteTask)
	b := dial(t, h.m.Addr())
	b.hello("wb", 1, 0)
	runB := h.submit(t, 0, "y")
	exB := b.expect(&pb.ExecuteTask{}).(*pb.ExecuteTask)
	if exB.TaskId != runB.ID {
		t.Fatalf("wb got %v", exB)
	}

	a.c.Close()
	a2 := dial(t, h.m.Addr())
	mine := &pb.RunRef{TaskId: runA.ID, Attempt: 1, Fence: exA.Fence}
	stale := &pb.RunRef{TaskId: runA.ID, Attempt: 1, Fence: exA.Fence + 100}
	theirs := &pb.RunRef{TaskId: runB.ID, Attempt: 1, Fence: exB.Fence}
	ack := a2.hello("wa", 1, 0, stale, mine, mine, theirs)
	if len(ack.KillTaskIds) != 1 || ack.KillTaskIds[0] != runB.ID {
		t.Fatalf("kill list %v, want only wb's run %s", ack.KillTaskIds, runB.ID)
	}
	a2.send(&pb.Heartbeat{Seq: 1, Runs: []*pb.RunRef{mine}})
	if hb := a2.expect(&pb.HeartbeatAck{}).(*pb.HeartbeatAck); len(hb.LostTaskIds) != 0 {
		t.Fatalf("the run listed twice is not adopted: lost %v", hb.LostTaskIds)
	}
	b.send(&pb.Heartbeat{Seq: 1, Runs: []*pb.RunRef{theirs}})
	if hb := b.expect(&pb.HeartbeatAck{}).(*pb.HeartbeatAck); len(hb.LostTaskIds) != 0 {
		t.Fatalf("wb lost its run to wa's Hello: %v", hb.LostTaskIds)
	}
	for _, r := range []struct{ id, worker string }{{runA.ID, "wa"}, {runB.ID, "wb"}} {
		if got := h.task(t, r.id); got.Status != core.StatusDispatched || got.Worker != r.worker {
			t.Fatalf("run %s: %s on %q, want DISPATCHED on %s", r.id, got.Status, got.Worker, r.worker)
		}
	}
	log := h.logs.String()
	for _, want := range []string{runA.ID + " is listed twice", runB.ID + " is placed on worker wb"} {
		if !strings.Contains(log, want) {
			t.Errorf("master log lacks %q", want)
		}
	}
}

// A worker whose clock is 10 minutes off is logged, and the start time it
// reports is not used.
func TestSkewedWorkerClock(t *testing.T) {
	h := newClockedHarness(t, nil)
	p := dial(t, h.m.Addr())
	off := h.clock.Now().Add(-10 * time.Minute)
	if _, ok := p.join(&pb.Hello{WorkerId: "w-skew", Slots: 1, SentUnixMs: off.UnixMilli(), Isolation: "uid"}).(*pb.HelloAck); !ok {
		t.Fatal("a worker with a skewed clock was refused")
	}
	if !strings.Contains(h.logs.String(), "the clock of worker w-skew is off by -10m0") {
		t.Fatalf("the skew is not logged:\n%s", h.logs.String())
	}
	run := h.submit(t, 0, "x")
	ex := p.expect(&pb.ExecuteTask{}).(*pb.ExecuteTask)
	if ex.User != h.owner.Username {
		t.Errorf("ExecuteTask.user %q, want the run's owner %q", ex.User, h.owner.Username)
	}
	if ws := h.m.Workers(); len(ws) != 1 || ws[0].Isolation != "uid" {
		t.Errorf("workers %+v, want w-skew with isolation uid", ws)
	}
	p.send(&pb.TaskStarted{TaskId: run.ID, Attempt: 1, Fence: ex.Fence, StartedUnixMs: off.UnixMilli()})
	testutil.WaitFor(t, 10*time.Second, "RUNNING", func() bool { return h.task(t, run.ID).Status == core.StatusRunning })
	if got := h.task(t, run.ID); !got.StartedAt.Equal(h.clock.Now()) {
		t.Fatalf("startedAt %v, want the master's time %v, not the skewed worker's %v", got.StartedAt, h.clock.Now(), off)
	}
}

// TestHelloWithoutRunTokenAdoptsNothing (issue 25): a second holder of a
// worker's key, who knows a run's attempt and fence (they are sequential)
// but not its run token, can take over the worker's session but not its
// run: the run is not adopted, and its reports on that session change
// nothing. The worker itself, with the token, adopts and finishes it.
func TestHelloWithoutRunTokenAdoptsNothing(t *testing.T) {
	h := newClockedHarness(t, nil)
	w := dial(t, h.m.Addr())
	w.hello("w1", 1, 0)
	run := h.submit(t, 0, "x")
	ex := w.expect(&pb.ExecuteTask{}).(*pb.ExecuteTask)
	if len(ex.RunToken) != codec.RunTokenSize {
		t.Fatalf("ExecuteTask without a run token: %v", ex)
	}
	w.send(&pb.TaskStarted{TaskId: run.ID, Attempt: 1, Fence: ex.Fence, Pid: 1})
	testutil.WaitFor(t, 10*time.Second, "the run RUNNING", func() bool { return h.task(t, run.ID).Status == core.StatusRunning })

	rogue := dial(t, h.m.Addr())
	rogue.guess = true
	ref := &pb.RunRef{TaskId: run.ID, Attempt: 1, Fence: ex.Fence}
	if ack := rogue.hello("w1", 1, 0, ref); !slices.Contains(ack.KillTaskIds, run.ID) {
		t.Fatalf("a Hello without the run token: kill list %v, want the run in it", ack.KillTaskIds)
	}
	rogue.send(&pb.LogData{TaskId: run.ID, Attempt: 1, Fence: ex.Fence, Data: []byte("forged\n")})
	if ack := rogue.expect(&pb.LogAck{}).(*pb.LogAck); ack.Error != "fenced" {
		t.Fatalf("the rogue session's LogData: %v", ack)
	}
	rogue.send(&pb.TaskFinished{TaskId: run.ID, Attempt: 1, Fence: ex.Fence, Outcome: pb.Outcome_OUTCOME_EXITED})
	rogue.expect(&pb.TaskFinishedAck{})
	if got := h.task(t, run.ID); got.Status != core.StatusRunning {
		t.Fatalf("the rogue session finished the run: %s", got.Status)
	}
	// A token for the right run but another fence is no better.
	rogue2 := dial(t, h.m.Addr())
	forged := &pb.RunRef{TaskId: run.ID, Attempt: 1, Fence: ex.Fence, RunToken: codec.RunToken(token, "w1", run.ID, 1, ex.Fence+1)}
	if ack := rogue2.hello("w1", 1, 0, forged); !slices.Contains(ack.KillTaskIds, run.ID) {
		t.Fatalf("a Hello with another fence's token: kill list %v", ack.KillTaskIds)
	}

	back := dial(t, h.m.Addr())
	if ack := back.hello("w1", 1, 0, &pb.RunRef{TaskId: run.ID, Attempt: 1, Fence: ex.Fence, RunToken: ex.RunToken}); len(ack.KillTaskIds) != 0 {
		t.Fatalf("the worker's own Hello: kill list %v", ack.KillTaskIds)
	}
	back.send(&pb.TaskFinished{TaskId: run.ID, Attempt: 1, Fence: ex.Fence, Outcome: pb.Outcome_OUTCOME_EXITED})
	back.expect(&pb.TaskFinishedAck{})
	if got := h.task(t, run.ID); got.Status != core.StatusSucceeded {
		t.Fatalf("after the worker's own TaskFinished: %s", got.Status)
	}
	if !strings.Contains(h.logs.String(), "Hello lists runs without their run token") {
		t.Fatal("the refused adoption is not logged")
	}
}
