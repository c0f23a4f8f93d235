package cgroup

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/rlsched/rlsched/internal/testkit/testutil"
)

func TestList(t *testing.T) {
	f := func(in string, want []int, out string) {
		t.Helper()
		got, err := ParseList(in)
		if err != nil || !slices.Equal(got, want) {
			t.Fatalf("ParseList(%q) = %v, %v; want %v", in, got, err, want)
		}
		if s := FormatList(got); s != out {
			t.Fatalf("FormatList(%v) = %q, want %q", got, s, out)
		}
	}
	f("", nil, "")
	f("0-3,8", []int{0, 1, 2, 3, 8}, "0-3,8")
	f("5,1,2,3 ,2", []int{1, 2, 3, 5}, "1-3,5")
	f("0-15,32-47", append(seq(0, 15), seq(32, 47)...), "0-15,32-47")
	for _, bad := range []string{"a", "3-1", "-1", "1-", "0-99999999"} {
		if _, err := ParseList(bad); err == nil {
			t.Errorf("ParseList(%q) accepted", bad)
		}
	}
}

func seq(a, b int) []int {
	var out []int
	for i := a; i <= b; i++ {
		out = append(out, i)
	}
	return out
}

// TestCores: whole cores near the GPUs first, never the last shared one,
// given back on release.
func TestCores(t *testing.T) {
	c := cores{all: seq(0, 7), owner: map[int]string{}}
	if got := c.take("a", 2, []int{4, 5, 6, 7}); !slices.Equal(got, []int{4, 5}) {
		t.Fatalf("near cores: %v", got)
	}
	if got := c.take("b", 3, []int{4, 5, 6, 7}); !slices.Equal(got, []int{0, 6, 7}) {
		t.Fatalf("near, then lowest: %v", got)
	}
	if got := c.take("c", 3, nil); got != nil {
		t.Fatalf("took the last shared cores: %v", got)
	}
	if got := c.shared(); !slices.Equal(got, []int{1, 2, 3}) {
		t.Fatalf("shared: %v", got)
	}
	c.give("b")
	if got := c.shared(); !slices.Equal(got, []int{0, 1, 2, 3, 6, 7}) {
		t.Fatalf("shared after give: %v", got)
	}
}

func TestParseHierarchy(t *testing.T) {
	hybrid := `25 1 0:23 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
26 25 0:24 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu,cpuacct
27 25 0:25 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
28 25 0:26 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
`
	h := parseHierarchy([]byte(hybrid), []byte("4:memory:/a/b\n2:cpu,cpuacct:/\n0::/x\n"))
	if h.Version != 1 || h.V1["memory"] != "/sys/fs/cgroup/memory/a/b" || h.V1["cpuacct"] != "/sys/fs/cgroup/cpu" || h.V2 != "/sys/fs/cgroup/unified/x" {
		t.Fatalf("hybrid: %+v", h)
	}
	unified := `30 1 0:27 /ns /sys/fs/cgroup rw - cgroup2 cgroup2 rw,nsdelegate` + "\n"
	h = parseHierarchy([]byte(unified), []byte("0::/ns/system.slice/rlsched-worker.service\n"))
	if h.Version != 2 || h.V2 != "/sys/fs/cgroup/system.slice/rlsched-worker.service" || h.V2Root {
		t.Fatalf("unified: %+v", h)
	}
	h = parseHierarchy([]byte(unified), []byte("0::/ns\n"))
	if !h.V2Root || h.V2 != "/sys/fs/cgroup" {
		t.Fatalf("unified root: %+v", h)
	}
	if h := parseHierarchy(nil, []byte("0::/\n")); h.Version != 0 {
		t.Fatalf("nothing mounted: %+v", h)
	}
}

func TestUsageMessage(t *testing.T) {
	f := func(u Usage, reason, msg string) {
		t.Helper()
		if u.Reason() != reason || u.Message() != msg {
			t.Fatalf("%+v: %q %q, want %q %q", u, u.Reason(), u.Message(), reason, msg)
		}
	}
	f(Usage{}, "", "")
	f(Usage{OOMKills: 1, PeakMemoryMB: 4198, MemoryLimitMB: 4096}, ReasonOOM, "out of memory: used 4.1 GiB of its 4 GiB limit; ask for more with --memory")
	f(Usage{OOMKills: 1, PidsRefused: 3, PeakMemoryMB: -1, MemoryLimitMB: 512}, ReasonOOM, "out of memory: killed at its 512 MiB limit; ask for more with --memory")
	f(Usage{PidsRefused: 2, PidsMax: 64}, ReasonPids, "process limit: the run reached its limit of 64 processes and threads, and a fork failed")
}

