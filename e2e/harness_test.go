package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/rlsched/rlsched/internal/testkit/e2eutil"
	"github.com/rlsched/rlsched/internal/testkit/testutil"
)

// Short TTLs so that leases expire within seconds (see cmd/rlsched/master.go).
const (
	hbTTLSeconds       = 3 // workers beat every second
	taskTTLSeconds     = 4
	cancelGraceSeconds = 2
	password           = "a-long-password"
)

// eventually is testutil.Eventually.
var eventually = testutil.Eventually

// bed is one test's world: a directory, secrets, the processes it started
// and the runs it submitted. Everything is killed when the test ends.
type bed struct {
	t         *testing.T
	dir       string
	jwtSecret string
	joinToken string

	mu    sync.Mutex
	procs []*proc
	tasks []string
	n     int
}

// newBed skips under -short, marks the test parallel and prepares its world.
func newBed(t *testing.T) *bed {
	t.Helper()
	if testing.Short() {
		t.Skip("end-to-end test: skipped with -short")
	}
	if rlschedBin == "" {
		t.Skip("end-to-end tests need Linux and the rlsched binary")
	}
	t.Parallel()
	// Runs under uids of their own (a worker run as root) must reach the
	// workers' data dirs in here.
	b := &bed{t: t, dir: testutil.ReachableTempDir(t), jwtSecret: "e2e-jwt-" + randHex(16), joinToken: "join-" + randHex(16)}
	t.Cleanup(b.cleanup)
	return b
}

func randHex(n int) string {
	buf := make([]byte, n)
	_, _ = rand.Read(buf)
	return hex.EncodeToString(buf)
}

// env is the environment of a server process: the test's own, minus every
// setting rlsched reads, plus JSON logs and short TTLs.
func (b *bed) env(extra ...string) []string {
	return e2eutil.ServerEnv([]string{"ARTIFACT_"}, append([]string{
		"WORKER_HB_TTL_SECONDS=" + strconv.Itoa(hbTTLSeconds),
		"WORKER_TASK_TTL_SECONDS=" + strconv.Itoa(taskTTLSeconds),
		"RLSCHED_CANCEL_GRACE_SECONDS=" + strconv.Itoa(cancelGraceSeconds)}, extra...)...)
}

// proc is a started rlsched process. Its stdout and stderr go to files (so
// no pipe keeps Wait waiting on a grandchild such as the worker's guard).
type proc struct {
	name      string
	cmd       *exec.Cmd
	outPath   string
	errPath   string
	done      chan struct{}
	waitErr   error
	startedAt time.Time
}

// start runs the binary with args; name labels its output files.
func (b *bed) start(name string, env []string, args ...string) *proc {
	b.t.Helper()
	b.mu.Lock()
	b.n++
	base := filepath.Join(b.dir, fmt.Sprintf("%02d-%s", b.n, name))
	b.mu.Unlock()
	p := &proc{name: name, outPath: base + ".stdout", errPath: base + ".stderr", done: make(chan struct{})}
	out, err := os.Create(p.outPath)
	if err != nil {
		b.t.Fatal(err)
	}
	defer out.Close()
	errf, err := os.Create(p.errPath)
	if err != nil {
		b.t.Fatal(err)
	}
	defer errf.Close()
	p.cmd = exec.Command(rlschedBin, args...)
	p.cmd.Env = env
	p.cmd.Dir = b.dir
	p.cmd.Stdout, p.cmd.Stderr = out, errf
	// Own group (so a leftover can be killed as a group); dies with the test.
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		b.t.Fatalf("cannot start rlsched %s: %v", strings.Join(args, " "), err)
	}
	p.startedAt = time.Now()
	go func() { p.waitErr = p.cmd.Wait(); close(p.done) }()
	b.mu.Lock()
	b.procs = append(b.procs, p)
	b.mu.Unlock()
	return p
}

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// kill SIGKILLs the process (the way a crash or the OOM killer would) and
// waits until it is reaped.
func (p *proc) kill(t testing.TB) {
	t.Helper()
	if p.exited() {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		t.Fatalf("%s (pid %d) did not die within 10 s of SIGKILL", p.name, p.cmd.Process.Pid)
	}
}

func (p *proc) stderr() string {
	b, _ := os.ReadFile(p.errPath)
	return string(b)
}

func (p *proc) stdout() string {
	b, _ := os.ReadFile(p.outPath)
	return string(b)
}

// logLine is one JSON log line of a process (LOG_FORMAT=json).
type logLine map[string]any

func (l logLine) str(k string) string { return e2eutil.Str(l, k) }

