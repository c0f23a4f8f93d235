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

	"github.com/rlsched/rlsched/internal/testutil"

	"github.com/rs/zerolog"
	"google.golang.org/protobuf/proto"

	"github.com/rlsched/rlsched/codec"
	"github.com/rlsched/rlsched/codec/pb"
	"github.com/rlsched/rlsched/core"
	"github.com/rlsched/rlsched/core/lease/leasetest"
	"github.com/rlsched/rlsched/core/lease/memory"
	"github.com/rlsched/rlsched/core/store"
	"github.com/rlsched/rlsched/core/store/sqlite"
	"github.com/rlsched/rlsched/logpipe"
)

var token = []byte("test-join-token")

type harness struct {
	m     *Master
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
	m, err := New(cfg, logpipe.MetricsFirst(st, cfg.Logs), ls)
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

// peer is a protocol-level fake worker on a real socket.
type peer struct {
	t     *testing.T
	c     net.Conn
	r     *bufio.Reader
	nonce []byte
	buf   []byte
}

func dial(t *testing.T, addr string) *peer {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	p := &peer{t: t, c: c, r: bufio.NewReader(c)}
	ch := p.expect(&pb.Challenge{}).(*pb.Challenge)
	p.nonce = ch.Nonce
	return p
}

func (p *peer) send(m proto.Message) {
	p.t.Helper()
	b, err := codec.AppendFrame(nil, m)
	if err != nil {
		p.t.Fatal(err)
	}
	if _, err := p.c.Write(b); err != nil {
		p.t.Fatal(err)
	}
}

func (p *peer) read() (proto.Message, error) {
	_ = p.c.SetReadDeadline(time.Now().Add(5 * time.Second))
	m, buf, err := codec.ReadFrame(p.r, codec.DefaultMaxBody, p.buf)
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

func (p *peer) hello(id string, slots int32, gpus int, runs ...*pb.RunRef) *pb.HelloAck {
	p.t.Helper()
	h := &pb.Hello{WorkerId: id, Proof: codec.JoinProof(token, p.nonce, id), Host: "test", Slots: slots, Runs: runs}
	for i := 0; i < gpus; i++ {
		h.Gpus = append(h.Gpus, &pb.GPU{Index: int32(i), Name: "gpu"})
	}
	p.send(h)
	return p.expect(&pb.HelloAck{}).(*pb.HelloAck)
}

// eventually waits up to 10 s for f (testutil.WaitFor).
func eventually(t *testing.T, what string, f func() bool) {
	t.Helper()
	testutil.WaitFor(t, 10*time.Second, what, f)
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
	cases := map[string][]byte{
		"http":         []byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"),
		"version":      hdr(codec.Magic, 9, byte(codec.TypeHello), 0),
		"unknown type": hdr(codec.Magic, 1, 99, 0),
		"huge length":  hdr(codec.Magic, 1, byte(codec.TypeHello), 0xFFFFFFFF),
		"bad body":     append(hdr(codec.Magic, 1, byte(codec.TypeHello), 3), 0xFF, 0xFF, 0xFF),
		"not hello":    mustFrame(t, &pb.Heartbeat{Seq: 1}),
		"wrong token":  mustFrame(t, &pb.Hello{WorkerId: "w", Proof: []byte("nope")}),
		"bad id":       mustFrame(t, &pb.Hello{WorkerId: "../etc", Proof: []byte("nope")}),
	}
	for name, input := range cases {
		t.Run(name, func(t *testing.T) {
			p := dial(t, h.m.Addr())
			if _, err := p.c.Write(input); err != nil {
				t.Fatal(err)
			}
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
	for _, want := range []string{"bad magic", "over the size limit", "does not decode", "before Hello", "join token proof", "invalid worker id"} {
		if !strings.Contains(out, want) {
			t.Errorf("master log lacks %q", want)
		}
	}
	// The master still serves good workers.
	p := dial(t, h.m.Addr())
	p.hello("good", 1, 0)
}

func mustFrame(t *testing.T, m proto.Message) []byte {
	b, err := codec.AppendFrame(nil, m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestLostRunIsRequeuedThenFailed(t *testing.T) {
	h := newClockedHarness(t, func(c *Config) { c.ReapInterval = 10 * time.Millisecond })
	task := h.submit(t, 0, "x")
	p := dial(t, h.m.Addr())
	p.hello("w3", 1, 0)
	ex := p.expect(&pb.ExecuteTask{}).(*pb.ExecuteTask)
	p.c.Close() // the worker dies without a word: its lease expires
	h.clock.Advance(h.m.leaseHold() + time.Millisecond)
	eventually(t, "requeue with attempt 2", func() bool {
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
	eventually(t, "FAILED after retries", func() bool { return h.task(t, task.ID).Status == core.StatusFailed })
}

func TestReconnectReadoptsAndUnknownRunsAreKilled(t *testing.T) {
	h := newHarness(t, nil)
	task := h.submit(t, 0, "x")
	p := dial(t, h.m.Addr())
	p.hello("w5", 1, 0)
	ex := p.expect(&pb.ExecuteTask{}).(*pb.ExecuteTask)
	p.send(&pb.TaskStarted{TaskId: task.ID, Attempt: 1, Fence: ex.Fence})
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
	eventually(t, "RUNNING", func() bool { return h.task(t, task.ID).Status == core.StatusRunning })
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
