package leaseguard

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/rlsched/rlsched/worker/isolation"
	"github.com/rs/zerolog"
	"golang.org/x/sys/unix"
)

// The guard is a second process that kills what the worker can no longer
// answer for, on two occasions:
//
//   - The worker died. Pdeathsig only reaches a run's direct child; its
//     descendants would outlive a SIGKILLed worker. When the guard reads EOF
//     on its stdin, the worker has exited (the kernel closes the pipe even on
//     SIGKILL), so it SIGKILLs every run still registered and exits.
//   - A run's lease deadline passed: no renewal of it was acked for a whole
//     lease TTL, counted from the renewal's send time, so the master may
//     have given the run to another worker. The guard SIGKILLs the run's
//     group whether or not the worker is responsive (paused by SIGSTOP, a GC
//     pause, swapped out, stuck in a write): the worker's own selfFence is
//     only the second line, as it runs in the process that may be frozen.
//
// The worker re-executes its own binary with RLSCHED_GUARD=1 in a process
// group of its own (a group-wide signal to the worker does not reach it), its
// stdin the read end of a pipe, and writes one line per change:
// "+<pgid> <deadline> [<uid>]" registers a run's group or moves its
// deadline, and "-<pgid>" forgets a group that is gone. Deadlines are
// CLOCK_BOOTTIME nanoseconds (Now), a clock both processes share that
// no wall-clock step moves; 0 means none.
//
// Killing a run is SIGKILL to its process group and, when the line names a
// uid, to every process of that uid (isolation.KillUID): a process that left the
// group (setsid, a double fork) is out of reach of the group's signal, and
// under RUN_AS=dynamic it would keep the uid busy. Only a dynamic uid is
// ever named, which belongs to that one run; the uid of a RUN_AS=user run
// is a person's account, whose other processes are not the run's, so such a
// run is killed by its group alone.

const Env = "RLSCHED_GUARD"

// guardLocksEnv names the worker's uid lock directory (Config.UIDLockDir)
// for the guard: see guardExit.
const guardLocksEnv = "RLSCHED_GUARD_UID_LOCKS"

// guardKeepEnv names the only variables the guard inherits: the Go
// runtime's own knobs. The worker's environment holds the join token and
// other secrets; the guard needs none, and a process that leaks nothing
// cannot be made to leak it.
var guardKeepEnv = map[string]bool{"GORACE": true, "GODEBUG": true, "GOTRACEBACK": true,
	"GOMAXPROCS": true, "GOGC": true, "GOMEMLIMIT": true, "GOCOVERDIR": true}

// guardEnviron is the guard's environment: guardKeepEnv from env, and
// RLSCHED_GUARD=1.
func guardEnviron(env []string) []string {
	var out []string
	for _, kv := range env {
		if k, _, _ := strings.Cut(kv, "="); guardKeepEnv[k] {
			out = append(out, kv)
		}
	}
	return append(out, Env+"=1")
}

// guardPoll bounds how long the guard sleeps between looks at the clock
// while it holds a deadline. poll(2)'s timeout runs on CLOCK_MONOTONIC,
// which stands still while the machine is suspended; deadlines are on
// CLOCK_BOOTTIME, which does not. After a resume, a deadline that passed
// during the suspension is seen within guardPoll: the runs, thawed with the
// guard, execute that long at most.
const guardPoll = 250 * time.Millisecond

// guardIdle is the guard's sleep while it holds no deadline.
const guardIdle = time.Hour

// MaybeServe runs the guard and exits when this process was started as one
// (RLSCHED_GUARD=1); otherwise it returns at once. worker.MaybeGuard calls
// it; so does TestMain of the guard's own tests, whose binary is the guard
// of the guards they start.
func MaybeServe() {
	if os.Getenv(Env) != "1" {
		return
	}
	// Only EOF stops the guard: a Ctrl-C meant for the worker must not take
	// the guard down before the worker's runs are gone.
	signal.Ignore(syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT)
	os.Exit(serveGuard(0, os.Stderr, os.Getenv(guardLocksEnv)))
}

