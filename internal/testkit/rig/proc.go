package rig

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rlsched/rlsched/internal/testkit/testutil"
)

// Spec is one process to launch.
type Spec struct {
	Name    string // labels the process in messages
	Bin     string
	Args    []string
	Env     []string
	Dir     string // working directory
	OutPath string // stdout goes to this file
	ErrPath string // stderr (the JSON log) goes to this file; may be OutPath
}

// Proc is a started process. Its output goes to files, not pipes, so that
// no grandchild holding a pipe (such as the worker's guard) keeps Wait
// waiting. Every method is safe to call from any goroutine.
type Proc struct {
	Name      string
	Cmd       *exec.Cmd
	OutPath   string
	ErrPath   string
	StartedAt time.Time

	done    chan struct{}
	waitErr error // set before done is closed
}

// Launch starts s in a process group of its own (so that a leftover can be
// killed as a group, and the test's ^C does not reach it); it dies with
// the test binary.
func Launch(s Spec) (*Proc, error) {
	out, err := os.Create(s.OutPath)
	if err != nil {
		return nil, err
	}
	defer out.Close()
	errf := out
	if s.ErrPath != s.OutPath {
		if errf, err = os.Create(s.ErrPath); err != nil {
			return nil, err
		}
		defer errf.Close()
	}
	p := &Proc{Name: s.Name, OutPath: s.OutPath, ErrPath: s.ErrPath, done: make(chan struct{})}
	p.Cmd = exec.Command(s.Bin, s.Args...)
	p.Cmd.Env = s.Env
	p.Cmd.Dir = s.Dir
	p.Cmd.Stdout, p.Cmd.Stderr = out, errf
	p.Cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := p.Cmd.Start(); err != nil {
		return nil, fmt.Errorf("cannot start rlsched %s: %w", strings.Join(s.Args, " "), err)
	}
	p.StartedAt = time.Now()
	go func() { p.waitErr = p.Cmd.Wait(); close(p.done) }()
	return p, nil
}

// Pid is the process's id.
func (p *Proc) Pid() int { return p.Cmd.Process.Pid }

// Done is closed once the process has been reaped.
func (p *Proc) Done() <-chan struct{} { return p.done }

// Exited reports whether the process has been reaped.
func (p *Proc) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Err is what Wait returned; nil while the process runs.
func (p *Proc) Err() error {
	if !p.Exited() {
		return nil
	}
	return p.waitErr
}

// WaitExit waits up to timeout for the process to be reaped.
func (p *Proc) WaitExit(timeout time.Duration) bool {
	select {
	case <-p.done:
		return true
	case <-time.After(timeout):
		return false
	}
}

// Kill SIGKILLs the process, only it (the way a crash or the OOM killer
// would: not its guard), and waits until it is reaped.
func (p *Proc) Kill(t testing.TB) {
	t.Helper()
	p.Stop(t, syscall.SIGKILL, 10*time.Second)
}

// Stop sends sig and fails t unless the process is gone within timeout.
func (p *Proc) Stop(t testing.TB, sig syscall.Signal, timeout time.Duration) {
	t.Helper()
	if p.Exited() {
		return
	}
	_ = p.Cmd.Process.Signal(sig)
	if !p.WaitExit(timeout) {
		t.Fatalf("%s (pid %d) did not exit within %v of %v", p.Name, p.Pid(), timeout, sig)
	}
}

// KillGroup SIGKILLs the process and its group and waits up to timeout for
// it to be reaped; it reports whether it was.
func (p *Proc) KillGroup(timeout time.Duration) bool {
	if p.Exited() {
		return true
	}
	_ = syscall.Kill(-p.Pid(), syscall.SIGKILL)
	_ = p.Cmd.Process.Signal(syscall.SIGKILL)
	return p.WaitExit(timeout)
}

// Stdout is what the process wrote to stdout so far.
func (p *Proc) Stdout() string {
	b, _ := os.ReadFile(p.OutPath)
	return string(b)
}

// Stderr is what the process wrote to stderr so far.
func (p *Proc) Stderr() string {
	b, _ := os.ReadFile(p.ErrPath)
	return string(b)
}

// Logs are the complete JSON lines of stderr so far (see ParseLog).
func (p *Proc) Logs() []Line { return ParseLog(p.ErrPath) }

// FindLog returns the first log line matching match, if any.
func (p *Proc) FindLog(match func(Line) bool) (Line, bool) {
	for _, l := range p.Logs() {
		if match(l) {
			return l, true
		}
	}
	return nil, false
}

// WaitLog waits for a log line matching match, which what describes; it
// fails at once when the process exits first.
func (p *Proc) WaitLog(t testing.TB, timeout time.Duration, what string, match func(Line) bool) Line {
	t.Helper()
	var found Line
	testutil.Eventually(t, timeout, func() (bool, string) {
		if l, ok := p.FindLog(match); ok {
			found = l
			return true, ""
		}
		if p.Exited() {
			t.Fatalf("%s exited (%v) before logging %s; stderr:\n%s", p.Name, p.Err(), what, Tail(p.Stderr(), 40))
		}
		return false, fmt.Sprintf("%s never logged %s", p.Name, what)
	})
	return found
}

// WaitMessage waits for a log line whose message is msg.
func (p *Proc) WaitMessage(t testing.TB, timeout time.Duration, msg string) Line {
	t.Helper()
	return p.WaitLog(t, timeout, fmt.Sprintf("%q", msg), func(l Line) bool { return l.Msg() == msg })
}