func (l logLine) msg() string { return l.str("message") }

func (l logLine) String() string {
	b, _ := json.Marshal(map[string]any(l))
	return string(b)
}

// logs parses the complete JSON lines written to stderr so far; other lines
// (the guard's messages, a panic) are skipped.
func (p *proc) logs() []logLine {
	var out []logLine
	for _, l := range e2eutil.ParseLog(p.errPath) {
		out = append(out, l)
	}
	return out
}

// findLog returns the first log line matching match, if any.
func (p *proc) findLog(match func(logLine) bool) (logLine, bool) {
	for _, l := range p.logs() {
		if match(l) {
			return l, true
		}
	}
	return nil, false
}

// waitLog waits for a log line matching match; it fails at once when the
// process exits first.
func (p *proc) waitLog(t testing.TB, timeout time.Duration, what string, match func(logLine) bool) logLine {
	t.Helper()
	var found logLine
	eventually(t, timeout, func() (bool, string) {
		if l, ok := p.findLog(match); ok {
			found = l
			return true, ""
		}
		if p.exited() {
			t.Fatalf("%s exited (%v) before logging %s; stderr:\n%s", p.name, p.waitErr, what, tail(p.stderr(), 40))
		}
		return false, fmt.Sprintf("%s never logged %s", p.name, what)
	})
	return found
}

// tail is e2eutil.Tail.
var tail = e2eutil.Tail

// master is a started `rlsched master` (or `up`) with its addresses.
type master struct {
	*proc
	url string // http://127.0.0.1:port
	rpc string // 127.0.0.1:port
}

// startMaster runs `rlsched master` on dataDir; port 0 picks a free one.
// Its tests register their users (a standalone master's default is
// REGISTRATION=closed).
func (b *bed) startMaster(name, dataDir string, httpPort, rpcPort int, extraEnv ...string) *master {
	b.t.Helper()
	env := b.env(append([]string{"JWT_SECRET=" + b.jwtSecret, "WORKER_JOIN_TOKEN=" + b.joinToken, "REGISTRATION=open"}, extraEnv...)...)
	p := b.start(name, env, "master", "--data-dir", dataDir, "--bind", "127.0.0.1",
		"--master-port", strconv.Itoa(httpPort), "--rpc-port", strconv.Itoa(rpcPort))
	return b.awaitMaster(p)
}

// awaitMaster reads the addresses from the "master started" log line.
func (b *bed) awaitMaster(p *proc) *master {
	b.t.Helper()
	l := p.waitLog(b.t, 30*time.Second, `"master started"`, func(l logLine) bool { return l.msg() == "master started" })
	m := &master{proc: p, url: l.str("url"), rpc: l.str("rpc")}
	if !strings.HasPrefix(m.url, "http://") || m.rpc == "" {
		b.t.Fatalf("%s: master started without url/rpc: %v", p.name, l)
	}
	return m
}

// startWorker runs `rlsched worker` with its own data dir under the bed.
func (b *bed) startWorker(name, rpc, id, token string) *proc {
	b.t.Helper()
	dataDir := filepath.Join(b.dir, "worker-"+id)
	env := b.env("WORKER_JOIN_TOKEN=" + token)
	return b.start(name, env, "worker", "--master", rpc, "--id", id, "--slots", "2", "--gpus", "0", "--data-dir", dataDir)
}

// waitJoined waits for m to log that worker id joined; it returns the line.
func (m *master) waitJoined(t testing.TB, id string) logLine {
	t.Helper()
	return m.waitLog(t, 30*time.Second, "worker "+id+" joined", func(l logLine) bool {
		return l.msg() == "worker joined" && l.str("worker") == id
	})
}

// track remembers a submitted run so its processes are killed at the end.
func (b *bed) track(taskID string) {
	b.mu.Lock()
	b.tasks = append(b.tasks, taskID)
	b.mu.Unlock()
}

