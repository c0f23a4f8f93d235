package dispatch

import (
	"errors"
	"io"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rlsched/rlsched/codec"
	"github.com/rlsched/rlsched/codec/pb"
	"github.com/rlsched/rlsched/internal/testkit/testutil"
)

// closedByMaster reads until the master closes the connection.
func closedByMaster(t *testing.T, p *peer) {
	t.Helper()
	for {
		_, err := p.read()
		if err == io.EOF || errors.Is(err, syscall.ECONNRESET) {
			return
		}
		if err != nil {
			t.Fatalf("connection not closed: %v", err)
		}
	}
}

// Before its Hello a connection may send only short frames: a Hello (or
// anything) longer than MaxHelloFrame is refused before its body arrives.
func TestShortFramesBeforeHello(t *testing.T) {
	h := newClockedHarness(t, func(c *Config) { c.MaxHelloFrame = 1024 })
	p := dial(t, h.m.Addr())
	big := &pb.Hello{WorkerId: "w-big", Host: strings.Repeat("h", 2000)}
	frame := p.frame(big)
	if _, err := p.c.Write(frame[:codec.HeaderSize]); err != nil { // the header alone
		t.Fatal(err)
	}
	closedByMaster(t, p)
	if log := h.logs.String(); !strings.Contains(log, "bad frame header") || !strings.Contains(log, "limit 1024, the limit before a Hello") {
		t.Fatalf("no logged reason:\n%s", log)
	}
	// After the Hello the full limit applies.
	p2 := dial(t, h.m.Addr())
	p2.hello("w-ok", 1, 0)
	p2.send(&pb.Heartbeat{Seq: 1, Runs: []*pb.RunRef{{TaskId: strings.Repeat("r", 3000), Attempt: 1, Fence: 1}}})
	p2.expect(&pb.HeartbeatAck{})
}

// A worker whose reports find its shard full is disconnected with a logged
// reason; the shard's queue does not grow.
func TestFullShardClosesTheWorker(t *testing.T) {
	h := newClockedHarness(t, func(c *Config) { c.ShardBacklog = 3 })
	p := dial(t, h.m.Addr())
	p.hello("w-flood", 1, 0)
	block := make(chan struct{})
	defer close(block)
	sh := h.m.shardFor("w-flood")
	sh.push(func() { <-block }) // the shard is busy: nothing drains
	// The HelloAck is sent before the Hello's handling returns: until it
	// has, it counts against the limit too.
	testutil.WaitFor(t, 10*time.Second, "the Hello handled", func() bool { return sh.pending.Load() == 1 })
	var burst []byte
	for i := range 10 {
		burst = append(burst, p.frame(&pb.TaskFinished{TaskId: "r-unknown", Attempt: 1, Fence: uint64(i + 1)})...)
	}
	if _, err := p.c.Write(burst); err != nil {
		t.Fatal(err)
	}
	closedByMaster(t, p)
	// The limit, and the session's close (which is always queued).
	testutil.WaitFor(t, 10*time.Second, "the close queued", func() bool { return sh.pending.Load() == 4 })
	if !strings.Contains(h.logs.String(), "work queue for this worker is full") {
		t.Fatalf("no logged reason:\n%s", h.logs.String())
	}
}

// A worker that does not read what the master sends is closed as a slow
// consumer once more than MaxOutbound bytes wait for its socket.
func TestSlowConsumerIsClosed(t *testing.T) {
	h := newClockedHarness(t, func(c *Config) { c.MaxOutbound = 64 << 10 })
	p := dial(t, h.m.Addr())
	if err := p.c.(*net.TCPConn).SetReadBuffer(4 << 10); err != nil {
		t.Fatal(err)
	}
	p.hello("w-slow", 1, 0)
	// Every stale LogData is answered with a LogAck "fenced": the worker
	// sends them and never reads.
	// Each frame is sealed anew (a frame sent twice would be a replay),
	// and a chunk cut short by the write deadline is resent from where
	// the socket stopped taking it.
	id := strings.Repeat("r", 64)
	var chunk []byte
	testutil.Eventually(t, 60*time.Second, func() (bool, string) {
		if strings.Contains(h.logs.String(), "slow consumer") {
			return true, ""
		}
		for len(chunk) < 256<<10 {
			chunk = append(chunk, p.frame(&pb.LogData{TaskId: id, Attempt: 1, Fence: 7})...)
		}
		_ = p.c.SetWriteDeadline(time.Now().Add(time.Second))
		n, err := p.c.Write(chunk)
		chunk = chunk[n:]
		var ne net.Error
		if err != nil && !(errors.As(err, &ne) && ne.Timeout()) {
			return true, "" // closed by the master
		}
		return false, "not closed as a slow consumer:\n" + h.logs.String()
	})
	testutil.WaitFor(t, 10*time.Second, "the logged slow-consumer close", func() bool {
		return strings.Contains(h.logs.String(), "closing connection: slow consumer")
	})
	testutil.WaitFor(t, 10*time.Second, "the worker gone", func() bool {
		ws := h.m.Workers()
		return len(ws) == 1 && ws[0].State == "DOWN"
	})
}
