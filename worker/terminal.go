package worker

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/creack/pty"
	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/proto"

	"github.com/rlsched/rlsched/codec/pb"
	"github.com/rlsched/rlsched/worker/isolation"
)

// The terminal of an interactive run (issue 34, docs/interactive.md): the
// run's process starts on a PTY instead of the output pipe, in a session of
// its own whose controlling terminal it is. Its output goes both to the
// run's spool (the log, unless the submission said record: false) and, at
// once, to the master as TermData; TermInput and TermResize from the master
// go to the PTY. A Ctrl-C is a byte like any other: the PTY's line
// discipline turns it into SIGINT for the foreground process group.

const (
	// termPending bounds the terminal output read and not yet sent. Past
	// it the oldest bytes are dropped (the master's viewers see a gap in
	// the offsets); the log still has them. The pump never waits for it.
	termPending = 256 << 10
	// termChunk is the largest TermData payload.
	termChunk = 32 << 10
	// termInputQueue bounds the TermInputs waiting for the PTY. The master
	// keeps at most its input window (a few chunks) unacknowledged, so a
	// full queue means a master that broke the window: the input is dropped.
	termInputQueue = 64
	// maxTermSize is the largest window side the PTY is given.
	maxTermSize = 1000
)

// timeWarning is how long before its timeout an interactive run's terminal
// is told that it will end (a variable: a test shortens it).
var timeWarning = 5 * time.Minute

// term is the terminal side of one interactive run. ptmx is the PTY's
// master side (the run's r.pipe too). Its mutex guards the fields below it;
// lock order: runTable.mu, then term.mu.
type term struct {
	ptmx   *os.File
	record bool
	in     chan *pb.TermInput
	done   chan struct{} // closed when the pump has read the PTY to its end
	warn   *time.Timer   // the time limit's warning; nil: none
	port   int           // its web app's port on the loopback (proxy.go); 0: none

	mu      sync.Mutex
	pend    []byte // output not yet sent, at most termPending
	off     uint64 // terminal offset of pend[0]
	dropped uint64 // bytes dropped from pend so far
	inAck   uint64 // input written to the PTY up to (exclusive)
	ackDue  bool   // inAck not yet sent
}

// openTerminal gives cmd a new PTY as stdin, stdout and stderr and as its
// controlling terminal, in a session of its own (so its pid still names its
// process group). It returns the master side, made non-blocking so the
// pump's read deadline works, and the terminal side, which the caller
// closes once the process started (as the pipe's write end).
func openTerminal(cmd *exec.Cmd, id *isolation.Identity) (*os.File, *os.File, error) {
	ptmx, tty, err := pty.Open()
	if err != nil {
		return nil, nil, fmt.Errorf("cannot open a terminal for the interactive run: %w", err)
	}
	// A pollable copy of the master side: os.NewFile registers a
	// non-blocking descriptor with the runtime's poller.
	fd, err := syscall.Dup(int(ptmx.Fd()))
	ptmx.Close()
	if err != nil {
		tty.Close()
		return nil, nil, fmt.Errorf("cannot open a terminal for the interactive run: %w", err)
	}
	syscall.CloseOnExec(fd)
	if err := syscall.SetNonblock(fd, true); err != nil {
		syscall.Close(fd)
		tty.Close()
		return nil, nil, fmt.Errorf("cannot open a terminal for the interactive run: %w", err)
	}
	m := os.NewFile(uintptr(fd), "/dev/ptmx")
	if id != nil {
		// Its own terminal, as login(1) leaves it: programs that check the
		// owner of their tty (ssh-agent, screen, mesg) work.
		_ = os.Chown(tty.Name(), int(id.UID()), int(id.GID()))
	}
	_ = setWinsize(m, 80, 24)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = tty, tty, tty
	a := cmd.SysProcAttr
	// setsid makes it the leader of a new session and process group;
	// setpgid after it would fail (EPERM).
	a.Setpgid = false
	a.Setsid = true
	a.Setctty = true
	a.Ctty = 0 // the child's stdin
	return m, tty, nil
}

// setWinsize sets the PTY's window size (clamped to 1..maxTermSize),
// through the poller's descriptor (File.Fd would make it blocking again).
func setWinsize(f *os.File, cols, rows uint32) error {
	ws := &unix.Winsize{Col: uint16(clampTerm(cols)), Row: uint16(clampTerm(rows))}
	sc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var ierr error
	if err := sc.Control(func(fd uintptr) { ierr = unix.IoctlSetWinsize(int(fd), unix.TIOCSWINSZ, ws) }); err != nil {
		return err
	}
	return ierr
}

func clampTerm(n uint32) uint32 { return min(max(n, 1), maxTermSize) }

// imageShell is the login shell of a session in an image: the worker's
// /etc/passwd says nothing of the image's shells, so bash if the image has
// one, else sh.
var imageShell = []string{"/bin/sh", "-c", `command -v bash >/dev/null 2>&1 && exec bash -l; exec sh -l`}

