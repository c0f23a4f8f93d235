package worker

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// The guard kills what a dead worker leaves behind. Pdeathsig only reaches a
// run's direct child; its descendants would outlive a SIGKILLed worker. So at
// start the worker re-executes its own binary with RLSCHED_GUARD=1 in a
// process group of its own, its stdin the read end of a pipe. The worker
// writes "+<pgid>\n" when a run starts and "-<pgid>\n" when its group is
// gone. When the guard reads EOF the worker has exited (the kernel closes
// the pipe even on SIGKILL), so the guard SIGKILLs every group still
// registered and exits.

const guardEnv = "RLSCHED_GUARD"

// MaybeGuard runs the guard and exits when this process was started as one
// (RLSCHED_GUARD=1); otherwise it returns at once. Call it first thing in
// main, and in TestMain of any test that runs a worker.
func MaybeGuard() {
	if os.Getenv(guardEnv) != "1" {
		return
	}
	os.Exit(serveGuard(os.Stdin, os.Stderr))
}

// serveGuard reads registrations from r until EOF, then kills every group
// still registered.
func serveGuard(r io.Reader, errw io.Writer) int {
	// Only EOF stops the guard: a Ctrl-C meant for the worker must not take
	// the guard down before the worker's runs are gone.
	signal.Ignore(syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT)
	groups := map[int]bool{}
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if len(line) < 2 {
			continue
		}
		pgid, err := strconv.Atoi(line[1:])
		if err != nil || pgid <= 1 {
			fmt.Fprintf(errw, "rlsched guard: ignoring line %q\n", line)
			continue
		}
		switch line[0] {
		case '+':
			groups[pgid] = true
		case '-':
			delete(groups, pgid)
		}
	}
	for pgid := range groups {
		if err := syscall.Kill(-pgid, syscall.SIGKILL); err == nil {
			fmt.Fprintf(errw, "rlsched guard: worker gone, killed process group %d\n", pgid)
		}
	}
	return 0
}

// guard is the worker's end of the pipe. Its methods are safe for
// concurrent use; a nil *guard ignores every call.
type guard struct {
	mu     sync.Mutex
	w      *os.File
	cmd    *exec.Cmd
	broken bool
}

// startGuard starts the guard process.
func startGuard() (*guard, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("cannot find own executable for the guard: %w", err)
	}
	r, w, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("cannot create guard pipe: %w", err)
	}
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), guardEnv+"=1")
	cmd.Stdin = r
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		r.Close()
		w.Close()
		return nil, fmt.Errorf("cannot start guard %s: %w", exe, err)
	}
	r.Close()
	return &guard{w: w, cmd: cmd}, nil
}

func (g *guard) send(op byte, pgid int) error {
	if g == nil {
		return nil
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.broken {
		return nil
	}
	if _, err := fmt.Fprintf(g.w, "%c%d\n", op, pgid); err != nil {
		g.broken = true
		return fmt.Errorf("cannot reach the guard process; runs may outlive a crashed worker: %w", err)
	}
	return nil
}

// add registers a run's process group.
func (g *guard) add(pgid int) error { return g.send('+', pgid) }

// remove forgets a process group that is gone.
func (g *guard) remove(pgid int) error { return g.send('-', pgid) }

// close ends the guard (it kills whatever is still registered) and reaps it.
func (g *guard) close() {
	if g == nil {
		return
	}
	g.mu.Lock()
	g.w.Close()
	g.broken = true
	g.mu.Unlock()
	_ = g.cmd.Wait()
}