// serveGuard reads registrations from fd and kills groups whose deadline
// passed, until EOF; then it kills every group still registered (locks:
// the uid lock directory, see guardExit).
//
// One loop, on poll(2): it reads whatever the worker has written before it
// looks at the deadlines, so a renewal already in the pipe when the guard
// gets the CPU back (a loaded machine) is never beaten by the kill it
// cancels.
func serveGuard(fd int, errw io.Writer, locks string) int {
	tab := guardTable{}
	buf := make([]byte, 64<<10)
	var partial []byte
	timeout := guardIdle
	for {
		for {
			pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
			n, err := unix.Poll(pfd, int((timeout+time.Millisecond-1)/time.Millisecond))
			if err == unix.EINTR {
				continue
			}
			if err != nil {
				fmt.Fprintf(errw, "rlsched guard: cannot poll the worker's pipe: %v\n", err)
				return guardExit(tab, errw, locks)
			}
			if n == 0 {
				break // timed out: nothing more to read
			}
			k, err := unix.Read(fd, buf)
			if k <= 0 {
				if err == unix.EINTR || err == unix.EAGAIN {
					continue
				}
				return guardExit(tab, errw, locks) // EOF: the worker is gone
			}
			partial = append(partial, buf[:k]...)
			for {
				i := bytes.IndexByte(partial, '\n')
				if i < 0 {
					break
				}
				if err := tab.apply(string(partial[:i])); err != nil {
					fmt.Fprintf(errw, "rlsched guard: %v\n", err)
				}
				partial = partial[i+1:]
			}
			if len(partial) > 1024 {
				fmt.Fprintf(errw, "rlsched guard: ignoring a line of over 1 KiB\n")
				partial = partial[:0]
			}
			timeout = 0 // drain what else is there, then look at the clock
		}
		now := Now()
		for _, e := range tab.expire(now) {
			if err := syscall.Kill(-e.pgid, syscall.SIGKILL); err == nil {
				fmt.Fprintf(errw, "rlsched guard: lease of process group %d expired %v ago with no renewal acked; killed the group (the run may be running elsewhere by now)\n",
					e.pgid, (now - e.deadline).Round(time.Millisecond))
			}
			killRunUID(e.guardEntry, "lease expired", errw)
		}
		timeout = tab.wait(now)
	}
}

// guardExit kills every run still registered: the worker is gone.
//
// A run's dynamic uid is swept only under the uid's lock in locks (the
// worker's Config.UIDLockDir). The dead worker's own lock went with it, so
// another worker may hold the uid by now: it took it finding no process of
// the uid left (uidPool.acquire), so what runs under the uid is its new
// run, which a sweep would kill (nor are its files removed,
// isolation.RemoveLeftovers). A lease deadline's kill needs no lock:
// the worker, alive, still holds the uid of every run it registered.
func guardExit(tab guardTable, errw io.Writer, locks string) int {
	for _, pgid := range tab.all() {
		if err := syscall.Kill(-pgid, syscall.SIGKILL); err == nil {
			fmt.Fprintf(errw, "rlsched guard: worker gone, killed process group %d\n", pgid)
		}
		e := tab[pgid]
		if e.uid == 0 || locks == "" {
			killRunUID(e, "worker gone", errw)
			continue
		}
		l, err := isolation.LockUID(locks, e.uid)
		switch {
		case err != nil: // no worker can take the uid through that lock either
			fmt.Fprintf(errw, "rlsched guard: worker gone: %v; sweeping uid %d without its lock\n", err, e.uid)
		case l == nil:
			fmt.Fprintf(errw, "rlsched guard: worker gone: uid %d is another run's by now; its processes are left to it\n", e.uid)
			continue
		}
		killRunUID(e, "worker gone", errw)
		if l != nil { // and what it left in /tmp, /dev/shm and SysV IPC, as the worker's release would
			if n, err := isolation.RemoveLeftovers(e.uid); err != nil || n > 0 {
				fmt.Fprintf(errw, "rlsched guard: worker gone: removed %d files and SysV IPC objects uid %d left (%v)\n", n, e.uid, err)
			}
		}
		l.Release()
	}
	return 0
}

// guardUIDKill bounds how long the guard spends on one uid's processes (a
// process in uninterruptible sleep dies only when it wakes).
const guardUIDKill = 2 * time.Second

// killRunUID SIGKILLs, after its group, every process of a run's dynamic
// uid (none when it has none), and says so on errw.
func killRunUID(e guardEntry, why string, errw io.Writer) {
	if e.uid == 0 {
		return
	}
	killed, left, err := isolation.KillUID(e.uid, guardUIDKill)
	switch {
	case err != nil:
		fmt.Fprintf(errw, "rlsched guard: %s: cannot kill the processes of uid %d: %v\n", why, e.uid, err)
	case left > 0:
		fmt.Fprintf(errw, "rlsched guard: %s: %d processes of uid %d are left after %v\n", why, left, e.uid, guardUIDKill)
	case killed > 0:
		// Some may be of the group, not dead yet when looked for.
		fmt.Fprintf(errw, "rlsched guard: %s: killed %d processes still running under the run's uid %d\n", why, killed, e.uid)
	}
}

// guardTable is the guard's registry: process group → its run's lease
// deadline and dynamic uid. Owned by serveGuard's goroutine.
type guardTable map[int]guardEntry

