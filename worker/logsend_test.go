package worker

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/rlsched/rlsched/codec/pb"
)

func isLogData(m proto.Message) bool {
	_, ok := m.(*pb.LogData)
	return ok
}

// TestLogAck_StorageErrorKeepsBytesAndBacksOff: while the master answers
// every LogData with a storage error, the worker keeps the output and
// resends with growing pauses (not in a loop); once the master can store
// again, the log is exact.
func TestLogAck_StorageErrorKeepsBytesAndBacksOff(t *testing.T) {
	m := newFakeMaster(t, testToken)
	startWorker(t, m, nil)
	mc := m.next(t)
	var refused atomic.Int64
	refuse := func(*pb.LogData) string {
		refused.Add(1)
		return "cannot write log file: no space left on device"
	}
	mc.refuse.Store(&refuse)
	mc.send(&pb.ExecuteTask{TaskId: "t-full", Attempt: 1, Argv: []string{"sh", "-c", "seq 1 1000"}})
	mc.started(t, "t-full")
	mc.expect(t, 10*time.Second, "a first LogData", isLogData)
	began := time.Now()
	// Backoff from 100 ms doubling (±20%): the 5th refusal comes at least
	// 0.8 × (100+200+400+800) ms after the first; without backoff, within
	// a few flush ticks.
	waitFor(t, 20*time.Second, "5 refusals", func() bool { return refused.Load() >= 5 })
	if d := time.Since(began); d < time.Second {
		t.Fatalf("5 refusals within %v: the worker does not back off", d)
	}
	if got := m.log("t-full", 1); got != "" {
		t.Fatalf("the fake master stored %q while refusing", got)
	}
	mc.refuse.Store(nil)
	mc.finished(t, "t-full", 20*time.Second)
	var want strings.Builder
	for i := 1; i <= 1000; i++ {
		want.WriteString(strconv.Itoa(i) + "\n")
	}
	if got := m.log("t-full", 1); got != want.String() {
		t.Fatalf("log after the master recovered: %d bytes, want %d", len(got), want.Len())
	}
}

