package dispatch

import (
	"bufio"
	"bytes"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rlsched/rlsched/codec"
	"github.com/rlsched/rlsched/codec/pb"
	"github.com/rlsched/rlsched/core"
	"github.com/rlsched/rlsched/internal/testkit/testutil"
)

// With WORKER_IDS set, a Hello under another id is refused (and logged)
// although it is sealed with that id's key; a listed id joins.
func TestWorkerIDsAllowList(t *testing.T) {
	h := newClockedHarness(t, func(c *Config) { c.WorkerIDs = []string{"w-listed"} })
	p := dial(t, h.m.Addr())
	bye, ok := p.join(&pb.Hello{WorkerId: "w-other", Slots: 1}).(*pb.Goodbye)
	if !ok || !strings.Contains(bye.Reason, `worker id "w-other" is not in this master's WORKER_IDS`) {
		t.Fatalf("w-other answered %v, want a Goodbye naming WORKER_IDS", bye)
	}
	if log := h.logs.String(); !strings.Contains(log, "closing connection: worker refused") || !strings.Contains(log, "WORKER_IDS") {
		t.Fatalf("the refusal is not logged:\n%s", log)
	}
	if _, ok := dial(t, h.m.Addr()).join(&pb.Hello{WorkerId: "w-listed", Slots: 1}).(*pb.HelloAck); !ok {
		t.Fatal("the listed worker was refused")
	}
	if _, err := New(Config{Addr: "127.0.0.1:0", MasterID: "m", JoinToken: token, WorkerIDs: []string{"ok", "not/ok"}, Logs: nil}, h.st, nil); err == nil ||
		!strings.Contains(err.Error(), `WORKER_IDS: "not/ok" is not a worker id`) {
		t.Fatalf("New with a bad WORKER_IDS: %v", err)
	}
	if _, err := New(Config{Addr: "127.0.0.1:0", MasterID: "m", JoinToken: []byte("short")}, h.st, nil); err == nil ||
		!strings.Contains(err.Error(), "shorter than 16") {
		t.Fatalf("New with a short join token: %v", err)
	}
}

// A worker holding its own key (w1's) can report only the runs placed on
// it: reports about w2's run, with that run's attempt and fence, from w1's
// session change nothing.
func TestForgedReportFromAnotherWorkersSession(t *testing.T) {
	h := newClockedHarness(t, nil)
	w2 := dial(t, h.m.Addr())
	w2.hello("w2", 1, 0)
	run := h.submit(t, 0, "x")
	ex := w2.expect(&pb.ExecuteTask{}).(*pb.ExecuteTask)
	w1 := dial(t, h.m.Addr())
	w1.key = codec.WorkerKey(token, "w1") // all it holds
	w1.hello("w1", 1, 0)

	w1.send(&pb.TaskStarted{TaskId: run.ID, Attempt: ex.Attempt, Fence: ex.Fence, Pid: 1})
	w1.send(&pb.LogData{TaskId: run.ID, Attempt: ex.Attempt, Fence: ex.Fence, Data: []byte("FINAL_REWARD:99\n")})
	if ack := w1.expect(&pb.LogAck{}).(*pb.LogAck); ack.Error != "fenced" {
		t.Fatalf("w1's LogData for w2's run acked %v, want fenced", ack)
	}
	w1.send(&pb.TaskFinished{TaskId: run.ID, Attempt: ex.Attempt, Fence: ex.Fence, Outcome: pb.Outcome_OUTCOME_EXITED})
	w1.expect(&pb.TaskFinishedAck{}) // acked so that it forgets it, and nothing else
	w1.send(&pb.Heartbeat{Seq: 1, Runs: []*pb.RunRef{{TaskId: run.ID, Attempt: ex.Attempt, Fence: ex.Fence}}})
	if hb := w1.expect(&pb.HeartbeatAck{}).(*pb.HeartbeatAck); len(hb.LostTaskIds) != 1 || hb.LostTaskIds[0] != run.ID {
		t.Fatalf("w1's heartbeat listing w2's run: lost %v, want it", hb.LostTaskIds)
	}
	got := h.task(t, run.ID)
	if got.Status != core.StatusDispatched || got.Worker != "w2" || got.FinalReward != nil {
		t.Fatalf("after w1's forged reports the run is %s on %q (reward %v), want DISPATCHED on w2", got.Status, got.Worker, got.FinalReward)
	}
	// w2 still owns it.
	w2.send(&pb.TaskFinished{TaskId: run.ID, Attempt: ex.Attempt, Fence: ex.Fence, Outcome: pb.Outcome_OUTCOME_EXITED})
	w2.expect(&pb.TaskFinishedAck{})
	testutil.WaitFor(t, 10*time.Second, "w2's report recorded", func() bool { return h.task(t, run.ID).Status == core.StatusSucceeded })
}