// guardEntry is one run: its lease deadline (CLOCK_BOOTTIME; 0: none) and
// its dynamic uid (0: none, the group alone is the run's).
type guardEntry struct {
	deadline time.Duration
	uid      uint32
}

// apply handles one line from the worker.
func (t guardTable) apply(line string) error {
	line = strings.TrimSpace(line)
	if len(line) < 2 {
		return fmt.Errorf("ignoring line %q", line)
	}
	pgidStr, rest, _ := strings.Cut(line[1:], " ")
	pgid, err := strconv.Atoi(pgidStr)
	if err != nil || pgid <= 1 {
		return fmt.Errorf("ignoring line %q: bad process group", line)
	}
	switch line[0] {
	case '+':
		deadlineStr, uidStr, hasUID := strings.Cut(rest, " ")
		d, err := strconv.ParseInt(deadlineStr, 10, 64)
		if err != nil || d < 0 {
			return fmt.Errorf("ignoring line %q: bad deadline", line)
		}
		e := guardEntry{deadline: time.Duration(d)}
		if hasUID {
			uid, err := strconv.ParseUint(uidStr, 10, 32)
			if err != nil || uid == 0 {
				return fmt.Errorf("ignoring line %q: bad uid", line)
			}
			e.uid = uint32(uid)
		}
		t[pgid] = e
	case '-':
		delete(t, pgid)
	default:
		return fmt.Errorf("ignoring line %q", line)
	}
	return nil
}

type expired struct {
	pgid int
	guardEntry
}

// expire removes and returns the runs whose deadline is before now.
func (t guardTable) expire(now time.Duration) []expired {
	var out []expired
	for pgid, e := range t {
		if e.deadline > 0 && e.deadline < now {
			out = append(out, expired{pgid, e})
			delete(t, pgid)
		}
	}
	return out
}

// wait is how long to sleep before the next deadline: at most guardPoll,
// or guardIdle when there is none.
func (t guardTable) wait(now time.Duration) time.Duration {
	w := guardIdle
	for _, e := range t {
		if d := e.deadline; d > 0 {
			w = min(w, guardPoll, max(d-now, 0)+time.Millisecond)
		}
	}
	return w
}

func (t guardTable) all() []int {
	out := make([]int, 0, len(t))
	for pgid := range t {
		out = append(out, pgid)
	}
	sort.Ints(out)
	return out
}

// guard is the worker's record of every run's process group, lease deadline
// and dynamic uid, mirrored to the guard process. Callers change the record under
// mu; one writer goroutine sends the changes, so a guard that stopped
// reading (its pipe full) never blocks a caller, and the deadlines it reads
// when it runs again are the latest. The record is kept even when the guard
// process could not start or is gone: selfFence reads it. Its methods are
// safe for concurrent use; a nil *Guard ignores every call.
type Guard struct {
	w    *os.File  // nil: no guard process
	cmd  *exec.Cmd // nil: no guard process
	log  zerolog.Logger
	wake chan struct{}
	done chan struct{} // closed when the writer returned

	mu    sync.Mutex
	want  map[int]time.Duration // pgid → lease deadline (Now)
	uids  map[int]uint32        // pgid → the run's dynamic uid, for those that have one
	lease time.Duration         // deadline of the last acked renewal: a new run's
	// lapsedSet are the groups whose deadline had passed when a renewal moved
	// it: the guard process, which reads deadlines on its own, may have
	// killed them in between (see lapsed).
	lapsedSet map[int]bool
	closed    bool
	broken    error // the pipe to the guard process failed
	told      bool  // broken was returned once
}

func newGuard(log zerolog.Logger) *Guard {
	return &Guard{log: log, wake: make(chan struct{}, 1), done: make(chan struct{}), want: map[int]time.Duration{}, uids: map[int]uint32{}, lapsedSet: map[int]bool{}}
}

// Start starts the guard process and its writer. On error it still
// returns a guard that keeps the record, without a process behind it.
func Start(log zerolog.Logger, uidLocks string) (*Guard, error) {
	g := newGuard(log)
	err := g.start(uidLocks)
	if err != nil {
		g.told = true // the caller reports err
		g.broken = err
		close(g.done)
		return g, err
	}
	go g.writeLoop()
	return g, nil
}

// start starts the guard process; uidLocks is the uid lock directory of
// RUN_AS=dynamic ("" without).
func (g *Guard) start(uidLocks string) error {
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("cannot find own executable for the guard: %w", err)
	}
	r, w, err := os.Pipe()
	if err != nil {
		return fmt.Errorf("cannot create guard pipe: %w", err)
	}
	cmd := exec.Command(exe)
	cmd.Env = guardEnviron(os.Environ())
	if uidLocks != "" {
		cmd.Env = append(cmd.Env, guardLocksEnv+"="+uidLocks)
	}
	cmd.Stdin = r
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		r.Close()
		w.Close()
		return fmt.Errorf("cannot start guard %s: %w", exe, err)
	}
	r.Close()
	g.w, g.cmd = w, cmd
	return nil
}