// TestLogAck_BusyResendsFromTheFrame: a "busy" answer means nothing of the
// frame was taken; the worker pauses and resends from its offset.
func TestLogAck_BusyResendsFromTheFrame(t *testing.T) {
	m := newFakeMaster(t, testToken)
	cfg := startWorker(t, m, nil)
	mc := m.next(t)
	var busy atomic.Int64
	refuse := func(ld *pb.LogData) string {
		if ld.GetOffset() > 0 && busy.Add(1) <= 3 { // the second frame, three times
			return "busy"
		}
		return ""
	}
	mc.refuse.Store(&refuse)
	script := `echo first; while [ ! -e go ]; do sleep 0.02; done; echo second; echo third`
	mc.send(&pb.ExecuteTask{TaskId: "t-busy", Attempt: 1, Argv: []string{"sh", "-c", script}})
	mc.started(t, "t-busy")
	waitFor(t, 10*time.Second, "the first line acked", func() bool { return mc.acked("t-busy") == 6 })
	if err := os.WriteFile(filepath.Join(cfg.DataDir, "private", "t-busy.1", "go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	mc.finished(t, "t-busy", 20*time.Second)
	if got := m.log("t-busy", 1); got != "first\nsecond\nthird\n" {
		t.Fatalf("log %q", got)
	}
	if n := busy.Load(); n < 4 {
		t.Fatalf("busy answered %d times, want the frame resent after 3", n)
	}
	if g := m.gapCount(); g != 0 {
		t.Fatalf("%d gaps", g)
	}
}

// TestLogWindow_PerConnection: without acks, the worker sends at most
// logWindow bytes on a connection, all runs together; acks release the
// rest and every byte arrives once.
func TestLogWindow_PerConnection(t *testing.T) {
	m := newFakeMaster(t, testToken)
	startWorker(t, m, nil)
	mc := m.next(t)
	mc.ackLogs.Store(false)
	const each = 3 << 20 // two runs: 6 MiB > the 4 MiB window
	for _, id := range []string{"t-w1", "t-w2"} {
		mc.send(&pb.ExecuteTask{TaskId: id, Attempt: 1, Argv: []string{"head", "-c", strconv.Itoa(each), "/dev/zero"}})
	}
	total := func() int { return len(m.log("t-w1", 1)) + len(m.log("t-w2", 1)) }
	waitFor(t, 20*time.Second, "the window to fill", func() bool { return total() == logWindow })
	for drained := false; !drained; { // the frames that filled it
		select {
		case <-mc.in:
		default:
			drained = true
		}
	}
	// Nothing more may come while nothing is acked (absence needs a window).
	quiet := time.After(300 * time.Millisecond)
	for done := false; !done; {
		select {
		case m := <-mc.in:
			if ld, ok := m.(*pb.LogData); ok {
				t.Fatalf("LogData of %s at %d beyond the full window", ld.GetTaskId(), ld.GetOffset())
			}
		case <-quiet:
			done = true
		}
	}
	if total() != logWindow {
		t.Fatalf("%d bytes sent unacked, window %d", total(), logWindow)
	}
	mc.ackLogs.Store(true)
	for _, id := range []string{"t-w1", "t-w2"} {
		mc.ackLog(id, 1, uint64(len(m.log(id, 1))), false)
	}
	for range 2 {
		mc.expect(t, 30*time.Second, "TaskFinished", func(m proto.Message) bool { _, ok := m.(*pb.TaskFinished); return ok })
	}
	for _, id := range []string{"t-w1", "t-w2"} {
		if got := m.log(id, 1); len(got) != each || strings.Trim(got, "\x00") != "" {
			t.Fatalf("%s: %d bytes", id, len(got))
		}
	}
}

// TestSpool_SpillsWhileUnacked: output beyond SpoolMemory goes to
// DataDir/spool while the master does not ack; it all arrives once acks
// resume, and the spill files are removed when the run is done with.
func TestSpool_SpillsWhileUnacked(t *testing.T) {
	m := newFakeMaster(t, testToken)
	cfg := startWorker(t, m, func(c *Config) { c.SpoolMemory = 64 << 10 })
	mc := m.next(t)
	mc.ackLogs.Store(false)
	const size = 2 << 20
	mc.send(&pb.ExecuteTask{TaskId: "t-spill", Attempt: 1, Argv: []string{"head", "-c", strconv.Itoa(size), "/dev/urandom"}})
	spoolDir := filepath.Join(cfg.DataDir, "spool", "t-spill.1")
	waitFor(t, 20*time.Second, "output spilled to disk", func() bool {
		files, _ := filepath.Glob(filepath.Join(spoolDir, "*.spill"))
		return len(files) > 0
	})
	mc.ackLogs.Store(true)
	mc.ackLog("t-spill", 1, uint64(len(m.log("t-spill", 1))), false)
	fin := mc.finished(t, "t-spill", 30*time.Second)
	if got := m.log("t-spill", 1); len(got) != size || fin.GetLogBytes() != size {
		t.Fatalf("log %d bytes, TaskFinished %d, want %d", len(got), fin.GetLogBytes(), size)
	}
	mc.send(&pb.TaskFinishedAck{TaskId: "t-spill", Attempt: 1})
	waitFor(t, 10*time.Second, "the spool dir removed", func() bool {
		_, err := os.Stat(spoolDir)
		return os.IsNotExist(err)
	})
}

// TestLogWindow_GrantedByMaster: a master may grant a smaller credit window
// (HelloAck.log_window): the worker keeps to it; a LogAck naming a larger
// one releases more, and every byte arrives once.
func TestLogWindow_GrantedByMaster(t *testing.T) {
	const granted = 100 << 10
	m := newFakeMaster(t, testToken)
	m.setAck(func(*pb.Hello) *pb.HelloAck {
		return &pb.HelloAck{Session: "s1", HeartbeatIntervalMs: 100, LeaseTtlMs: 30_000, MasterId: "m1", LogWindow: granted}
	})
	startWorker(t, m, nil)
	mc := m.next(t)
	mc.ackLogs.Store(false)
	const size = 1 << 20
	mc.send(&pb.ExecuteTask{TaskId: "t-g", Attempt: 1, Argv: []string{"head", "-c", strconv.Itoa(size), "/dev/zero"}})
	waitFor(t, 20*time.Second, "the granted window to fill", func() bool { return len(m.log("t-g", 1)) == granted })
	// Two heartbeats more: a flush writes its heartbeats, then what the
	// runs have, so a byte past the window would come before the second.
	hbs, _ := mc.heartbeats()
	waitFor(t, 20*time.Second, "two more heartbeats", func() bool { n, _ := mc.heartbeats(); return n >= hbs+2 })
	if n := len(m.log("t-g", 1)); n > granted {
		t.Fatalf("%d bytes sent unacked, granted %d", n, granted)
	}
	// An ack for nothing new, granting 2×: the worker may send as much again.
	mc.send(&pb.LogAck{TaskId: "t-g", Attempt: 1, Offset: 0, LogWindow: 2 * granted})
	waitFor(t, 20*time.Second, "the larger window to fill", func() bool { return len(m.log("t-g", 1)) == 2*granted })
	mc.ackLogs.Store(true)
	mc.ackLog("t-g", 1, uint64(len(m.log("t-g", 1))), false)
	mc.finished(t, "t-g", 30*time.Second)
	if got := m.log("t-g", 1); len(got) != size {
		t.Fatalf("log %d bytes, want %d", len(got), size)
	}
}

func TestWindowFrom(t *testing.T) {
	for _, c := range []struct {
		granted  uint32
		cur, out int
	}{{0, 1234, 1234}, {0, 0, 0}, {64 << 10, logWindow, 64 << 10}, {1 << 30, 5, logWindow}, {1, 5, 1}} {
		if got := windowFrom(c.granted, c.cur); got != c.out {
			t.Fatalf("windowFrom(%d, %d) = %d, want %d", c.granted, c.cur, got, c.out)
		}
	}
}

// TestLogAck_GapBelowAckedBacksOff: a master that answers "gap" at an
// offset below what it acked (it lost acked output) gets the run's further
// output with growing pauses, not in a hot loop (issue 11: the soak saw
// 600,000 frames and error lines in 90 s from one run).
func TestLogAck_GapBelowAckedBacksOff(t *testing.T) {
	m := newFakeMaster(t, testToken)
	startWorker(t, m, nil)
	mc := m.next(t)
	var lose atomic.Bool
	var refused atomic.Int64
	refuse := func(*pb.LogData) string {
		if !lose.Load() {
			return ""
		}
		refused.Add(1)
		return "gap" // at offset 0, below what was acked
	}
	mc.refuse.Store(&refuse)
	script := "echo first; while :; do echo x; sleep 0.05; done"
	mc.send(&pb.ExecuteTask{TaskId: "t-lost", Attempt: 1, Argv: []string{"sh", "-c", script}})
	mc.started(t, "t-lost")
	waitFor(t, 10*time.Second, "the first line acked", func() bool { return mc.acked("t-lost") >= 6 })
	lose.Store(true)
	began := time.Now()
	// Backoff from 100 ms doubling (±20%): the 5th answer comes at least
	// 0.8 × (100+200+400+800) ms after the first; without it, with the
	// next lines (every 50 ms) or at once.
	waitFor(t, 20*time.Second, "5 gap answers", func() bool { return refused.Load() >= 5 })
	if d := time.Since(began); d < time.Second {
		t.Fatalf("5 gap answers within %v: the worker does not back off", d)
	}
}
