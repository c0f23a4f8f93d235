package dispatch

import (
	"testing"

	"github.com/rlsched/rlsched/codec/pb"
)

// Heartbeats a worker sends faster than its shard handles them coalesce:
// some seqs get no ack of their own, but acks come in seq order and the
// newest is always acked (its ack covers the earlier ones on the worker).
func TestHeartbeatsCoalesceAndTheNewestIsAcked(t *testing.T) {
	h := newHarness(t, nil)
	p := dial(t, h.m.Addr())
	p.hello("w-hb", 1, 0)
	const n = 2000
	var burst []byte
	for seq := uint64(1); seq <= n; seq++ {
		burst = append(burst, p.frame(&pb.Heartbeat{Seq: seq})...)
	}
	if _, err := p.c.Write(burst); err != nil {
		t.Fatal(err)
	}
	var last uint64
	acks := 0
	for last < n {
		ack := p.expect(&pb.HeartbeatAck{}).(*pb.HeartbeatAck)
		if ack.Seq <= last {
			t.Fatalf("ack of seq %d after the ack of %d", ack.Seq, last)
		}
		last = ack.Seq
		acks++
	}
	t.Logf("%d heartbeats, %d acks", n, acks)
}

// A heartbeat the worker sent before it saw a run's TaskFinishedAck still
// lists the run: it must not come back as lost (the worker would drop the
// run's report), while a run the master never placed does.
func TestHeartbeatAfterFinishIsNotLost(t *testing.T) {
	h := newHarness(t, nil)
	p := dial(t, h.m.Addr())
	p.hello("w-end", 1, 0)
	run := h.submit(t, 0, "true")
	ex := p.expect(&pb.ExecuteTask{}).(*pb.ExecuteTask)
	p.send(&pb.TaskFinished{TaskId: run.ID, Attempt: 1, Fence: ex.Fence, Outcome: pb.Outcome_OUTCOME_EXITED})
	p.expect(&pb.TaskFinishedAck{})
	p.send(&pb.Heartbeat{Seq: 1, Runs: []*pb.RunRef{{TaskId: run.ID, Attempt: 1, Fence: ex.Fence}, {TaskId: "r-unknown", Attempt: 1, Fence: 99}}})
	ack := p.expect(&pb.HeartbeatAck{}).(*pb.HeartbeatAck)
	if len(ack.LostTaskIds) != 1 || ack.LostTaskIds[0] != "r-unknown" {
		t.Fatalf("lost %v, want only the unknown run", ack.LostTaskIds)
	}
}