// writeLoop sends the guard what changed in want since the last write.
func (g *Guard) writeLoop() {
	defer close(g.done)
	sent := map[int]time.Duration{}
	var buf []byte
	for {
		<-g.wake
		g.mu.Lock()
		buf = buf[:0]
		for pgid := range sent {
			if _, ok := g.want[pgid]; !ok {
				buf = fmt.Appendf(buf, "-%d\n", pgid)
				delete(sent, pgid)
			}
		}
		for pgid, d := range g.want {
			if old, ok := sent[pgid]; !ok || old != d {
				if uid := g.uids[pgid]; uid != 0 {
					buf = fmt.Appendf(buf, "+%d %d %d\n", pgid, d, uid)
				} else {
					buf = fmt.Appendf(buf, "+%d %d\n", pgid, d)
				}
				sent[pgid] = d
			}
		}
		closed := g.closed
		g.mu.Unlock()
		if len(buf) > 0 {
			if _, err := g.w.Write(buf); err != nil {
				g.mu.Lock()
				g.broken = fmt.Errorf("cannot reach the guard process; runs may outlive a crashed or frozen worker: %w", err)
				g.mu.Unlock()
				return
			}
		}
		if closed {
			return
		}
	}
}

func (g *Guard) pokeLocked() {
	select {
	case g.wake <- struct{}{}:
	default:
	}
}

// add registers a run's process group with the deadline of the last acked
// renewal: the master claimed the run before it sent it, and renews it with
// the first heartbeat that lists it. uid is the run's dynamic uid (guardUID),
// whose every process the guard kills with the group; 0 for none. It returns
// an error when no guard process will kill the run.
func (g *Guard) Add(pgid int, uid uint32) error {
	if g == nil {
		return nil
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if _, ok := g.want[pgid]; !ok {
		g.want[pgid] = g.lease
		if uid != 0 {
			g.uids[pgid] = uid
		}
	}
	g.pokeLocked()
	return g.errLocked()
}

// errLocked returns the pipe's failure the first time it is asked.
func (g *Guard) errLocked() error {
	if g.broken == nil || g.told {
		return nil
	}
	g.told = true
	return g.broken
}

// remove forgets a process group that is gone.
func (g *Guard) Remove(pgid int) error {
	if g == nil {
		return nil
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	delete(g.want, pgid)
	delete(g.uids, pgid)
	delete(g.lapsedSet, pgid)
	g.pokeLocked()
	return g.errLocked()
}

// renew moves the deadline of the groups a renewal acked to deadline, which
// also becomes the deadline of runs registered from now on.
func (g *Guard) Renew(deadline time.Duration, pgids []int) {
	if g == nil {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.lease = max(g.lease, deadline)
	now := Now()
	for _, pgid := range pgids {
		if d, ok := g.want[pgid]; ok && deadline > d {
			if d > 0 && now > d {
				g.lapsedSet[pgid] = true
			}
			g.want[pgid] = deadline
		}
	}
	g.pokeLocked()
}

// deadline returns the lease deadline of a registered group.
func (g *Guard) Deadline(pgid int) (time.Duration, bool) {
	if g == nil {
		return 0, false
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	d, ok := g.want[pgid]
	return d, ok
}

// lapsed reports whether a renewal moved the group's deadline only after
// it had passed: a run of that group killed by SIGKILL may have been
// killed by the guard for its lease, though its deadline is in the future
// now.
func (g *Guard) Lapsed(pgid int) bool {
	if g == nil {
		return false
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.lapsedSet[pgid]
}

// guardCloseWait bounds how long close waits for a guard that does not
// read (stopped by a signal): the worker's exit does not depend on it.
const guardCloseWait = 5 * time.Second

// close ends the guard (it kills whatever is still registered) and reaps it.
func (g *Guard) Close() {
	if g == nil {
		return
	}
	g.mu.Lock()
	g.closed = true
	g.pokeLocked()
	g.mu.Unlock()
	select {
	case <-g.done: // the last changes are written
	case <-time.After(guardCloseWait):
	}
	if g.w != nil {
		g.w.Close() // EOF for the guard; also ends a write to a guard that stopped reading
	}
	<-g.done
	if g.cmd == nil {
		return
	}
	exited := make(chan struct{})
	go func() { _ = g.cmd.Wait(); close(exited) }()
	select {
	case <-exited:
	case <-time.After(guardCloseWait):
		g.log.Warn().Int("pid", g.cmd.Process.Pid).
			Msg("the guard process did not exit (stopped?); it kills what is left once it runs again")
	}
}
