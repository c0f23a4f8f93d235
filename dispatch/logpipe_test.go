package dispatch

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/rlsched/rlsched/codec/pb"
	"github.com/rlsched/rlsched/core"
	"github.com/rlsched/rlsched/internal/testkit/testutil"
	"github.com/rlsched/rlsched/lease/memory"
	"github.com/rlsched/rlsched/logpipe"
	"github.com/rlsched/rlsched/store"
	"github.com/rlsched/rlsched/store/sqlite"
	"github.com/rlsched/rlsched/worker"
)

// seqOutput is what `seq from to` prints.
func seqOutput(from, to int) []byte {
	var b []byte
	for i := from; i <= to; i++ {
		b = strconv.AppendInt(b, int64(i), 10)
		b = append(b, '\n')
	}
	return b
}

// startRealWorker runs the worker package against addr until the test ends;
// its log goes to the returned writer.
func startRealWorker(t *testing.T, id, addr string) *syncWriter {
	t.Helper()
	logs := &syncWriter{b: &strings.Builder{}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- worker.Run(ctx, worker.Config{ID: id, Masters: []string{addr}, JoinToken: string(token),
			DataDir: t.TempDir(), Slots: 1, Grace: time.Second, Logger: zerolog.New(logs).With().Timestamp().Logger(),
			RunAs: worker.RunAsNone}) // the log pipe under test does not care whose uid runs have
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("worker: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Error("worker did not stop within 30 s")
		}
	})
	return logs
}

// waitStatus polls the store until the run reaches status, failing after d.
func waitStatus(t *testing.T, h *harness, id string, status core.Status, d time.Duration) {
	t.Helper()
	testutil.Eventually(t, d, func() (bool, string) {
		task := h.task(t, id)
		if task.Status != status && task.Status.Terminal() {
			t.Fatalf("run %s is %s (%s), want %s", id, task.Status, task.Error, status)
		}
		return task.Status == status, fmt.Sprintf("run %s is %s (%s), want %s", id, task.Status, task.Error, status)
	})
}

// streamTimings are heartbeat and lease settings loose enough for runs
// that stream for seconds on a loaded machine under -race (the harness's
// 600 ms heartbeat TTL closes a session whose frames wait that long).
func streamTimings(c *Config) {
	c.HeartbeatInterval = 500 * time.Millisecond
	c.LeaseTTL = 30 * time.Second
}

// checkLog compares the run's log file with its header and body.
func checkLog(t *testing.T, dir string, task core.Task, body []byte) {
	t.Helper()
	got, err := os.ReadFile(filepath.Join(dir, "logs", task.ID+".log"))
	if err != nil {
		t.Fatal(err)
	}
	want := append([]byte("TRACE_ID:"+task.TraceID+"\n"), body...)
	if string(got) == string(want) {
		return
	}
	i := 0
	for i < len(got) && i < len(want) && got[i] == want[i] {
		i++
	}
	t.Fatalf("log file differs at byte %d: %d bytes, want %d; got %q... want %q...",
		i, len(got), len(want), got[i:min(i+40, len(got))], want[i:min(i+40, len(want))])
}

// TestLogPipe_SeqExact: a run printing `seq 1 2000000` (≈14.9 MB) through a
// real worker, the gnet server, the ring and the writer yields a log file
// whose body is byte for byte that output.
func TestLogPipe_SeqExact(t *testing.T) {
	h := newHarness(t, streamTimings)
	startRealWorker(t, "w-seq", h.m.Addr())
	task := h.submit(t, 0, "seq", "1", "2000000")
	waitStatus(t, h, task.ID, core.StatusSucceeded, 120*time.Second)
	checkLog(t, h.dir, task, seqOutput(1, 2000000))
	st := h.m.LogStats()
	if st["status"] != "ok" || st["errors"] != int64(0) || st["lines"] != int64(2000000) {
		t.Fatalf("log stats %v", st)
	}
}

