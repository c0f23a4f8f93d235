package dispatch

import (
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/rlsched/rlsched/codec/pb"
	"github.com/rlsched/rlsched/core"
)

// The worker is told the lease TTL and stops its runs a TTL after it sent
// its last acknowledged renewal; the master holds the lease for the TTL
// plus a clock margin (10% + 1 s) before it requeues the run.
func TestLeaseHeldPastTheTTLTheWorkerIsTold(t *testing.T) {
	h := newClockedHarness(t, func(c *Config) { c.LeaseTTL = 10 * time.Second })
	run := h.submit(t, 0, "x")
	p := dial(t, h.m.Addr())
	if ack := p.hello("w-lease", 1, 0); ack.LeaseTtlMs != 10_000 {
		t.Fatalf("HelloAck lease_ttl_ms %d, want the configured 10000", ack.LeaseTtlMs)
	}
	p.expect(&pb.ExecuteTask{})
	p.c.Close()

	h.clock.Advance(10*time.Second + time.Second + 999*time.Millisecond) // TTL + 10% + 1 s, less 1 ms
	h.m.reapOnce(context.Background())
	if got := h.task(t, run.ID); got.Status != core.StatusDispatched {
		t.Fatalf("requeued within the clock margin: %s", got.Status)
	}
	h.clock.Advance(2 * time.Millisecond)
	h.m.reapOnce(context.Background())
	eventually(t, "requeue after TTL + margin", func() bool { return h.task(t, run.ID).Status == core.StatusQueued })
}

// A connection that sends no Hello is closed once helloTimeout passed.
func TestNoHelloIsClosedAtTheDeadline(t *testing.T) {
	h := newClockedHarness(t, func(c *Config) { c.ReapInterval = 10 * time.Millisecond })
	p := dial(t, h.m.Addr())
	h.clock.Advance(helloTimeout + time.Millisecond)
	if _, err := p.read(); err != io.EOF {
		t.Fatalf("read %v, want the master to close the connection", err)
	}
	if !strings.Contains(h.logs.String(), "no Hello within") {
		t.Fatalf("no logged reason:\n%s", h.logs.String())
	}
}

// A session silent for longer than the heartbeat TTL is closed; one that
// heartbeats stays.
func TestSilentSessionIsClosed(t *testing.T) {
	h := newClockedHarness(t, func(c *Config) { c.HeartbeatTTL = 30 * time.Second; c.ReapInterval = 10 * time.Millisecond })
	quiet, busy := dial(t, h.m.Addr()), dial(t, h.m.Addr())
	quiet.hello("w-quiet", 1, 0)
	busy.hello("w-busy", 1, 0)
	h.clock.Advance(20 * time.Second)
	busy.send(&pb.Heartbeat{Seq: 1})
	busy.expect(&pb.HeartbeatAck{})
	h.clock.Advance(15 * time.Second) // 35 s since the quiet one's Hello, 15 s since the heartbeat
	if _, err := quiet.read(); err != io.EOF {
		t.Fatalf("read %v, want the silent session closed", err)
	}
	busy.send(&pb.Heartbeat{Seq: 2})
	if ack := busy.expect(&pb.HeartbeatAck{}).(*pb.HeartbeatAck); ack.Seq != 2 {
		t.Fatalf("ack %v", ack)
	}
	if !strings.Contains(h.logs.String(), "silent for longer than the heartbeat TTL") {
		t.Fatalf("no logged reason:\n%s", h.logs.String())
	}
}
