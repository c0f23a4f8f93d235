package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// env is one invocation of the harness: the module root, a temporary
// directory, the built master binary and every process started, so that
// nothing outlives a scenario.
type env struct {
	root    string // module root (holds go.mod)
	tmp     string
	quick   bool
	profDir string
	keep    bool
	began   time.Time

	binMu sync.Mutex
	bin   string

	mu     sync.Mutex
	procs  []*exec.Cmd
	nextIP int
}

func newEnv(quick bool, profDir string, keep bool) (*env, error) {
	root, err := moduleRoot()
	if err != nil {
		return nil, err
	}
	tmp, err := os.MkdirTemp("", "rlsched-bench-")
	if err != nil {
		return nil, fmt.Errorf("cannot create a temporary directory: %w", err)
	}
	if profDir != "" {
		if profDir, err = filepath.Abs(profDir); err == nil {
			err = os.MkdirAll(profDir, 0o755)
		}
		if err != nil {
			return nil, fmt.Errorf("cannot create the profile directory: %w", err)
		}
	}
	return &env{root: root, tmp: tmp, quick: quick, profDir: profDir, keep: keep, began: time.Now()}, nil
}

func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if b, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil &&
			bytes.Contains(b, []byte("module github.com/rlsched/rlsched\n")) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("run the harness inside the rlsched module (go run ./bench)")
		}
		dir = parent
	}
}

func (e *env) sizeName() string {
	if e.quick {
		return "quick"
	}
	return "full"
}

// pick returns quick or full depending on the mode.
func pick[T any](e *env, quick, full T) T {
	if e.quick {
		return quick
	}
	return full
}

func (e *env) logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "%6.1fs  %s\n", time.Since(e.began).Seconds(), fmt.Sprintf(format, args...))
}

// dir returns a new directory under the temporary one. onTmpfs puts it under
// /dev/shm instead (fsync is free there), when that exists.
func (e *env) dir(name string, onTmpfs bool) (string, error) {
	base := e.tmp
	if onTmpfs {
		if st, err := os.Stat("/dev/shm"); err != nil || !st.IsDir() {
			return "", errors.New("no /dev/shm for a tmpfs data directory")
		}
		base = filepath.Join("/dev/shm", filepath.Base(e.tmp))
	}
	d, err := os.MkdirTemp(base, name+"-")
	if errors.Is(err, os.ErrNotExist) {
		if err = os.MkdirAll(base, 0o755); err == nil {
			d, err = os.MkdirTemp(base, name+"-")
		}
	}
	return d, err
}

// rlschedBin builds ./cmd/rlsched once per invocation (with the pprof
// overlay when -profile is set) and returns its path. The working tree is
// shared with people editing it, so a failed build is retried for a while
// before the error is reported.
func (e *env) rlschedBin() (string, error) {
	e.binMu.Lock()
	defer e.binMu.Unlock()
	if e.bin != "" {
		return e.bin, nil
	}
	if b := os.Getenv("RLSCHED_BENCH_BIN"); b != "" && e.profDir == "" {
		// A binary built beforehand: before/after runs of one sitting
		// alternate two builds without rebuilding (ABBA).
		e.bin = b
		return b, nil
	}
	out := filepath.Join(e.tmp, "rlsched")
	args := []string{"build", "-o", out}
	if e.profDir != "" {
		ov, err := e.writeOverlay()
		if err != nil {
			return "", err
		}
		args = append(args, "-overlay", ov)
	}
	args = append(args, "./cmd/rlsched")
	var err error
	for try := 1; try <= 8; try++ {
		e.logf("go %s", strings.Join(args, " "))
		cmd := exec.Command("go", args...)
		cmd.Dir = e.root
		b, berr := cmd.CombinedOutput()
		if berr == nil {
			e.bin = out
			return out, nil
		}
		err = fmt.Errorf("cannot build rlsched: %v\n%s", berr, b)
		e.logf("build failed (try %d of 8; the tree may be mid-edit), retrying in 20 s: %s", try, firstLine(string(b)))
		time.Sleep(20 * time.Second)
	}
	return "", err
}

// writeOverlay writes the go build -overlay file that adds bench/overlay's
// profiling hook to package main of cmd/rlsched, without touching cmd/.
func (e *env) writeOverlay() (string, error) {
	src := filepath.Join(e.root, "bench", "overlay", "benchprof.go.txt")
	if _, err := os.Stat(src); err != nil {
		return "", fmt.Errorf("cannot find the profiling overlay: %w", err)
	}
	dst := filepath.Join(e.root, "cmd", "rlsched", "zz_benchprof.go")
	ov := filepath.Join(e.tmp, "overlay.json")
	b := fmt.Sprintf(`{"Replace": {%q: %q}}`, dst, src)
	return ov, os.WriteFile(ov, []byte(b), 0o644)
}

// start runs cmd and remembers it for cleanup.
func (e *env) start(cmd *exec.Cmd) error {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return err
	}
	e.mu.Lock()
	e.procs = append(e.procs, cmd)
	e.mu.Unlock()
	return nil
}

