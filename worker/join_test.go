package worker

import (
	"testing"
	"time"

	"github.com/rlsched/rlsched/core"
)

func TestJoin_HelloAndHeartbeats(t *testing.T) {
	m := newFakeMaster(t, testToken)
	startWorker(t, m, nil)
	mc := m.next(t) // the fake master delivers only connections whose Hello seal checked out
	h := mc.hello
	if h.GetWorkerId() != "w1" || h.GetSlots() != 2 || len(h.GetGpus()) != 2 || h.GetVersion() != core.Version || len(h.GetRuns()) != 0 {
		t.Fatalf("unexpected Hello: %v", h)
	}
	if g := h.GetGpus()[1]; g.GetIndex() != 1 || g.GetName() != "gpu1" {
		t.Fatalf("unexpected GPU in Hello: %v", g)
	}
	waitFor(t, 5*time.Second, "3 heartbeats", func() bool {
		n, hb := mc.heartbeats()
		return n >= 3 && hb.GetSeq() >= 3 && hb.GetSentUnixMs() > 0
	})
}

func TestJoin_WrongTokenBacksOff(t *testing.T) {
	m := newFakeMaster(t, testToken)
	startWorker(t, m, func(c *Config) { c.JoinToken = "not-the-join-token" })
	waitFor(t, 15*time.Second, "5 refused attempts", func() bool { return len(m.refusalTimes()) >= 5 })
	at := m.refusalTimes()
	// Delays before attempts 2..5 are 100, 200, 400, 800 ms ±20%: no spinning.
	for i := 1; i < 5; i++ {
		gap := at[i].Sub(at[i-1])
		min := (100 * time.Millisecond << (i - 1)) * 3 / 4
		if gap < min {
			t.Fatalf("attempt %d came %s after the previous one, want >= %s", i+1, gap, min)
		}
	}
	select {
	case mc := <-m.conns:
		t.Fatalf("a worker with a wrong token joined: %v", mc.hello)
	default:
	}
}

func TestJoin_FailsOverToNextMaster(t *testing.T) {
	m := newFakeMaster(t, testToken)
	dead := newFakeMaster(t, testToken)
	deadAddr := dead.addr()
	dead.ln.Close() // nothing listens there now
	startWorker(t, m, func(c *Config) { c.Masters = []string{deadAddr, m.addr()} })
	m.next(t)
}
