package dispatch

import (
	"fmt"
	"testing"
	"time"

	"github.com/rlsched/rlsched/codec/pb"
)

// Recorded ends are forgotten once older than endedKeep, oldest first, and
// a steady stream of ends keeps the list at about one endedKeep of them.
func TestEndedRunsForgetTheOldest(t *testing.T) {
	e := endedRuns{at: map[string]time.Time{}}
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	e.add("a", t0)
	e.add("b", t0.Add(30*time.Second))
	e.add("a", t0.Add(45*time.Second)) // ended again (another attempt)
	e.add("c", t0.Add(61*time.Second)) // the first "a" is now too old
	if !e.has("a") || !e.has("b") || !e.has("c") {
		t.Fatalf("forgot a recent end: %v", e.at)
	}
	e.add("d", t0.Add(100*time.Second))
	if e.has("b") || !e.has("a") {
		t.Fatalf("after 100 s: %v, want b forgotten, a (re-added at 45 s) kept", e.at)
	}
	e.add("e", t0.Add(200*time.Second))
	if len(e.at) != 1 || !e.has("e") {
		t.Fatalf("after 200 s: %v, want only e", e.at)
	}
	// One end a second for an hour: about a minute of them is kept.
	for i := range 3600 {
		e.add(fmt.Sprint("r", i), t0.Add(time.Duration(300+i)*time.Second))
	}
	if n := len(e.at); n > 62 {
		t.Fatalf("%d ends remembered, want about 60", n)
	}
	if n := len(e.order) - e.head; n != len(e.at) || cap(e.order) > 512 {
		t.Fatalf("order holds %d live entries (cap %d) for %d ends", n, cap(e.order), len(e.at))
	}
}

// While the registry's mutex is held (the scheduler or a REST listing walks
// every worker under it), a worker's output and heartbeats are still
// checked and answered: the event loop and the heartbeat path read the
// session's own table of its runs.
func TestReportsDoNotWaitForTheRegistry(t *testing.T) {
	h := newClockedHarness(t, nil)
	p := dial(t, h.m.Addr())
	p.hello("w-busy", 1, 0)
	run := h.submit(t, 0, "x")
	ex := p.expect(&pb.ExecuteTask{}).(*pb.ExecuteTask)

	h.m.reg.mu.Lock()
	locked := true
	defer func() {
		if locked {
			h.m.reg.mu.Unlock()
		}
	}()
	p.send(&pb.LogData{TaskId: run.ID, Attempt: 1, Fence: ex.Fence, Data: []byte("hello\n")})
	if ack := p.expect(&pb.LogAck{}).(*pb.LogAck); ack.Error != "" || ack.Offset != 6 {
		t.Fatalf("LogAck %v", ack)
	}
	p.send(&pb.Heartbeat{Seq: 1, Runs: []*pb.RunRef{{TaskId: run.ID, Attempt: 1, Fence: ex.Fence}}})
	if ack := p.expect(&pb.HeartbeatAck{}).(*pb.HeartbeatAck); ack.Seq != 1 || len(ack.LostTaskIds) != 0 {
		t.Fatalf("HeartbeatAck %v", ack)
	}
	p.send(&pb.LogData{TaskId: run.ID, Attempt: 1, Fence: ex.Fence + 1, Offset: 6, Data: []byte("x")})
	if ack := p.expect(&pb.LogAck{}).(*pb.LogAck); ack.Error != "fenced" {
		t.Fatalf("a stale LogData got %v", ack)
	}
	h.m.reg.mu.Unlock()
	locked = false
}