// interactiveArgv is an interactive run's argv: the submitted one, or the
// login shell of the uid it runs as (/etc/passwd; /bin/bash when it has
// none, /bin/sh without bash), started as a login shell; in an image,
// imageShell.
func interactiveArgv(argv []string, id *isolation.Identity, image bool) []string {
	if len(argv) > 0 {
		return argv
	}
	if image {
		return imageShell
	}
	uid := uint32(os.Getuid())
	if id != nil {
		uid = id.UID()
	}
	shell := loginShell(uid)
	if shell == "" {
		shell = "/bin/bash"
		if _, err := os.Stat(shell); err != nil {
			shell = "/bin/sh"
		}
	}
	return []string{shell, "-l"}
}

// loginShell is uid's shell in /etc/passwd ("" when none; nologin counts
// as none: the run asked for a shell, not a refusal).
func loginShell(uid uint32) string {
	f, err := os.Open("/etc/passwd")
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	want := strconv.FormatUint(uint64(uid), 10)
	for sc.Scan() {
		fs := strings.Split(sc.Text(), ":")
		if len(fs) >= 7 && fs[2] == want {
			if sh := fs[6]; sh != "" && !strings.HasSuffix(sh, "nologin") && !strings.HasSuffix(sh, "/false") {
				return sh
			}
			return ""
		}
	}
	return ""
}

func newTerm(ptmx *os.File, record bool) *term {
	return &term{ptmx: ptmx, record: record, in: make(chan *pb.TermInput, termInputQueue), done: make(chan struct{})}
}

// output queues bytes read from the PTY for the master, dropping the
// oldest beyond termPending. Pump goroutine (and the time warning).
func (t *term) output(b []byte) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.pend = append(t.pend, b...)
	if over := len(t.pend) - termPending; over > 0 {
		t.pend = append(t.pend[:0], t.pend[over:]...)
		t.off += uint64(over)
		t.dropped += uint64(over)
	}
}

// collectLocked appends r's terminal frames to msgs: its pending output
// and its input ack. Caller holds runTable.mu.
func (t *term) collectLocked(r *run, msgs []proto.Message) []proto.Message {
	t.mu.Lock()
	defer t.mu.Unlock()
	for len(t.pend) > 0 {
		n := min(len(t.pend), termChunk)
		data := append([]byte(nil), t.pend[:n]...)
		msgs = append(msgs, &pb.TermData{TaskId: r.id, Attempt: r.attempt, Fence: r.fence, Offset: t.off, Data: data})
		t.pend = t.pend[n:]
		t.off += uint64(n)
	}
	t.pend = t.pend[:0:0]
	if t.ackDue {
		msgs = append(msgs, &pb.TermAck{TaskId: r.id, Attempt: r.attempt, Fence: r.fence, Offset: t.inAck})
		t.ackDue = false
	}
	return msgs
}

// writeInput is the run's input goroutine: it writes the queued input to
// the PTY (a shell that does not read blocks only this goroutine), acking
// each write, until the PTY is read to its end.
func (t *term) writeInput(kick func(), r *run) {
	for {
		select {
		case <-t.done:
			return
		case m := <-t.in:
			if _, err := t.ptmx.Write(m.GetData()); err != nil {
				select {
				case <-t.done:
				default:
					r.log.Warn().Err(err).Msg("cannot write input to the run's terminal")
				}
			}
			t.mu.Lock()
			t.inAck = m.GetOffset() + uint64(len(m.GetData()))
			t.ackDue = true
			t.mu.Unlock()
			kick()
		}
	}
}

// input queues m for the PTY without waiting; false when the queue is full.
func (t *term) input(m *pb.TermInput) bool {
	select {
	case t.in <- m:
		return true
	default:
		return false
	}
}

// warnAt writes a line into the terminal (note) before ahead of the run's
// timeout, so its user can save their work; nil when the timeout is too
// short for one.
func warnAt(timeout, before time.Duration, note func(string)) *time.Timer {
	if timeout <= before {
		return nil
	}
	return time.AfterFunc(timeout-before, func() {
		note(fmt.Sprintf("\r\n[rlsched] this session reaches its time limit (%s) in %s: it will be stopped then; save your work.\r\n",
			timeout, before))
	})
}

// startTerm begins the terminal side of the started run r: its input
// goroutine, the note of an unrecorded session, the time limit's warning.
func (a *agent) startTerm(r *run, m *pb.ExecuteTask) {
	t := r.term
	go t.writeInput(a.kick, r)
	if !t.record {
		_, _ = fmt.Fprintf(r.out, "[rlsched] interactive session not recorded (record: false): its terminal output is not in this log\n")
	}
	if secs := m.GetTimeoutSeconds(); secs > 0 {
		t.warn = warnAt(time.Duration(secs)*time.Second, timeWarning, func(line string) {
			t.output([]byte(line))
			if t.record {
				_, _ = r.out.Write([]byte(line))
			}
			a.kick()
		})
	}
}

// end stops what startTerm began; the pump calls it at the PTY's end.
func (t *term) end() {
	if t.warn != nil {
		t.warn.Stop()
	}
	close(t.done)
}
