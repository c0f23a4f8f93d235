package dispatch

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rlsched/rlsched/internal/testkit/testutil"

	"github.com/rs/zerolog"
	"google.golang.org/protobuf/proto"

	"github.com/rlsched/rlsched/codec"
	"github.com/rlsched/rlsched/codec/pb"
	"github.com/rlsched/rlsched/core"
	"github.com/rlsched/rlsched/lease/leasetest"
	"github.com/rlsched/rlsched/lease/memory"
	"github.com/rlsched/rlsched/logpipe"
	"github.com/rlsched/rlsched/store"
	"github.com/rlsched/rlsched/store/sqlite"
)

var token = []byte("dispatch-test-join-token")

type harness struct {
	m     *Dispatcher
	st    store.Store
	dir   string
	logs  *syncWriter
	owner core.User
	clock *leasetest.Clock // nil: real time
}

func newHarness(t *testing.T, mut func(*Config)) *harness {
	t.Helper()
	return startHarness(t, nil, nil, mut)
}

// newClockedHarness is newHarness on a fake clock that the master and its
// memory leases share: nothing expires and no session goes silent until
// the test advances it (h.clock.Advance).
func newClockedHarness(t *testing.T, mut func(*Config)) *harness {
	t.Helper()
	c := leasetest.NewClock()
	c.Advance(time.Since(c.Now())) // from a fixed instant to about now
	return startHarness(t, c, nil, mut)
}

// startHarness starts a master on a fresh SQLite store (as wrap returns
// it, when set) and memory leases, on clock when it is not nil.
func startHarness(t *testing.T, clock *leasetest.Clock, wrap func(store.Store) store.Store, mut func(*Config)) *harness {
	t.Helper()
	dir := t.TempDir()
	var st store.Store
	st, err := sqlite.Open(filepath.Join(dir, "db.sqlite"))
	if err != nil {
		t.Fatal(err)
	}
	if wrap != nil {
		st = wrap(st)
	}
	logs := &syncWriter{b: &strings.Builder{}}
	cfg := Config{Addr: "127.0.0.1:0", MasterID: "m1", JoinToken: token, HeartbeatInterval: 200 * time.Millisecond,
		LeaseTTL: time.Second, Logger: zerolog.New(logs)}
	ls := memory.New()
	if clock != nil {
		cfg.Clock = clock.Now
		ls = memory.New(memory.WithClock(clock.Now))
	}
	if mut != nil {
		mut(&cfg)
	}
	ownLogs := cfg.Logs == nil
	if ownLogs {
		if cfg.Logs, err = logpipe.NewWriter(logpipe.WriterConfig{Dir: filepath.Join(dir, "logs"), Store: st, Logger: cfg.Logger}); err != nil {
			t.Fatal(err)
		}
	}
	m, err := New(cfg, store.MetricsFirst(st, cfg.Logs), ls)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = m.Stop(ctx)
		if t.Failed() {
			t.Logf("master log:\n%s", logs.String())
		}
		if ownLogs {
			cfg.Logs.Close()
		}
		st.Close()
	})
	u := core.User{Username: "owner", PasswordHash: "x"}
	if err := st.CreateUser(context.Background(), &u); err != nil {
		t.Fatal(err)
	}
	return &harness{m: m, st: st, dir: dir, logs: logs, owner: u, clock: clock}
}

func (h *harness) submit(t *testing.T, gpus int, argv ...string) core.Task {
	t.Helper()
	task := core.Task{ID: core.NewTaskID(), UserID: h.owner.ID, Command: argv, GPUs: gpus, Attempt: 1,
		MaxRetries: 1, TraceID: core.NewTraceID(), Status: core.StatusQueued}
	if err := h.st.CreateTask(context.Background(), &task); err != nil {
		t.Fatal(err)
	}
	h.m.Notify()
	return task
}