// needV1 is a root test of the real v1 hierarchy, which CI has.
func needV1(t *testing.T) {
	t.Helper()
	testutil.NeedRoot(t)
	h, err := Detect()
	if err != nil || h.Version != 1 {
		if os.Getenv("CI") == "true" {
			t.Fatalf("CI runs on cgroup v1: %+v %v", h, err)
		}
		t.Skip("not a cgroup v1 host")
	}
}

func openTest(t *testing.T, o Options) *Manager {
	t.Helper()
	if o.Name == "" {
		o.Name = "test-" + strconv.Itoa(os.Getpid()) + "-" + strings.ReplaceAll(t.Name(), "/", "_")
	}
	if o.Mode == "" {
		o.Mode = Required
	}
	if o.Cores == nil {
		o.Cores = seq(0, runtime.NumCPU()-1)
	}
	o.Log = zerolog.New(zerolog.NewTestWriter(t))
	m, err := Open(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	return m
}

// start starts argv in g from a locked thread, as the worker's spawner does.
func start(t *testing.T, g *Group, argv ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		errc <- g.Start(cmd)
	}()
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	return cmd
}

// TestV1_OutOfMemory: a run over its limit is killed by the kernel, and
// the group's counters say so, with its peak; its neighbour is untouched.
func TestV1_OutOfMemory(t *testing.T) {
	needV1(t)
	m := openTest(t, Options{PidsMax: 256})
	hog, err := m.Create("hog", 1, 1, Limits{MemoryMB: 64})
	if err != nil {
		t.Fatal(err)
	}
	defer hog.Remove()
	calm, err := m.Create("calm", 1, 1, Limits{MemoryMB: 64})
	if err != nil {
		t.Fatal(err)
	}
	defer calm.Remove()
	c1 := start(t, hog, "python3", "-c", "a = bytearray(256 << 20)")
	c2 := start(t, calm, "python3", "-c", "a = bytearray(16 << 20)")
	err1, err2 := c1.Wait(), c2.Wait()
	if ws := c1.ProcessState.Sys().(syscall.WaitStatus); !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("the hog ended %v, want SIGKILL", err1)
	}
	if err2 != nil {
		t.Fatalf("the neighbour: %v", err2)
	}
	if _, err := hog.Kill(time.Second); err != nil {
		t.Fatal(err)
	}
	u := hog.Usage()
	if u.Reason() != ReasonOOM || u.PeakMemoryMB < 60 || u.PeakMemoryMB > 65 {
		t.Fatalf("hog usage %+v: want out_of_memory, peak near 64 MiB", u)
	}
	if !strings.HasPrefix(u.Message(), "out of memory: used ") {
		t.Fatalf("message %q", u.Message())
	}
	if u := calm.Usage(); u.Reason() != "" || u.CPUSeconds <= 0 {
		t.Fatalf("neighbour usage %+v: want no verdict, some CPU seconds", u)
	}
}

// TestV1_EscapedChildDies: a process that left the run's session and
// process group (setsid, a double fork) is killed with the group, which is
// then removed.
func TestV1_EscapedChildDies(t *testing.T) {
	needV1(t)
	m := openTest(t, Options{})
	g, err := m.Create("escape", 1, 1, Limits{})
	if err != nil {
		t.Fatal(err)
	}
	pidFile := filepath.Join(t.TempDir(), "pid")
	c := start(t, g, "sh", "-c", `(setsid sh -c 'echo $$ > `+pidFile+`; exec sleep 600' &) ; sleep 0.1`)
	if err := c.Wait(); err != nil {
		t.Fatal(err)
	}
	var pid int
	testutil.WaitFor(t, 5*time.Second, "the escaped child's pid", func() bool {
		b, _ := os.ReadFile(pidFile)
		pid, _ = strconv.Atoi(strings.TrimSpace(string(b)))
		return pid > 0
	})
	if syscall.Kill(pid, 0) != nil {
		t.Fatal("the escaped child is not running")
	}
	n, err := g.Kill(5 * time.Second)
	if err != nil || n < 1 {
		t.Fatalf("Kill: %d, %v", n, err)
	}
	testutil.WaitFor(t, 5*time.Second, "the escaped child dead", func() bool { return !alive(pid) })
	dir := g.Dir()
	g.Remove()
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("the group %s is still there: %v", dir, err)
	}
}