// TestLogPipe_MasterRestartMidStream: the master is stopped while a run
// streams and a new one started on the same data dir and port; the worker
// reconnects, resends from the acked offset, and the file is exact.
func TestLogPipe_MasterRestartMidStream(t *testing.T) {
	dir := t.TempDir()
	dbPath := filepath.Join(dir, "db.sqlite")
	logDir := filepath.Join(dir, "logs")
	mlog := &syncWriter{b: &strings.Builder{}}
	start := func(addr string) (*Dispatcher, func()) {
		t.Helper()
		st, err := sqlite.Open(dbPath)
		if err != nil {
			t.Fatal(err)
		}
		mLogger := zerolog.New(mlog).With().Timestamp().Logger()
		logs, err := logpipe.NewWriter(logpipe.WriterConfig{Dir: logDir, Store: st, Logger: mLogger})
		if err != nil {
			t.Fatal(err)
		}
		cfg := Config{Addr: addr, MasterID: "m1", JoinToken: token, Logger: mLogger, Logs: logs}
		streamTimings(&cfg)
		m, err := New(cfg, store.MetricsFirst(st, logs), memory.New())
		if err != nil {
			t.Fatal(err)
		}
		if err := m.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		var once sync.Once
		stop := func() {
			once.Do(func() {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				if err := m.Stop(ctx); err != nil {
					t.Errorf("stop: %v", err)
				}
				logs.Close()
				st.Close()
			})
		}
		t.Cleanup(stop)
		return m, stop
	}
	m1, stop1 := start("127.0.0.1:0")
	addr := m1.Addr()
	h := &harness{m: m1, dir: dir, logs: mlog}
	var err error
	if h.st, err = sqlite.Open(dbPath); err != nil { // the test's own handle
		t.Fatal(err)
	}
	t.Cleanup(func() { h.st.Close() })
	h.owner = core.User{Username: "owner", PasswordHash: "x"}
	if err := h.st.CreateUser(context.Background(), &h.owner); err != nil {
		t.Fatal(err)
	}
	wlog := startRealWorker(t, "w-restart", addr)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("worker log:\n%s", wlog.String())
			t.Logf("master log:\n%s", mlog.String())
		}
	})
	// 2,000,000 numbers in 40 slices with pauses: a few seconds of output.
	script := `i=1; while [ $i -le 2000000 ]; do seq $i $((i+49999)); i=$((i+50000)); sleep 0.05; done`
	task := h.submit(t, 0, "sh", "-c", script)
	logFile := filepath.Join(logDir, task.ID+".log")
	// Stop mid-stream: some output stored, most still to come.
	testutil.WaitFor(t, 60*time.Second, "2 MiB of output", func() bool {
		fi, err := os.Stat(logFile)
		return err == nil && fi.Size() > 2<<20
	})
	began := time.Now()
	stop1()
	fi, _ := os.Stat(logFile)
	t.Logf("master stopped in %v with %d bytes in the log", time.Since(began), fi.Size())
	m2, _ := start(addr) // same port, same data dir
	h.m = m2
	testutil.WaitFor(t, 10*time.Second, "the worker back", func() bool { ws := m2.Workers(); return len(ws) == 1 && ws[0].State == core.WorkerRunning })
	t.Logf("worker back %v after the stop", time.Since(began))
	waitStatus(t, h, task.ID, core.StatusSucceeded, 120*time.Second)
	t.Logf("run done %v after the stop", time.Since(began))
	checkLog(t, dir, task, seqOutput(1, 2000000))
	if got := h.task(t, task.ID); got.Attempt != 1 {
		t.Fatalf("the run was retried: attempt %d", got.Attempt)
	}
}

// TestLogPipe_UnwritableLogDir: LOG_DIR becomes a regular file (opening a
// log file then fails with ENOTDIR, for root too). The worker sees the error
// and keeps its output, the master logs it and reports it in LogStats; once
// LOG_DIR is back, the log is exact.
func TestLogPipe_UnwritableLogDir(t *testing.T) {
	h := newHarness(t, streamTimings)
	logDir := filepath.Join(h.dir, "logs")
	if err := os.Rename(logDir, logDir+".away"); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(logDir, []byte("not a dir"), 0o644); err != nil {
		t.Fatal(err)
	}
	wlog := startRealWorker(t, "w-full", h.m.Addr())
	task := h.submit(t, 0, "seq", "1", "20000")
	testutil.WaitFor(t, 10*time.Second, "the worker told of the error", func() bool {
		return strings.Contains(wlog.String(), "master could not store output")
	})
	st := h.m.LogStats()
	if st["status"] != "failing" || !strings.Contains(fmt.Sprint(st["last_error"]), "not a directory") {
		t.Fatalf("log stats while LOG_DIR is a file: %v", st)
	}
	if !strings.Contains(h.logs.String(), "cannot store log bytes") {
		t.Fatal("the master did not log the storage error")
	}
	waitStatus(t, h, task.ID, core.StatusRunning, 10*time.Second) // and not finished: its output is not stored
	if err := os.Remove(logDir); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(logDir+".away", logDir); err != nil {
		t.Fatal(err)
	}
	waitStatus(t, h, task.ID, core.StatusSucceeded, 60*time.Second)
	checkLog(t, h.dir, task, seqOutput(1, 20000))
	if st := h.m.LogStats(); st["status"] != "ok" {
		t.Fatalf("log stats after recovery: %v", st)
	}
}