func (h *harness) task(t *testing.T, id string) core.Task {
	t.Helper()
	task, err := h.st.Task(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return task
}

// peer is a protocol-level fake worker on a real socket. Its Hello is
// sealed with key (nil: its id's key under token), and so is every frame it
// sends after that; every frame it reads after its Hello is checked.
type peer struct {
	t    *testing.T
	c    net.Conn
	r    *bufio.Reader
	ch   *pb.Challenge
	key  []byte
	keys codec.Session // set by the Hello
	buf  []byte
	// guess: the peer holds a worker's key but not the join token, so
	// the runs its Hello lists carry no run token; else it gives each the
	// token the master sent, as a worker does.
	guess bool
}

func dial(t *testing.T, addr string) *peer {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	p := &peer{t: t, c: c, r: bufio.NewReader(c)}
	p.ch = p.expect(&pb.Challenge{}).(*pb.Challenge)
	return p
}

// frame encodes m as the peer's next frame: a Hello sealed as the first of
// its session, anything after it sealed in that session, anything before
// it unsealed.
func (p *peer) frame(m proto.Message) []byte {
	p.t.Helper()
	var b []byte
	var err error
	switch h, hello := m.(*pb.Hello); {
	case hello:
		key := p.key
		if key == nil {
			key = codec.WorkerKey(token, h.WorkerId)
		}
		for _, r := range h.Runs {
			if r.RunToken == nil && !p.guess {
				r.RunToken = codec.RunToken(token, h.WorkerId, r.TaskId, r.Attempt, r.Fence)
			}
		}
		b, p.keys, err = codec.WorkerHello(nil, key, p.ch, h)
	case p.keys.Send != nil:
		b, err = p.keys.Send.AppendFrame(nil, m)
	default:
		b, err = codec.AppendFrame(nil, m)
	}
	if err != nil {
		p.t.Fatal(err)
	}
	return b
}

func (p *peer) send(m proto.Message) {
	p.t.Helper()
	if _, err := p.c.Write(p.frame(m)); err != nil {
		p.t.Fatal(err)
	}
}

func (p *peer) read() (proto.Message, error) {
	// Generous: a frame that comes does so in milliseconds, and under the
	// race detector beside make test's other packages a pass of the
	// scheduler once took longer than 5 s (TestGPUForeignProcesses).
	_ = p.c.SetReadDeadline(time.Now().Add(15 * time.Second))
	m, buf, err := codec.ReadFrame(p.r, codec.DefaultMaxBody, p.buf, p.keys.Recv)
	p.buf = buf
	return m, err
}

// expect reads frames until one of want's type arrives, skipping heartbeat acks.
func (p *peer) expect(want proto.Message) proto.Message {
	p.t.Helper()
	for {
		m, err := p.read()
		if err != nil {
			p.t.Fatalf("waiting for %T: %v", want, err)
		}
		if codec.TypeOf(m) == codec.TypeOf(want) {
			return m
		}
		if g, ok := m.(*pb.Goodbye); ok {
			p.t.Fatalf("waiting for %T: goodbye %q", want, g.Reason)
		}
	}
}

// expectEach reads until it has one message of each type of want, in any
// order, and returns them in want's order: a run's end frees its slot
// before the end's ack is sent, so the next run's ExecuteTask may come
// first.
func (p *peer) expectEach(want ...proto.Message) []proto.Message {
	p.t.Helper()
	got := make([]proto.Message, len(want))
	for n := 0; n < len(want); {
		m, err := p.read()
		if err != nil {
			p.t.Fatalf("waiting for %d of %d messages (%T...): %v", len(want)-n, len(want), want[0], err)
		}
		if g, ok := m.(*pb.Goodbye); ok {
			p.t.Fatalf("waiting for %T...: goodbye %q", want[0], g.Reason)
		}
		for i, w := range want {
			if got[i] == nil && codec.TypeOf(m) == codec.TypeOf(w) {
				got[i], n = m, n+1
				break
			}
		}
	}
	return got
}

func (p *peer) hello(id string, slots int32, gpus int, runs ...*pb.RunRef) *pb.HelloAck {
	p.t.Helper()
	h := &pb.Hello{WorkerId: id, Host: "test", Slots: slots, Runs: runs}
	for i := 0; i < gpus; i++ {
		h.Gpus = append(h.Gpus, &pb.GPU{Index: int32(i), Name: "gpu"})
	}
	p.send(h)
	return p.expect(&pb.HelloAck{}).(*pb.HelloAck)
}

func TestRunLifecycle(t *testing.T) {
	// The fake worker never heartbeats: on a clock that stands still, a
	// loaded machine's pauses between steps do not close its session.
	h := newClockedHarness(t, nil)
	p := dial(t, h.m.Addr())
	p.hello("w1", 1, 0)
	task := h.submit(t, 0, "echo", "hi")
	ex := p.expect(&pb.ExecuteTask{}).(*pb.ExecuteTask)
	if ex.TaskId != task.ID || ex.Fence == 0 || ex.Attempt != 1 || ex.TraceId != task.TraceID {
		t.Fatalf("ExecuteTask %v", ex)
	}
	if got := h.task(t, task.ID); got.Status != core.StatusDispatched || got.Worker != "w1" || got.Fence != ex.Fence {
		t.Fatalf("after dispatch: %+v", got)
	}
	p.send(&pb.TaskStarted{TaskId: task.ID, Attempt: 1, Fence: ex.Fence, Pid: 42})
	out := []byte("hi\nRLSCHED_METRIC {\"step\":1,\"episode_reward\":3}\nFINAL_REWARD:7.5\n")
	n := uint64(len(out))
	p.send(&pb.LogData{TaskId: task.ID, Attempt: 1, Fence: ex.Fence, Offset: 0, Data: out})
	ack := p.expect(&pb.LogAck{}).(*pb.LogAck)
	if ack.Error != "" || ack.Offset != n {
		t.Fatalf("LogAck %v", ack)
	}
	// A stale fence is refused and changes nothing.
	p.send(&pb.LogData{TaskId: task.ID, Attempt: 1, Fence: ex.Fence - 1, Offset: n, Data: []byte("evil")})
	if ack := p.expect(&pb.LogAck{}).(*pb.LogAck); ack.Error != "fenced" {
		t.Fatalf("stale LogData acked %v", ack)
	}
	if !strings.Contains(h.logs.String(), "refusing LogData with a stale fence") {
		t.Fatal("a stale LogData was not logged")
	}
	// An offset from the future is refused, never padded.
	p.send(&pb.LogData{TaskId: task.ID, Attempt: 1, Fence: ex.Fence, Offset: 100, Data: []byte("x")})
	if ack := p.expect(&pb.LogAck{}).(*pb.LogAck); ack.Error != "gap" || ack.Offset != n {
		t.Fatalf("gap acked %v", ack)
	}
	p.send(&pb.TaskFinished{TaskId: task.ID, Attempt: 1, Fence: ex.Fence + 1, Outcome: pb.Outcome_OUTCOME_EXITED, ExitCode: 1})
	p.expect(&pb.TaskFinishedAck{})
	if got := h.task(t, task.ID); got.Status != core.StatusRunning {
		t.Fatalf("a stale TaskFinished changed the run: %s", got.Status)
	}
	p.send(&pb.TaskFinished{TaskId: task.ID, Attempt: 1, Fence: ex.Fence, Outcome: pb.Outcome_OUTCOME_EXITED})
	p.expect(&pb.TaskFinishedAck{})
	got := h.task(t, task.ID)
	if got.Status != core.StatusSucceeded || got.ExitCode == nil || *got.ExitCode != 0 || got.FinalReward == nil || *got.FinalReward != 7.5 {
		t.Fatalf("finished: %+v", got)
	}
	series, _ := h.st.Metrics(context.Background(), task.ID, nil)
	if len(series["episode_reward"]) != 1 {
		t.Fatalf("metrics %v", series)
	}
	if ws := h.m.Workers(); len(ws) != 1 || ws[0].State != core.WorkerIdle {
		t.Fatalf("workers %+v\nmaster log:\n%s", ws, h.logs.String())
	}
}

func TestPlacementByGPUsAndPriority(t *testing.T) {
	h := newHarness(t, nil)
	big := h.submit(t, 4, "big")
	small := h.submit(t, 1, "small")
	p := dial(t, h.m.Addr())
	p.hello("w2", 0, 2) // 2 GPUs: the 4-GPU run does not fit, the 1-GPU run backfills
	ex := p.expect(&pb.ExecuteTask{}).(*pb.ExecuteTask)
	if ex.TaskId != small.ID || len(ex.GpuIndices) != 1 {
		t.Fatalf("placed %v", ex)
	}
	if got := h.task(t, big.ID); got.Status != core.StatusQueued {
		t.Fatalf("big run %s", got.Status)
	}
}

func TestBadFramesCloseTheConnection(t *testing.T) {
	h := newHarness(t, nil)
	hdr := func(magic uint16, ver, typ byte, n uint32) []byte {
		b := make([]byte, 8)
		binary.BigEndian.PutUint16(b, magic)
		b[2], b[3] = ver, typ
		binary.BigEndian.PutUint32(b[4:], n)
		return b
	}
	// sealed is a Hello sealed by a peer with key (nil: the right one).
	sealed := func(key []byte, hello *pb.Hello) func(*peer) []byte {
		return func(p *peer) []byte {
			p.key = key
			return p.frame(hello)
		}
	}
	raw := func(b []byte) func(*peer) []byte { return func(*peer) []byte { return b } }
	cases := map[string]func(*peer) []byte{
		"http":          raw([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n")),
		"version":       raw(hdr(codec.Magic, 9, byte(codec.TypeHello), 0)),
		"unknown type":  raw(hdr(codec.Magic, 1, 99, 0)),
		"huge length":   raw(hdr(codec.Magic, 1, byte(codec.TypeHello), 0xFFFFFFFF)),
		"bad body":      raw(append(hdr(codec.Magic, 1, byte(codec.TypeHello)|codec.FlagSealed, 3+codec.TagSize), make([]byte, 3+codec.TagSize)...)),
		"not hello":     func(p *peer) []byte { return p.frame(&pb.Heartbeat{Seq: 1}) },
		"unsealed":      raw(func() []byte { b, _ := codec.AppendFrame(nil, &pb.Hello{WorkerId: "w"}); return b }()),
		"wrong token":   sealed(codec.WorkerKey([]byte("not-the-join-token"), "w"), &pb.Hello{WorkerId: "w"}),
		"another's key": sealed(codec.WorkerKey(token, "w-other"), &pb.Hello{WorkerId: "w"}),
		"bad id":        sealed(codec.WorkerKey(token, "../etc"), &pb.Hello{WorkerId: "../etc"}),
	}
	for name, input := range cases {
		t.Run(name, func(t *testing.T) {
			p := dial(t, h.m.Addr())
			if _, err := p.c.Write(input(p)); err != nil {
				t.Fatal(err)
			}
			p.keys = codec.Session{} // the master's refusal is not sealed
			for {
				m, err := p.read()
				if err == io.EOF || (err != nil && strings.Contains(err.Error(), "reset")) {
					return // closed by the master
				}
				if err != nil {
					t.Fatalf("connection not closed: %v", err)
				}
				if _, ok := m.(*pb.Goodbye); !ok {
					t.Fatalf("unexpected %T", m)
				}
			}
		})
	}
	out := h.logs.String()
	for _, want := range []string{"bad magic", "over the size limit", "does not decode", "Heartbeat before Hello",
		"the Hello is not sealed", `the Hello of worker \"w\" is not sealed with that worker's key`, "invalid worker id"} {
		if !strings.Contains(out, want) {
			t.Errorf("master log lacks %q", want)
		}
	}
	// The master still serves good workers.
	p := dial(t, h.m.Addr())
	p.hello("good", 1, 0)
}

func TestLostRunIsRequeuedThenFailed(t *testing.T) {
	h := newClockedHarness(t, func(c *Config) { c.ReapInterval = 10 * time.Millisecond })
	task := h.submit(t, 0, "x")
	p := dial(t, h.m.Addr())
	p.hello("w3", 1, 0)
	ex := p.expect(&pb.ExecuteTask{}).(*pb.ExecuteTask)
	p.c.Close() // the worker dies without a word: its lease expires
	h.clock.Advance(h.m.leaseHold() + time.Millisecond)
	testutil.WaitFor(t, 10*time.Second, "requeue with attempt 2", func() bool {
		got := h.task(t, task.ID)
		return got.Status == core.StatusQueued && got.Attempt == 2 && got.Fence == ex.Fence
	})
	p2 := dial(t, h.m.Addr())
	p2.hello("w4", 1, 0)
	ex2 := p2.expect(&pb.ExecuteTask{}).(*pb.ExecuteTask)
	if ex2.Attempt != 2 || ex2.Fence <= ex.Fence {
		t.Fatalf("second attempt %v", ex2)
	}
	p2.c.Close()
	h.clock.Advance(h.m.leaseHold() + time.Millisecond)
	testutil.WaitFor(t, 10*time.Second, "FAILED after retries", func() bool { return h.task(t, task.ID).Status == core.StatusFailed })
}

func TestReconnectReadoptsAndUnknownRunsAreKilled(t *testing.T) {
	h := newHarness(t, nil)
	task := h.submit(t, 0, "x")
	p := dial(t, h.m.Addr())
	p.hello("w5", 1, 0)
	ex := p.expect(&pb.ExecuteTask{}).(*pb.ExecuteTask)
	p.send(&pb.TaskStarted{TaskId: task.ID, Attempt: 1, Fence: ex.Fence})
	// RUNNING before the connection drops: the two connections are read on
	// different event loops, and a TaskStarted read after the new session
	// joined is the old session's, ignored (the flake of this test under
	// load: the run then stayed DISPATCHED).
	testutil.WaitFor(t, 10*time.Second, "RUNNING", func() bool { return h.task(t, task.ID).Status == core.StatusRunning })
	p.c.Close()
	p2 := dial(t, h.m.Addr())
	ack := p2.hello("w5", 1, 0,
		&pb.RunRef{TaskId: task.ID, Attempt: 1, Fence: ex.Fence},
		&pb.RunRef{TaskId: "ghost", Attempt: 1, Fence: 999})
	if len(ack.KillTaskIds) != 1 || ack.KillTaskIds[0] != "ghost" {
		t.Fatalf("kill list %v", ack.KillTaskIds)
	}
	p2.send(&pb.Heartbeat{Seq: 1, Runs: []*pb.RunRef{{TaskId: task.ID, Attempt: 1, Fence: ex.Fence}}})
	if hb := p2.expect(&pb.HeartbeatAck{}).(*pb.HeartbeatAck); len(hb.LostTaskIds) != 0 {
		t.Fatalf("adopted run reported lost: %v", hb.LostTaskIds)
	}
	before := h.task(t, task.ID)
	if before.Status != core.StatusRunning || before.Attempt != 1 || before.StartedAt == nil {
		t.Fatalf("the adopted run: %s attempt %d, want RUNNING attempt 1", before.Status, before.Attempt)
	}
	// The worker sends its TaskStarted again on the new session (the first
	// may have died with the connection): the run keeps its start.
	p2.send(&pb.TaskStarted{TaskId: task.ID, Attempt: 1, Fence: ex.Fence})
	p2.send(&pb.Heartbeat{Seq: 2, Runs: []*pb.RunRef{{TaskId: task.ID, Attempt: 1, Fence: ex.Fence}}})
	p2.expect(&pb.HeartbeatAck{})
	if got := h.task(t, task.ID); got.Status != core.StatusRunning || !got.StartedAt.Equal(*before.StartedAt) || len(got.Warnings) != len(before.Warnings) {
		t.Fatalf("after a TaskStarted again: %s started %v (was %v), warnings %v", got.Status, got.StartedAt, before.StartedAt, got.Warnings)
	}
}

func TestCancel(t *testing.T) {
	h := newHarness(t, nil)
	queued := h.submit(t, 0, "x")
	if got, err := h.m.Cancel(context.Background(), queued.ID); err != nil || got.Status != core.StatusCancelled {
		t.Fatalf("cancel queued: %v %v", got.Status, err)
	}
	if _, err := h.m.Cancel(context.Background(), queued.ID); !errors.Is(err, core.ErrConflict) {
		t.Fatalf("cancel twice: %v", err)
	}
	running := h.submit(t, 0, "y")
	p := dial(t, h.m.Addr())
	p.hello("w6", 1, 0)
	ex := p.expect(&pb.ExecuteTask{}).(*pb.ExecuteTask)
	if _, err := h.m.Cancel(context.Background(), running.ID); err != nil {
		t.Fatal(err)
	}
	ct := p.expect(&pb.CancelTask{}).(*pb.CancelTask)
	if ct.TaskId != running.ID || ct.Fence != ex.Fence || ct.GraceMs <= 0 {
		t.Fatalf("CancelTask %v", ct)
	}
	p.send(&pb.TaskFinished{TaskId: running.ID, Attempt: 1, Fence: ex.Fence, Outcome: pb.Outcome_OUTCOME_CANCELLED, Signal: "SIGTERM", ExitCode: -1})
	p.expect(&pb.TaskFinishedAck{})
	if got := h.task(t, running.ID); got.Status != core.StatusCancelled {
		t.Fatalf("status %s", got.Status)
	}
}