// proxy forwards TCP connections to a master frame by frame, and lets a
// test change a frame on the way. Directions: "wm" (worker to master) and
// "mw"; n counts the frames of one direction of one connection from 0.
type proxy struct {
	t      *testing.T
	ln     net.Listener
	target string

	mu     sync.Mutex
	conns  int
	frames map[string]int // direction → frames forwarded on the newest connection
	// tamper, when set, is given the next frame of dir numbered at least
	// from, once, and returns what to forward instead.
	tamper *tamper
}

type tamper struct {
	dir  string
	from int
	f    func(frame []byte) []byte
}

func newProxy(t *testing.T, target string) *proxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{t: t, ln: ln, target: target, frames: map[string]int{}}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go p.serve(c)
		}
	}()
	return p
}

func (p *proxy) serve(w net.Conn) {
	m, err := net.Dial("tcp", p.target)
	if err != nil {
		w.Close()
		return
	}
	p.mu.Lock()
	p.conns++
	conn := p.conns
	p.frames = map[string]int{}
	p.mu.Unlock()
	go p.pipe(conn, "mw", m, w)
	p.pipe(conn, "wm", w, m)
}

// pipe copies frames from src to dst until either fails, then closes both.
func (p *proxy) pipe(conn int, dir string, src, dst net.Conn) {
	defer src.Close()
	defer dst.Close()
	r := bufio.NewReader(src)
	for n := 0; ; n++ {
		frame, _, err := codec.ReadRaw(r, codec.DefaultMaxBody, nil)
		if err != nil {
			return
		}
		p.mu.Lock()
		if tm := p.tamper; tm != nil && tm.dir == dir && n >= tm.from {
			frame = tm.f(bytes.Clone(frame))
			p.tamper = nil
		}
		if conn == p.conns {
			p.frames[dir]++
		}
		p.mu.Unlock()
		if _, err := dst.Write(frame); err != nil {
			return
		}
	}
}

func (p *proxy) setTamper(dir string, from int, f func([]byte) []byte) {
	p.mu.Lock()
	p.tamper = &tamper{dir: dir, from: from, f: f}
	p.mu.Unlock()
}

// joined waits for connection conn (counted from 1) to be past its
// handshake, with heartbeats answered.
func (p *proxy) joined(t *testing.T, conn int) {
	t.Helper()
	testutil.WaitFor(t, 10*time.Second, "connection "+strconv.Itoa(conn)+" joined", func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		return p.conns == conn && p.frames["mw"] >= 3 && p.frames["wm"] >= 2
	})
}

// A real worker behind a proxy that changes one byte of one sealed frame,
// repeats one, or whose Hello is replayed on another connection: each time
// the side that receives it closes the connection with a logged reason, and
// the worker joins again.
func TestTamperedAndReplayedFramesCloseTheConnection(t *testing.T) {
	h := newHarness(t, nil)
	px := newProxy(t, h.m.Addr())
	var hello []byte
	px.setTamper("wm", 0, func(f []byte) []byte { hello = bytes.Clone(f); return f })
	wlog := startRealWorker(t, "w-proxied", px.ln.Addr().String())
	px.joined(t, 1)

	// A byte of a HeartbeatAck's body changed on its way to the worker.
	px.setTamper("mw", 2, func(f []byte) []byte { f[codec.HeaderSize] ^= 0x01; return f })
	testutil.WaitFor(t, 10*time.Second, "the worker's reason", func() bool {
		return strings.Contains(wlog.String(), "is not authenticated, so it is not obeyed")
	})
	px.joined(t, 2)

	// A byte of a Heartbeat's tag changed on its way to the master.
	px.setTamper("wm", 1, func(f []byte) []byte { f[len(f)-1] ^= 0x80; return f })
	testutil.WaitFor(t, 10*time.Second, "the master's reason", func() bool {
		return strings.Contains(h.logs.String(), "closing connection: frame not authenticated")
	})
	px.joined(t, 3)

	// A Heartbeat sent twice: the copy's sequence number is not the next one.
	before := strings.Count(h.logs.String(), "closing connection: frame not authenticated")
	px.setTamper("wm", 1, func(f []byte) []byte { return append(f, f...) })
	testutil.WaitFor(t, 10*time.Second, "the master's reason for the replay", func() bool {
		return strings.Count(h.logs.String(), "closing connection: frame not authenticated") > before
	})
	px.joined(t, 4)

	// The first connection's Hello, replayed on a connection of its own:
	// another Challenge nonce, another session key.
	p := dial(t, h.m.Addr())
	if _, err := p.c.Write(hello); err != nil {
		t.Fatal(err)
	}
	if bye, ok := p.expect(&pb.Goodbye{}).(*pb.Goodbye); !ok || !strings.Contains(bye.Reason, `the Hello of worker "w-proxied" is not sealed with that worker's key`) {
		t.Fatalf("a replayed Hello answered %v", bye)
	}
	closedByMaster(t, p)
	if ws := h.m.Workers(); len(ws) != 1 || ws[0].State == core.WorkerDown {
		t.Fatalf("workers %+v: the replayed Hello disturbed the worker's session", ws)
	}
	t.Logf("master log:\n%s", h.logs.String())
}