// cleanup kills every process a scenario left running.
func (e *env) cleanup() {
	e.mu.Lock()
	procs := e.procs
	e.procs = nil
	e.mu.Unlock()
	for _, p := range procs {
		if p.ProcessState == nil && p.Process != nil {
			_ = p.Process.Signal(syscall.SIGKILL)
			_ = p.Wait()
		}
	}
	if shm := filepath.Join("/dev/shm", filepath.Base(e.tmp)); !e.keep {
		_ = os.RemoveAll(shm)
	}
}

func (e *env) close() {
	e.cleanup()
	if e.keep {
		e.logf("kept %s", e.tmp)
		return
	}
	_ = os.RemoveAll(e.tmp)
}

// localIP hands out loopback source addresses 127.0.0.2, .3, ... so the
// connections of each helper process have an ephemeral port range of their own.
func (e *env) localIP() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	ip := fmt.Sprintf("127.0.0.%d", 2+e.nextIP%250)
	e.nextIP++
	return ip
}

// freePort returns a TCP port that was free a moment ago.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// procCPU returns the user and system CPU time of pid from /proc/pid/stat.
func procCPU(pid int) (user, sys time.Duration, err error) {
	t, err := procStatTimes(pid)
	return t[0], t[1], err
}

// procTreeCPU is the CPU time of pid and of its children it has reaped.
func procTreeCPU(pid int) (time.Duration, error) {
	t, err := procStatTimes(pid)
	return t[0] + t[1] + t[2] + t[3], err
}

// procStatTimes reads utime, stime, cutime and cstime of /proc/pid/stat.
func procStatTimes(pid int) (times [4]time.Duration, err error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return times, err
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return times, fmt.Errorf("cannot parse /proc/%d/stat", pid)
	}
	f := strings.Fields(s[i+1:])
	// Fields after the command: state(3) ... utime(14) stime(15) cutime(16)
	// cstime(17); f[0] is field 3.
	if len(f) < 15 {
		return times, fmt.Errorf("short /proc/%d/stat", pid)
	}
	const clkTck = 100 // USER_HZ on Linux
	for k := range times {
		v, err := strconv.ParseInt(f[11+k], 10, 64)
		if err != nil {
			return times, fmt.Errorf("cannot parse /proc/%d/stat times", pid)
		}
		times[k] = time.Duration(v) * time.Second / clkTck
	}
	return times, nil
}

// procMem returns the resident set and its peak (VmRSS, VmHWM) in bytes.
func procMem(pid int) (rss, hwm int64, err error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		var p *int64
		switch {
		case strings.HasPrefix(line, "VmRSS:"):
			p = &rss
		case strings.HasPrefix(line, "VmHWM:"):
			p = &hwm
		default:
			continue
		}
		fs := strings.Fields(line)
		if len(fs) >= 2 {
			kb, _ := strconv.ParseInt(fs[1], 10, 64)
			*p = kb << 10
		}
	}
	return rss, hwm, sc.Err()
}

// procRuntime sums the on-CPU nanoseconds of every thread of pid from
// /proc/PID/task/*/schedstat: far finer than the 10 ms ticks of
// /proc/PID/stat (threads that exited are missed; Go rarely ends threads).
func procRuntime(pid int) (time.Duration, bool) {
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		return 0, false
	}
	var total int64
	for _, t := range tasks {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/schedstat", pid, t.Name()))
		if err != nil {
			continue
		}
		if fs := strings.Fields(string(b)); len(fs) > 0 {
			n, _ := strconv.ParseInt(fs[0], 10, 64)
			total += n
		}
	}
	return time.Duration(total), true
}

// procSample is the CPU time of a process at one moment.
type procSample struct {
	at        time.Time
	user, sys time.Duration // ticks of /proc/PID/stat
	run       time.Duration // nanoseconds of schedstat, when available
	precise   bool
}

func sample(pid int) procSample {
	u, s, _ := procCPU(pid)
	run, ok := procRuntime(pid)
	return procSample{at: time.Now(), user: u, sys: s, run: run, precise: ok}
}

// cpuTo is the CPU time used between a and b.
func (a procSample) cpuTo(b procSample) time.Duration {
	if a.precise && b.precise && b.run >= a.run {
		return b.run - a.run
	}
	return (b.user - a.user) + (b.sys - a.sys)
}

// machine describes the host for BENCHMARKS.md.
type machine struct {
	CPU, Kernel, GoVersion string
	Cores                  int
	RAM                    int64
	FDLimit                uint64
	PortRange              string
}

func describeMachine() machine {
	m := machine{Cores: runtime.NumCPU(), GoVersion: runtime.Version(), CPU: "unknown"}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(line, "model name") {
				if i := strings.IndexByte(line, ':'); i > 0 {
					m.CPU = strings.TrimSpace(line[i+1:])
					break
				}
			}
		}
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(line, "MemTotal:") {
				fs := strings.Fields(line)
				if len(fs) >= 2 {
					kb, _ := strconv.ParseInt(fs[1], 10, 64)
					m.RAM = kb << 10
				}
			}
		}
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(b))
	}
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		m.PortRange = strings.Join(strings.Fields(string(b)), "–")
	}
	var rl syscall.Rlimit
	if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl) == nil {
		m.FDLimit = rl.Cur
	}
	if out, err := exec.Command("go", "env", "GOVERSION").Output(); err == nil {
		m.GoVersion = strings.TrimSpace(string(out))
	}
	return m
}
