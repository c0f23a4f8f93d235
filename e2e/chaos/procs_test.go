package chaos

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/rlsched/rlsched/internal/testkit/rig"
)

// proc is one rlsched process of the deployment, which the nemesis kills,
// freezes and starts again: a rig.Proc per incarnation, each with its
// stdout and stderr in one file of its own.
type proc struct {
	name string
	bin  string
	dir  string // where the output files go
	args []string
	env  []string

	mu      sync.Mutex
	cur     *rig.Proc     // the current incarnation; nil before the first
	ended   chan struct{} // closed once cur is reaped and its exit counted
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
	if p.runningLocked() {
		return fmt.Errorf("BUG: %s started while it runs", p.name)
	}
	p.gen++
	outPath := filepath.Join(p.dir, fmt.Sprintf("%s.%d.log", p.name, p.gen))
	cur, err := rig.Launch(rig.Spec{Name: p.name, Bin: p.bin, Args: p.args, Env: p.env, Dir: p.dir,
		OutPath: outPath, ErrPath: outPath})
	if err != nil {
		return err
	}
	ended := make(chan struct{})
	p.cur, p.ended, p.outPath, p.killed, p.frozen = cur, ended, outPath, false, false
	p.pids = append(p.pids, cur.Pid())
	gen := p.gen
	go func() {
		<-cur.Done()
		up := p.ready == nil || p.ready(outPath)
		p.mu.Lock()
		if !p.killed && !up {
			p.failedStarts++
		} else if !p.killed {
			p.exits = append(p.exits, fmt.Sprintf("%s incarnation %d (pid %d) exited by itself: %v; last output:\n%s",
				p.name, gen, cur.Pid(), cur.Err(), rig.TailFile(outPath, 15)))
		}
		p.mu.Unlock()
		close(ended)
	}()
	return nil
}

func (p *proc) runningLocked() bool {
	if p.cur == nil {
		return false
	}
	select {
	case <-p.ended:
		return false
	default:
		return true
	}
}

// waitEnded reports whether ended is closed within timeout.
func waitEnded(ended <-chan struct{}, timeout time.Duration) bool {
	select {
	case <-ended:
		return true
	case <-time.After(timeout):
		return false
	}
}

// running reports whether the current incarnation is alive.
func (p *proc) running() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.runningLocked()
}

// pid is the current incarnation's pid (0 before the first start).
func (p *proc) pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cur == nil {
		return 0
	}
	return p.cur.Pid()
}

// markKilled records that the test ends the current incarnation and
// returns it and its ended channel, or nil when none runs.
func (p *proc) markKilled() (*rig.Proc, <-chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.runningLocked() {
		return nil, nil
	}
	p.killed = true
	return p.cur, p.ended
}

// kill SIGKILLs the process (not its group: a crash or the OOM killer takes
// the worker, not its guard) and waits until it is reaped.
func (p *proc) kill() error {
	cur, ended := p.markKilled()
	if cur == nil {
		return nil
	}
	_ = cur.Cmd.Process.Signal(syscall.SIGKILL)
	if !waitEnded(ended, 30*time.Second) {
		return fmt.Errorf("%s (pid %d) did not die within 30 s of SIGKILL", p.name, cur.Pid())
	}
	return nil
}

// freeze SIGSTOPs the process (only it: its runs are not its threads and
// go on, as under a GC pause or a swapped-out worker); thaw continues it.
func (p *proc) freeze() bool { return p.signalFrozen(syscall.SIGSTOP, true) }
func (p *proc) thaw() bool   { return p.signalFrozen(syscall.SIGCONT, false) }

func (p *proc) signalFrozen(sig syscall.Signal, frozen bool) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.runningLocked() {
		return false
	}
	p.frozen = frozen
	return p.cur.Cmd.Process.Signal(sig) == nil
}

// destroy kills the whole group of the current incarnation (cleanup).
func (p *proc) destroy() {
	if cur, ended := p.markKilled(); cur != nil {
		cur.KillGroup(30 * time.Second)
		waitEnded(ended, 30*time.Second)
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

type logLine = rig.Line

// logs parses the complete JSON lines of the current incarnation; other
// lines (the guard's, a panic) are skipped.
func (p *proc) logs() []logLine {
	p.mu.Lock()
	path := p.outPath
	p.mu.Unlock()
	return rig.ParseLog(path)
}

// crashes lists the incarnations whose output shows a panic, a Go runtime
// fatal error or a BUG: line.
func (p *proc) crashes() []string {
	var out []string
	for _, f := range p.outputs() {
		b, _ := os.ReadFile(f)
		if s := string(b); rig.Crashed(s) {
			out = append(out, fmt.Sprintf("%s crashed or logged a BUG:\n%s", filepath.Base(f), rig.Tail(s, 30)))
		}
	}
	return out
}

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