func (b *bed) cleanup() {
	t := b.t
	b.mu.Lock()
	procs := append([]*proc(nil), b.procs...)
	tasks := append([]string(nil), b.tasks...)
	b.mu.Unlock()
	for _, p := range procs {
		if s := p.stderr(); strings.Contains(s, "panic: ") || strings.Contains(s, `"message":"BUG:`) ||
			strings.Contains(s, "fatal error: ") {
			t.Errorf("%s crashed or logged a BUG:\n%s", p.name, tail(s, 60))
		}
	}
	for i := len(procs) - 1; i >= 0; i-- {
		p := procs[i]
		if !p.exited() {
			_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
			_ = p.cmd.Process.Signal(syscall.SIGKILL)
			select {
			case <-p.done:
			case <-time.After(10 * time.Second):
				t.Errorf("%s (pid %d) survived SIGKILL", p.name, p.cmd.Process.Pid)
			}
		}
	}
	// Runs are killed by the worker's guard once the worker is gone; give it
	// a moment, then kill what is left of the groups of this test's runs.
	deadline := time.Now().Add(5 * time.Second)
	for _, id := range tasks {
		for _, rp := range runProcs(id) {
			for time.Now().Before(deadline) && !groupGone(rp.pgid) {
				time.Sleep(50 * time.Millisecond)
			}
			if !groupGone(rp.pgid) && rp.pgid > 1 && rp.pgid != syscall.Getpgrp() {
				t.Logf("killing leftover process group %d of run %s", rp.pgid, id)
				_ = syscall.Kill(-rp.pgid, syscall.SIGKILL)
			}
		}
	}
	if t.Failed() {
		for _, p := range procs {
			t.Logf("---- %s (pid %d, %v) stderr, last lines:\n%s", p.name, p.cmd.Process.Pid, p.waitErr, tail(p.stderr(), 80))
		}
	}
}

// freePort returns a TCP port that was free a moment ago.
func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// runProc is a process of a run, found by RLSCHED_TASK_ID in its environment.
type runProc struct {
	pid, pgid int
	state     byte
}

// runProcs lists the live (non-zombie) processes whose environment holds
// RLSCHED_TASK_ID=taskID: the worker gives every run that variable.
func runProcs(taskID string) []runProc {
	want := []byte("RLSCHED_TASK_ID=" + taskID)
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var out []runProc
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		env, err := os.ReadFile(filepath.Join("/proc", e.Name(), "environ"))
		if err != nil {
			continue
		}
		found := false
		for _, kv := range bytes.Split(env, []byte{0}) {
			if bytes.Equal(kv, want) {
				found = true
				break
			}
		}
		if !found {
			continue
		}
		st, ok := procStat(pid)
		if !ok || st.state == 'Z' {
			continue
		}
		out = append(out, st)
	}
	return out
}

// procStat reads state and process group of pid from /proc/pid/stat.
func procStat(pid int) (runProc, bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return runProc{}, false
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return runProc{}, false
	}
	f := strings.Fields(string(b[i+1:])) // state ppid pgrp ...
	if len(f) < 3 || len(f[0]) != 1 {
		return runProc{}, false
	}
	pgid, err := strconv.Atoi(f[2])
	if err != nil {
		return runProc{}, false
	}
	return runProc{pid: pid, pgid: pgid, state: f[0][0]}, true
}

// groupGone reports whether process group pgid has no live member:
// kill(-pgid, 0) fails with ESRCH, or only zombies are left (PID 1 of a
// container may never reap orphans).
func groupGone(pgid int) bool {
	if err := syscall.Kill(-pgid, 0); errors.Is(err, syscall.ESRCH) {
		return true
	}
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return false
	}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if st, ok := procStat(pid); ok && st.pgid == pgid && st.state != 'Z' {
			return false
		}
	}
	return true
}

// waitRunProcs waits until at least n live processes of the run exist and
// returns them; they all must share one process group of their own.
func waitRunProcs(t testing.TB, taskID string, n int, timeout time.Duration) []runProc {
	t.Helper()
	var ps []runProc
	eventually(t, timeout, func() (bool, string) {
		ps = runProcs(taskID)
		return len(ps) >= n, fmt.Sprintf("%d process(es) with RLSCHED_TASK_ID=%s, want ≥ %d", len(ps), taskID, n)
	})
	pgid := ps[0].pgid
	for _, p := range ps {
		if p.pgid != pgid {
			t.Fatalf("run %s has processes in groups %d and %d; want one group", taskID, pgid, p.pgid)
		}
	}
	if pgid == syscall.Getpgrp() || pgid <= 1 {
		t.Fatalf("run %s is in process group %d, not a group of its own", taskID, pgid)
	}
	return ps
}

// cli runs a client subcommand of the binary, the way a user would.
func (b *bed) cli(configDir string, args ...string) (string, int) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, rlschedBin, args...)
	cmd.Env = append(b.env(), "RLSCHED_CONFIG_DIR="+configDir)
	cmd.Dir = b.dir
	out, err := cmd.CombinedOutput()
	code := 0
	if err != nil {
		var ee *exec.ExitError
		if !errors.As(err, &ee) {
			b.t.Fatalf("rlsched %s: %v", strings.Join(args, " "), err)
		}
		code = ee.ExitCode()
	}
	return string(out), code
}
