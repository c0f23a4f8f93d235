package chaos

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/rlsched/rlsched/internal/testkit/e2eutil"
)

// proc is one rlsched process of the deployment, which the nemesis kills,
// freezes and starts again. Each incarnation's stdout and stderr go to a
// file of their own (a file, not a pipe, so that nothing waits on a
// grandchild such as the worker's guard).
type proc struct {
	name string
	dir  string // where the output files go
	args []string
	env  []string

	mu      sync.Mutex
	cmd     *exec.Cmd
	done    chan struct{} // closed when cmd is reaped
	gen     int           // incarnations started
	outPath string        // of the current incarnation
	killed  bool          // the current incarnation was killed by the test
	frozen  bool          // SIGSTOPped by the test and not continued yet
	// exits lists incarnations that ended without the test killing them,
	// after ready said they were up; before it, an exit is a failed start
	// (counted in failedStarts), which a supervisor would retry.
	exits        []string
	failedStarts int
	// ready reports whether an incarnation's output says it is up; nil:
	// it is up once started.
	ready func(outPath string) bool
	pids  []int // of every incarnation
}

// start runs a new incarnation; the previous one must have ended.
func (p *proc) start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil && !p.exitedLocked() {
		return fmt.Errorf("BUG: %s started while it runs", p.name)
	}
	p.gen++
	p.outPath = filepath.Join(p.dir, fmt.Sprintf("%s.%d.log", p.name, p.gen))
	out, err := os.Create(p.outPath)
	if err != nil {
		return err
	}
	defer out.Close()
	cmd := exec.Command(rlschedBin, p.args...)
	cmd.Env = p.env
	cmd.Dir = p.dir
	cmd.Stdout, cmd.Stderr = out, out
	// Its own group (so the test's ^C does not reach it and cleanup can
	// kill what is left of the group); it dies with the test binary.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("cannot start rlsched %s: %w", strings.Join(p.args, " "), err)
	}
	done := make(chan struct{})
	p.cmd, p.done, p.killed, p.frozen = cmd, done, false, false
	p.pids = append(p.pids, cmd.Process.Pid)
	gen := p.gen
	go func() {
		err := cmd.Wait()
		outPath := filepath.Join(p.dir, fmt.Sprintf("%s.%d.log", p.name, gen))
		up := p.ready == nil || p.ready(outPath)
		p.mu.Lock()
		if !p.killed && !up {
			p.failedStarts++
		} else if !p.killed {
			p.exits = append(p.exits, fmt.Sprintf("%s incarnation %d (pid %d) exited by itself: %v; last output:\n%s",
				p.name, gen, cmd.Process.Pid, err, tailFile(outPath, 15)))
		}
		p.mu.Unlock()
		close(done)
	}()
	return nil
}

func (p *proc) exitedLocked() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// running reports whether the current incarnation is alive.
func (p *proc) running() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cmd != nil && !p.exitedLocked()
}

// pid is the current incarnation's pid (0 before the first start).
func (p *proc) pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return 0
	}
	return p.cmd.Process.Pid
}

// kill SIGKILLs the process (not its group: a crash or the OOM killer takes
// the worker, not its guard) and waits until it is reaped.
func (p *proc) kill() error {
	p.mu.Lock()
	if p.cmd == nil || p.exitedLocked() {
		p.mu.Unlock()
		return nil
	}
	p.killed = true
	cmd, done := p.cmd, p.done
	p.mu.Unlock()
	_ = cmd.Process.Signal(syscall.SIGKILL)
	select {
	case <-done:
		return nil
	case <-time.After(30 * time.Second):
		return fmt.Errorf("%s (pid %d) did not die within 30 s of SIGKILL", p.name, cmd.Process.Pid)
	}
}

// freeze SIGSTOPs the process (only it: its runs are not its threads and
// go on, as under a GC pause or a swapped-out worker); thaw continues it.
func (p *proc) freeze() bool { return p.signalFrozen(syscall.SIGSTOP, true) }
func (p *proc) thaw() bool   { return p.signalFrozen(syscall.SIGCONT, false) }