// alive: pid runs and is not a zombie.
func alive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i > 0 && i+2 < len(s) && s[i+2] != 'Z' && s[i+2] != 'X'
}

// TestV1_PidsLimit: a fork past the limit fails, and the verdict names it.
func TestV1_PidsLimit(t *testing.T) {
	needV1(t)
	m := openTest(t, Options{PidsMax: 8})
	g, err := m.Create("forks", 1, 1, Limits{})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Remove()
	c := start(t, g, "python3", "-c", `
import os, time
kids = []
try:
    for i in range(64):
        p = os.fork()
        if p == 0:
            time.sleep(30); os._exit(0)
        kids.append(p)
except OSError as e:
    print("fork failed after", len(kids), e)
    raise SystemExit(3)
`)
	err = c.Wait()
	if c.ProcessState.ExitCode() != 3 {
		t.Fatalf("the forker ended %v, want exit 3 (a refused fork)", err)
	}
	if _, err := g.Kill(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	if u := g.Usage(); u.Reason() != ReasonPids {
		t.Fatalf("usage %+v, want pids_limit", u)
	}
}

// TestV1_Devices: a run opens its own GPU's node (the driver's answer,
// ENXIO here, where there is none) and gets EPERM from the kernel for the
// other GPU's, made here with mknod.
func TestV1_Devices(t *testing.T) {
	needV1(t)
	m := openTest(t, Options{GPUs: []GPU{{Index: 0, Minor: 0}, {Index: 1, Minor: 1}}})
	g, err := m.Create("dev", 1, 1, Limits{GPUs: []int{0}})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Remove()
	dir := t.TempDir()
	for i := range 2 {
		if err := syscall.Mknod(filepath.Join(dir, "nvidia"+strconv.Itoa(i)), syscall.S_IFCHR|0o666, int(unixMkdev(nvidiaMajor, uint32(i)))); err != nil {
			t.Fatal(err)
		}
	}
	out, _ := startOutput(t, g, "python3", "-c", `
import os, sys
for p in sys.argv[1:]:
    try:
        os.close(os.open(p, os.O_RDONLY)); print("opened")
    except OSError as e:
        print(e.errno)
`, filepath.Join(dir, "nvidia0"), filepath.Join(dir, "nvidia1"))
	lines := strings.Fields(out)
	if len(lines) != 2 || lines[0] == strconv.Itoa(int(syscall.EPERM)) || lines[1] != strconv.Itoa(int(syscall.EPERM)) {
		t.Fatalf("own GPU then other GPU: %q, want not EPERM then EPERM (%d)", out, syscall.EPERM)
	}
}

func startOutput(t *testing.T, g *Group, argv ...string) (string, error) {
	t.Helper()
	var b strings.Builder
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = &b, &b
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		errc <- g.Start(cmd)
	}()
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	err := cmd.Wait()
	return b.String(), err
}

// TestV1_ExclusiveCores: a run asking for whole cores gets them alone; a
// run sharing cores gets the rest, and them all back after.
func TestV1_ExclusiveCores(t *testing.T) {
	needV1(t)
	if runtime.NumCPU() < 2 {
		t.Skip("one core")
	}
	m := openTest(t, Options{Cores: []int{0, 1}})
	shared, err := m.Create("shared", 1, 1, Limits{CPUMillis: 500})
	if err != nil {
		t.Fatal(err)
	}
	defer shared.Remove()
	whole, err := m.Create("whole", 1, 1, Limits{CPUMillis: 1000, Near: []int{1}})
	if err != nil {
		t.Fatal(err)
	}
	if whole.Cores() != "1" {
		t.Fatalf("whole got %q, want core 1 (near its GPU)", whole.Cores())
	}
	// The worker (this test) keeps off the run's core: every thread of it.
	if got := allowed(t); got != "0" {
		t.Fatalf("the worker's threads may run on %q while a run holds core 1 alone, want 0", got)
	}
	if s, _ := read(shared.dirs["cpuset"], "cpuset.cpus"); s != "0" {
		t.Fatalf("shared has %q, want 0", s)
	}
	if q, _ := read(shared.dirs["cpu"], "cpu.cfs_quota_us"); q != "50000" {
		t.Fatalf("quota %q, want 50000", q)
	}
	// The weights the kernel took: 16 processes a core against those
	// outside rlsched.
	for d, want := range map[string]string{shared.dirs["cpu"]: "8192", whole.dirs["cpu"]: "16384", m.parent["cpu"]: "24576"} {
		if w, _ := read(d, "cpu.shares"); w != want {
			t.Fatalf("%s/cpu.shares = %q, want %s", d, w, want)
		}
	}
	whole.Remove()
	if w, _ := read(m.parent["cpu"], "cpu.shares"); w != "8192" {
		t.Fatalf("the parent's cpu.shares after a run's end %q, want 8192", w)
	}
	if s, _ := read(shared.dirs["cpuset"], "cpuset.cpus"); s != "0-1" {
		t.Fatalf("shared has %q after, want 0-1", s)
	}
	if got := allowed(t); got != "0-1" {
		t.Fatalf("the worker's threads may run on %q after the run's end, want 0-1", got)
	}
	// A run forked from the worker's own group is fenced by the run's.
	start(t, shared, "true")
	m.Close()
	if _, err := os.Stat(m.self); !os.IsNotExist(err) {
		t.Fatalf("the worker's own group %s is left after Close: %v", m.self, err)
	}
}

