package worker

import (
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/rlsched/rlsched/codec/pb"
	"github.com/rlsched/rlsched/core"
	"github.com/rlsched/rlsched/internal/testkit/testutil"
	"github.com/rlsched/rlsched/worker/isolation"
)

// termReader collects a run's TermData from the fake master's inbox,
// checking that offsets follow each other, and the TermAcks.
type termReader struct {
	mc    *masterConn
	task  string
	out   strings.Builder
	next  uint64
	acked uint64
	fin   *pb.TaskFinished
}

// until reads frames until cond holds of the output so far.
func (r *termReader) until(t *testing.T, what string, cond func(out string) bool) {
	t.Helper()
	r.within(t, 20*time.Second, what, cond)
}

// within is until with a bound of d.
func (r *termReader) within(t *testing.T, d time.Duration, what string, cond func(out string) bool) {
	t.Helper()
	deadline := time.After(d)
	for !cond(r.out.String()) {
		select {
		case m, open := <-r.mc.in:
			if !open {
				t.Fatalf("connection closed while waiting for %s; terminal so far %q", what, r.out.String())
			}
			r.take(t, m)
		case <-deadline:
			t.Fatalf("no %s within %v; terminal so far %q", what, d, r.out.String())
		}
	}
}

func (r *termReader) take(t *testing.T, m proto.Message) {
	t.Helper()
	switch m := m.(type) {
	case *pb.TermData:
		if m.GetTaskId() != r.task {
			return
		}
		if m.GetOffset() != r.next {
			t.Fatalf("TermData at offset %d, want %d", m.GetOffset(), r.next)
		}
		r.next += uint64(len(m.GetData()))
		r.out.Write(m.GetData())
	case *pb.TermAck:
		r.acked = m.GetOffset()
	case *pb.TaskFinished:
		if m.GetTaskId() == r.task {
			r.fin = m
		}
	}
}

// TestTerminal_InteractiveRunOnPTY: an interactive run without argv gets a
// login shell on a PTY, as its own uid, with the window size the master
// set; typed input runs, Ctrl-C reaches the foreground job as SIGINT, and
// exiting the shell ends the run with exit 0. The output is both terminal
// frames and the run's log.
func TestTerminal_InteractiveRunOnPTY(t *testing.T) {
	m := newFakeMaster(t, testToken)
	isoWorker(t, m, isolation.UIDRange{First: 62060, Last: 62069}, nil)
	mc := m.next(t)
	fence := uint64(9)
	mc.send(&pb.ExecuteTask{TaskId: "t-sh", Attempt: 1, Fence: fence, Interactive: true})
	st := mc.started(t, "t-sh")
	if st.GetError() != "" {
		t.Fatalf("start: %v", st)
	}
	r := &termReader{mc: mc, task: "t-sh"}
	var inOff uint64
	typeIn := func(s string) {
		mc.send(&pb.TermInput{TaskId: "t-sh", Attempt: 1, Fence: fence, Offset: inOff, Data: []byte(s)})
		inOff += uint64(len(s))
	}
	mc.send(&pb.TermResize{TaskId: "t-sh", Attempt: 1, Fence: fence, Cols: 123, Rows: 45})
	// A stale fence is not obeyed.
	mc.send(&pb.TermInput{TaskId: "t-sh", Attempt: 1, Fence: fence + 1, Data: []byte("echo stale-$((6*7))\r")})
	typeIn("echo size=$(stty size) uid=$(id -u) tty=$(test -t 0 && echo yes); echo hi-$((20+1))\r")
	r.until(t, "the typed command's output", func(out string) bool { return strings.Contains(out, "hi-21") })
	out := r.out.String()
	if !strings.Contains(out, "size=45 123 uid=6206") || !strings.Contains(out, "tty=yes") {
		t.Fatalf("want the window size, a uid of the range and a terminal on stdin; terminal: %q", out)
	}
	if strings.Contains(out, "stale-42") {
		t.Fatalf("input under a stale fence was typed: %q", out)
	}

	// Ctrl-C is a byte: the line discipline signals the foreground job.
	typeIn(`sh -c 'trap "echo got-int; exit 0" INT; echo ready-$((1+1)); while :; do sleep 0.05; done'` + "\r")
	r.until(t, "the job to start", func(out string) bool { return strings.Contains(out, "ready-2") })
	typeIn("\x03")
	r.until(t, "SIGINT to reach the job", func(out string) bool { return strings.Contains(out, "got-int") })

	typeIn("exit\r")
	waitFor(t, 20*time.Second, "the run to end", func() bool {
		for r.fin == nil {
			select {
			case m := <-mc.in:
				r.take(t, m)
			default:
				return false
			}
		}
		return true
	})
	if r.fin.GetOutcome() != pb.Outcome_OUTCOME_EXITED || r.fin.GetExitCode() != 0 {
		t.Fatalf("TaskFinished: %v\nterminal: %q", r.fin, r.out.String())
	}
	if r.acked != inOff {
		t.Errorf("input acked up to %d, want %d", r.acked, inOff)
	}
	if log := m.log("t-sh", 1); !strings.Contains(log, "hi-21") || !strings.Contains(log, "got-int") {
		t.Fatalf("the log lacks the terminal's output: %q", log)
	}
}