func (p *proc) signalFrozen(sig syscall.Signal, frozen bool) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil || p.exitedLocked() {
		return false
	}
	p.frozen = frozen
	return p.cmd.Process.Signal(sig) == nil
}

// destroy kills the whole group of the current incarnation (cleanup).
func (p *proc) destroy() {
	p.mu.Lock()
	if p.cmd == nil || p.exitedLocked() {
		p.mu.Unlock()
		return
	}
	p.killed = true
	cmd, done := p.cmd, p.done
	p.mu.Unlock()
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	_ = cmd.Process.Signal(syscall.SIGKILL)
	select {
	case <-done:
	case <-time.After(30 * time.Second):
	}
}

// selfExits are the incarnations that ended without the test killing them.
func (p *proc) selfExits() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.exits...)
}

// outputs are the output files of every incarnation so far.
func (p *proc) outputs() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []string
	for g := 1; g <= p.gen; g++ {
		out = append(out, filepath.Join(p.dir, fmt.Sprintf("%s.%d.log", p.name, g)))
	}
	return out
}

// logLine is one JSON log line (LOG_FORMAT=json).
type logLine map[string]any

func (l logLine) str(k string) string { return e2eutil.Str(l, k) }

// logs parses the complete JSON lines of the current incarnation; other
// lines (the guard's, a panic) are skipped.
func (p *proc) logs() []logLine {
	p.mu.Lock()
	path := p.outPath
	p.mu.Unlock()
	return parseLogFile(path)
}

func parseLogFile(path string) []logLine {
	var out []logLine
	for _, l := range e2eutil.ParseLog(path) {
		out = append(out, l)
	}
	return out
}

// crashes lists the incarnations whose output shows a panic, a Go runtime
// fatal error or a BUG: line.
func (p *proc) crashes() []string {
	var out []string
	for _, f := range p.outputs() {
		b, _ := os.ReadFile(f)
		s := string(b)
		if strings.Contains(s, "panic: ") || strings.Contains(s, `"message":"BUG:`) || strings.Contains(s, "fatal error: ") {
			out = append(out, fmt.Sprintf("%s crashed or logged a BUG:\n%s", filepath.Base(f), tailString(s, 30)))
		}
	}
	return out
}

func tailFile(path string, lines int) string {
	b, _ := os.ReadFile(path)
	return tailString(string(b), lines)
}

// tailString is e2eutil.Tail.
var tailString = e2eutil.Tail

// baseEnv is the test's environment minus every setting rlsched reads,
// plus JSON logs; extra entries come last and win.
func baseEnv(extra ...string) []string { return e2eutil.ServerEnv([]string{"CHAOS_"}, extra...) }

// killPid SIGKILLs one process.
func killPid(pid int) { _ = syscall.Kill(pid, syscall.SIGKILL) }

// floodLimit is how often one message may be logged within one second
// before the process counts as spinning (retrying or ping-ponging with no
// backoff): a loop that burns a core and drowns the log.
const floodLimit = 200

// floods lists the messages an incarnation logged more than floodLimit
// times within one second.
func (p *proc) floods() []string {
	var out []string
	for _, path := range p.outputs() {
		f, err := os.Open(path)
		if err != nil {
			continue
		}
		perSecond := map[[2]string]int{}
		worst := map[string]int{}
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 1<<20), 16<<20)
		for sc.Scan() {
			line := sc.Bytes()
			if len(line) == 0 || line[0] != '{' {
				continue
			}
			var l struct {
				Message string `json:"message"`
				Time    string `json:"time"`
			}
			if json.Unmarshal(line, &l) != nil || l.Message == "request" {
				continue
			}
			k := [2]string{l.Message, l.Time}
			perSecond[k]++
			if n := perSecond[k]; n > floodLimit && n > worst[l.Message] {
				worst[l.Message] = n
			}
		}
		f.Close()
		for msg, n := range worst {
			out = append(out, fmt.Sprintf("%s logged %q %d times within one second (limit %d): it spins", filepath.Base(path), msg, n, floodLimit))
		}
	}
	return out
}