// allowed is the cpu list every thread of this process may run on; it
// fails when they differ.
func allowed(t *testing.T) string {
	t.Helper()
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		t.Fatal(err)
	}
	var first string
	for i, task := range tasks {
		b, err := os.ReadFile(filepath.Join("/proc/self/task", task.Name(), "status"))
		if err != nil {
			continue // the thread exited
		}
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "Cpus_allowed_list:"); ok {
				v = strings.TrimSpace(v)
				if i > 0 && v != first {
					t.Fatalf("thread %s may run on %q, another on %q", task.Name(), v, first)
				}
				first = v
			}
		}
	}
	return first
}

// TestOpen_Sweeps: a group an earlier worker of the same name left is
// killed and removed when the next one opens.
func TestOpen_Sweeps(t *testing.T) {
	needV1(t)
	name := "test-sweep-" + strconv.Itoa(os.Getpid())
	m := openTest(t, Options{Name: name})
	g, err := m.Create("left", 1, 1, Limits{})
	if err != nil {
		t.Fatal(err)
	}
	c := start(t, g, "sleep", "600")
	go c.Wait()
	openTest(t, Options{Name: name})
	testutil.WaitFor(t, 5*time.Second, "the left run dead", func() bool { return !alive(c.Process.Pid) })
	if _, err := os.Stat(g.Dir()); !os.IsNotExist(err) {
		t.Fatalf("the left group is still there: %v", err)
	}
}

func TestOpen_Off(t *testing.T) {
	m, err := Open(Options{Mode: Off})
	if err != nil || m.Kind() != KindNone || !strings.Contains(m.Warning(), "off") {
		t.Fatalf("%v %v", m, err)
	}
	if g, err := m.Create("x", 1, 1, Limits{MemoryMB: 1}); g != nil || err != nil {
		t.Fatalf("off made a group: %v %v", g, err)
	}
}

// TestOpen_RequiredRefuses: without a hierarchy, required names what is
// missing; best-effort runs without and says why.
func TestOpen_RequiredRefuses(t *testing.T) {
	none := &Hierarchy{}
	_, err := Open(Options{Mode: Required, Name: "x", Hierarchy: none})
	if err == nil || !strings.Contains(err.Error(), "RESOURCE_ENFORCEMENT=required") || !strings.Contains(err.Error(), "best-effort") ||
		!strings.Contains(err.Error(), "mount cgroup2") {
		t.Fatalf("required: %v", err)
	}
	m, err := Open(Options{Mode: BestEffort, Name: "x", Hierarchy: none})
	if err != nil || m.Kind() != KindNone || !strings.Contains(m.Warning(), "not limited") {
		t.Fatalf("best-effort: %v %v", m, err)
	}
	v2 := t.TempDir()
	if err := os.WriteFile(filepath.Join(v2, "cgroup.controllers"), []byte("cpu memory"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = Open(Options{Mode: Required, Name: "x", Hierarchy: &Hierarchy{Version: 2, V2: v2}})
	if err == nil || !strings.Contains(err.Error(), "cpuset, pids") || !strings.Contains(err.Error(), "Delegate=yes") {
		t.Fatalf("v2 without delegation: %v", err)
	}
}
