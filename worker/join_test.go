package worker

import (
	"strings"
	"testing"
	"time"

	"github.com/rlsched/rlsched/codec"
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

// A worker given only its own key joins; with the key of another id it is
// refused; a key needs an explicit id, and secrets too short are refused
// at start.
func TestJoin_WithItsOwnKey(t *testing.T) {
	m := newFakeMaster(t, testToken)
	startWorker(t, m, func(c *Config) { c.JoinToken, c.Key = "", codec.WorkerKey([]byte(testToken), "w1") })
	if mc := m.next(t); mc.hello.GetWorkerId() != "w1" {
		t.Fatalf("joined as %q", mc.hello.GetWorkerId())
	}

	other := newFakeMaster(t, testToken)
	startWorker(t, other, func(c *Config) { c.JoinToken, c.Key = "", codec.WorkerKey([]byte(testToken), "w2") })
	waitFor(t, 15*time.Second, "a refusal", func() bool { return len(other.refusalTimes()) >= 1 })
	select {
	case mc := <-other.conns:
		t.Fatalf("w1 joined with w2's key: %v", mc.hello)
	default:
	}

	f := func(c Config, want string) {
		t.Helper()
		c.Masters, c.DataDir = []string{"127.0.0.1:1"}, t.TempDir()
		if _, err := c.withDefaults(); err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("config %+v: %v, want an error with %q", c, err, want)
		}
	}
	key := codec.WorkerKey([]byte(testToken), "w1")
	f(Config{Key: key}, "pass that id (--id)")
	f(Config{ID: "w1", Key: key[:16]}, "a worker key of 16 bytes")
	f(Config{ID: "w1", Key: key, JoinToken: testToken}, "give one")
	f(Config{ID: "w1", JoinToken: "s3cret"}, "shorter than 16")
	f(Config{ID: "w1"}, "no join token or worker key")
}