// TestTerminal_NotRecorded: with record off the log has a note, not the
// terminal's output, which still reaches the master as TermData.
func TestTerminal_NotRecorded(t *testing.T) {
	m := newFakeMaster(t, testToken)
	startWorker(t, m, nil)
	mc := m.next(t)
	mc.send(&pb.ExecuteTask{TaskId: "t-nr", Attempt: 1, Fence: 3, Interactive: true,
		Argv: []string{"sh", "-c", "echo secret-$((2*3)); exit 4"}, Env: map[string]string{core.RecordEnv: "0"}})
	r := &termReader{mc: mc, task: "t-nr"}
	r.until(t, "the output", func(out string) bool { return strings.Contains(out, "secret-6") })
	fin := mc.finished(t, "t-nr", 20*time.Second)
	if fin.GetExitCode() != 4 {
		t.Fatalf("TaskFinished: %v", fin)
	}
	if log := m.log("t-nr", 1); strings.Contains(log, "secret") || !strings.Contains(log, "not recorded") {
		t.Fatalf("log = %q, want only the note", log)
	}
}

// TestTerminal_BatchMayNotSetRecordEnv: the exemption is for interactive
// runs only; a batch run naming the variable is refused like any
// RLSCHED_ name.
func TestTerminal_BatchMayNotSetRecordEnv(t *testing.T) {
	if err := checkTaskEnv(map[string]string{core.RecordEnv: "0"}, false); err == nil {
		t.Fatal("a batch run may set " + core.RecordEnv)
	}
	if err := checkTaskEnv(map[string]string{core.RecordEnv: "0"}, true); err != nil {
		t.Fatal(err)
	}
}

func TestTerminal_TimeWarning(t *testing.T) {
	if warnAt(time.Minute, 5*time.Minute, func(string) {}) != nil {
		t.Fatal("a warning for a limit shorter than the warning's lead")
	}
	got := make(chan string, 1)
	tm := warnAt(30*time.Millisecond, 20*time.Millisecond, func(s string) { got <- s })
	defer tm.Stop()
	select {
	case line := <-got:
		if !strings.Contains(line, "time limit (30ms) in 20ms") {
			t.Fatalf("warning: %q", line)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no warning")
	}
}

// TestTerminal_TimeLimit: a session's time limit (--time) warns in its
// terminal first, then stops it as any run's timeout does: SIGTERM, which
// this one ignores, the grace, SIGKILL; the run ends TIMEOUT and its whole
// session (setsid) is gone.
func TestTerminal_TimeLimit(t *testing.T) {
	saved := timeWarning
	timeWarning = 500 * time.Millisecond
	t.Cleanup(func() { timeWarning = saved })
	const grace = 300 * time.Millisecond
	m := newFakeMaster(t, testToken)
	startWorker(t, m, func(c *Config) { c.Grace = grace })
	mc := m.next(t)
	t0 := time.Now()
	mc.send(&pb.ExecuteTask{TaskId: "t-limit", Attempt: 1, Interactive: true, TimeoutSeconds: 1,
		Argv: []string{"sh", "-c", `trap "" TERM; echo ready; while :; do sleep 0.1; done`}})
	pgid := int(mc.started(t, "t-limit").GetPid())
	r := &termReader{mc: mc, task: "t-limit"}
	r.until(t, "the time limit's warning", func(out string) bool { return strings.Contains(out, "reaches its time limit (1s) in 500ms") })
	if r.fin != nil {
		t.Fatalf("the warning came after the run's end: %v", r.fin)
	}
	waitFor(t, 15*time.Second, "the run to end", func() bool {
		for r.fin == nil {
			select {
			case m := <-mc.in:
				r.take(t, m)
			default:
				return false
			}
		}
		return true
	})
	if r.fin.GetOutcome() != pb.Outcome_OUTCOME_TIMEOUT || r.fin.GetSignal() != "SIGKILL" {
		t.Fatalf("TaskFinished: %v", r.fin)
	}
	if el := time.Since(t0); el < time.Second+grace {
		t.Fatalf("ended %s after the start, before the limit and the grace", el)
	}
	testutil.WaitGroupGone(t, pgid, 5*time.Second)
	if log := m.log("t-limit", 1); !strings.Contains(log, "reaches its time limit") {
		t.Fatalf("the recorded log lacks the warning: %q", log)
	}
}