// blockingSink holds the writer inside LogAppended until released.
type blockingSink struct {
	in      chan struct{}
	release chan struct{}
	once    sync.Once
}

func (s *blockingSink) LogAppended(string, int64, []byte) {
	s.once.Do(func() {
		s.in <- struct{}{}
		<-s.release
	})
}

// TestLogData_FullQueueAnswersBusy: while the writer is stuck, the event
// loop does not wait: the first frame beyond the ring is answered "busy" at
// its own offset, the frames behind it are dropped unanswered (the worker
// rewinds to the busy offset), and resent frames are stored exactly once.
func TestLogData_FullQueueAnswersBusy(t *testing.T) {
	sink := &blockingSink{in: make(chan struct{}, 1), release: make(chan struct{})}
	var w *logpipe.Writer
	// On a clock that stands still: the fake worker never heartbeats, and
	// on a loaded machine the steps below can outlast its heartbeat TTL and
	// lease (real time: 0.6 s, 1 s), which closed its session or fenced its
	// frames (a flake under load).
	h := newClockedHarness(t, func(c *Config) {
		var err error
		w, err = logpipe.NewWriter(logpipe.WriterConfig{Dir: t.TempDir(), Sink: sink, Writers: 1, QueueFrames: 2})
		if err != nil {
			t.Fatal(err)
		}
		c.Logs = w
	})
	t.Cleanup(w.Close)
	p := dial(t, h.m.Addr())
	if ack := p.hello("w-busy", 1, 0); ack.LogWindow < logpipe.MinLogWindow {
		t.Fatalf("HelloAck grants a window of %d", ack.LogWindow)
	}
	task := h.submit(t, 0, "x")
	ex := p.expect(&pb.ExecuteTask{}).(*pb.ExecuteTask)
	ld := func(off int) *pb.LogData {
		return &pb.LogData{TaskId: task.ID, Attempt: 1, Fence: ex.Fence, Offset: uint64(off), Data: []byte("0123456789")}
	}
	p.send(ld(0))
	<-sink.in // the writer is stuck with the first frame
	for i := 1; i <= 4; i++ {
		p.send(ld(10 * i))
	}
	// The ring holds 2 frames: frame 3 is refused at once, frame 4 behind
	// it dropped.
	ack := p.expect(&pb.LogAck{}).(*pb.LogAck)
	if ack.Error != logpipe.AckBusy || ack.Offset != 30 || ack.LogWindow == 0 {
		t.Fatalf("ack %v, want busy at 30 with a window", ack)
	}
	close(sink.release)
	for {
		ack := p.expect(&pb.LogAck{}).(*pb.LogAck)
		if ack.Error != "" {
			t.Fatalf("ack %v", ack) // a busy at 40 would show here
		}
		if ack.Offset == 30 {
			break
		}
	}
	p.send(ld(30)) // resent after busy: the ring is empty again
	p.send(ld(40))
	for {
		if ack := p.expect(&pb.LogAck{}).(*pb.LogAck); ack.Offset == 50 && ack.Error == "" {
			break
		}
	}
	p.send(ld(20)) // a duplicate: dropped
	if ack := p.expect(&pb.LogAck{}).(*pb.LogAck); ack.Offset != 50 || ack.Error != "" {
		t.Fatalf("ack of a duplicate %v", ack)
	}
	got, _ := os.ReadFile(filepath.Join(w.Dir(), task.ID+".log"))
	if want := "TRACE_ID:" + task.TraceID + "\n" + strings.Repeat("0123456789", 5); string(got) != want {
		t.Fatalf("file %q want %q", got, want)
	}
	if st := w.Stats(); st["busy"] != int64(1) {
		t.Fatalf("stats %v", st)
	}
}
