package worker

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/proto"

	"github.com/rlsched/rlsched/codec/pb"
	"github.com/rlsched/rlsched/internal/testkit/fakesmi"
	"github.com/rlsched/rlsched/internal/testkit/testutil"
	"github.com/rlsched/rlsched/worker/cgroup"
)

// needCgroupV1 is a root test of the real v1 hierarchy, which CI has.
func needCgroupV1(t *testing.T) {
	t.Helper()
	testutil.NeedRoot(t)
	if h, err := cgroup.Detect(); err != nil || h.Version != 1 {
		if os.Getenv("CI") == "true" {
			t.Fatalf("CI runs on cgroup v1: %+v %v", h, err)
		}
		t.Skip("not a cgroup v1 host")
	}
}

// TestResources_Hello: a worker with control groups says so, with the
// cores and memory it offers and each GPU's cores.
func TestResources_Hello(t *testing.T) {
	needCgroupV1(t)
	m := newFakeMaster(t, testToken)
	startWorker(t, m, func(c *Config) {
		c.GPUs[1].CPUAffinity = "0"
		c.ReservedMemoryMB = 1000
	})
	h := m.next(t).hello
	want := memTotalMB() - 1000
	if h.GetEnforcement() != cgroup.KindV1 || h.GetEnforcementWarning() != "" || h.GetCpuMillis() != int64(len(affinity()))*1000 ||
		h.GetMemoryMb() != want || h.GetGpus()[1].GetCpuAffinity() != "0" {
		t.Fatalf("Hello: enforcement %q %q, cpu_millis %d, memory_mb %d (want %d), gpus %v", h.GetEnforcement(), h.GetEnforcementWarning(),
			h.GetCpuMillis(), h.GetMemoryMb(), want, h.GetGpus())
	}
}

// TestResources_Off: RESOURCE_ENFORCEMENT=off runs without a group and
// says so in Hello; the run's usage is not reported.
func TestResources_Off(t *testing.T) {
	m := newFakeMaster(t, testToken)
	startWorker(t, m, func(c *Config) { c.ResourceEnforcement = cgroup.Off; c.RunAs = RunAsNone })
	mc := m.next(t)
	if h := mc.hello; h.GetEnforcement() != cgroup.KindNone || !strings.Contains(h.GetEnforcementWarning(), "RESOURCE_ENFORCEMENT=off") {
		t.Fatalf("Hello: %q %q", h.GetEnforcement(), h.GetEnforcementWarning())
	}
	fin, out := runToEnd(t, m, mc, &pb.ExecuteTask{TaskId: "t-off", Attempt: 1, MemoryMb: 16, CpuMillis: 500,
		Argv: []string{"sh", "-c", "echo ok"}})
	if fin.GetExitCode() != 0 || out != "ok\n" || fin.GetReason() != "" || fin.GetPeakMemoryMb() != 0 {
		t.Fatalf("run: %v %q", fin, out)
	}
}

// TestResources_OutOfMemory: a run over its memory limit ends with the
// out-of-memory verdict, its peak and a warning as its log's last line,
// while its neighbour on the same worker finishes.
func TestResources_OutOfMemory(t *testing.T) {
	needCgroupV1(t)
	m := newFakeMaster(t, testToken)
	startWorker(t, m, nil)
	mc := m.next(t)
	mc.send(&pb.ExecuteTask{TaskId: "t-hog", Attempt: 1, Fence: 1, MemoryMb: 64,
		Argv: []string{"python3", "-c", "print('allocating', flush=True); a = bytearray(512 << 20)"}})
	mc.send(&pb.ExecuteTask{TaskId: "t-calm", Attempt: 1, Fence: 1, MemoryMb: 64, CpuMillis: 1000,
		Argv: []string{"python3", "-c", "a = bytearray(16 << 20); sum(range(3000000)); print('done')"}})
	fins := map[string]*pb.TaskFinished{}
	for len(fins) < 2 { // in either order: expect drops what it does not match
		f := mc.expect(t, 20*time.Second, "TaskFinished", func(m proto.Message) bool { _, ok := m.(*pb.TaskFinished); return ok }).(*pb.TaskFinished)
		fins[f.GetTaskId()] = f
	}
	hog, calm := fins["t-hog"], fins["t-calm"]
	if hog.GetSignal() != "SIGKILL" || hog.GetReason() != cgroup.ReasonOOM || hog.GetPeakMemoryMb() < 60 || hog.GetPeakMemoryMb() > 65 ||
		!strings.HasPrefix(hog.GetError(), "out of memory: used ") || !strings.HasSuffix(hog.GetError(), "of its 64 MiB limit; ask for more with --memory") {
		t.Fatalf("the hog: %v", hog)
	}
	lines := strings.Split(strings.TrimRight(m.log("t-hog", 1), "\n"), "\n")
	if last := lines[len(lines)-1]; last != "[rlsched] warning: "+hog.GetError() {
		t.Fatalf("the hog's log ends %q", last)
	}
	if calm.GetExitCode() != 0 || calm.GetReason() != "" || calm.GetCpuSeconds() <= 0 || calm.GetPeakMemoryMb() < 16 ||
		m.log("t-calm", 1) != "done\n" {
		t.Fatalf("the neighbour: %v %q", calm, m.log("t-calm", 1))
	}
}

// TestResources_PidsLimit: a run that forks past its limit is told why.
func TestResources_PidsLimit(t *testing.T) {
	needCgroupV1(t)
	m := newFakeMaster(t, testToken)
	startWorker(t, m, func(c *Config) { c.PidsMax = 16 })
	mc := m.next(t)
	fin, out := runToEnd(t, m, mc, &pb.ExecuteTask{TaskId: "t-forks", Attempt: 1, Argv: []string{"python3", "-c", `
import os, time
for i in range(1000):
    if os.fork() == 0:
        time.sleep(60); os._exit(0)
`}})
	if fin.GetExitCode() == 0 || fin.GetReason() != cgroup.ReasonPids || !strings.Contains(out, "[rlsched] warning: process limit") {
		t.Fatalf("the fork bomb: %v\n%s", fin, out)
	}
}

// TestResources_GPUDeviceWall: a run can open its own GPU's node and gets
// EPERM from the kernel for the other run's, nodes of major 195 made here
// with mknod (where there is no driver, its own answers ENXIO).
func TestResources_GPUDeviceWall(t *testing.T) {
	needCgroupV1(t)
	m := newFakeMaster(t, testToken)
	startWorker(t, m, func(c *Config) { c.RunAs = RunAsNone })
	mc := m.next(t)
	dir := testutil.ReachableTempDir(t)
	for i := range 2 {
		if err := syscall.Mknod(filepath.Join(dir, "nvidia"+strconv.Itoa(i)), syscall.S_IFCHR|0o666, int(unix.Mkdev(195, uint32(i)))); err != nil {
			t.Fatal(err)
		}
	}
	script := `
import os, sys
for p in sys.argv[1:]:
    try:
        os.close(os.open(p, os.O_RDONLY)); print("opened")
    except OSError as e:
        print(os.strerror(e.errno))
`
	open := func(task string, gpu int32) string {
		fin, out := runToEnd(t, m, mc, &pb.ExecuteTask{TaskId: task, Attempt: 1, GpuIndices: []int32{gpu},
			Argv: []string{"python3", "-c", script, filepath.Join(dir, "nvidia0"), filepath.Join(dir, "nvidia1")}})
		if fin.GetExitCode() != 0 {
			t.Fatalf("%s: %v\n%s", task, fin, out)
		}
		return out
	}
	out0, out1 := open("t-gpu0", 0), open("t-gpu1", 1)
	lines0, lines1 := strings.Split(strings.TrimSpace(out0), "\n"), strings.Split(strings.TrimSpace(out1), "\n")
	denied := func(l string) bool { return strings.Contains(l, "Operation not permitted") }
	if len(lines0) != 2 || denied(lines0[0]) || !denied(lines0[1]) {
		t.Fatalf("the run of GPU 0 opening nvidia0, nvidia1:\n%s", out0)
	}
	if len(lines1) != 2 || !denied(lines1[0]) || denied(lines1[1]) {
		t.Fatalf("the run of GPU 1 opening nvidia0, nvidia1:\n%s", out1)
	}
}

// TestResources_EscapedChildDies: a process that left the run's session
// and process group (setsid, a double fork) under the worker's own uid,
// which no uid sweep finds, dies with the run all the same.
func TestResources_EscapedChildDies(t *testing.T) {
	needCgroupV1(t)
	m := newFakeMaster(t, testToken)
	startWorker(t, m, func(c *Config) { c.RunAs = RunAsNone })
	mc := m.next(t)
	pidFile := filepath.Join(testutil.ReachableTempDir(t), "pid")
	fin, _ := runToEnd(t, m, mc, &pb.ExecuteTask{TaskId: "t-escape", Attempt: 1, Argv: []string{"sh", "-c",
		`(setsid sh -c 'echo $$ > "$1"; exec sleep 600' sh "$1" </dev/null >/dev/null 2>&1 &); while [ ! -s "$1" ]; do sleep 0.01; done`, "sh", pidFile}})
	if fin.GetExitCode() != 0 {
		t.Fatalf("run: %v", fin)
	}
	b, _ := os.ReadFile(pidFile)
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatalf("pid file %q", b)
	}
	t.Cleanup(func() { syscall.Kill(pid, syscall.SIGKILL) })
	waitFor(t, 5*time.Second, "the escaped child dead", func() bool { return testutil.GroupGone(pid) })
}

// TestResources_RunAsUserLeavesNothing: under RUN_AS=user no uid sweep
// applies (the account has other processes), so only the run's control
// group finds a child that left its session; it dies with the run.
func TestResources_RunAsUserLeavesNothing(t *testing.T) {
	needCgroupV1(t)
	useradd, err := exec.LookPath("useradd")
	if err != nil {
		t.Skip("no useradd to make the run's account")
	}
	name := "rlcg" + strconv.Itoa(os.Getpid()%100000)
	if out, err := exec.Command(useradd, "-M", "-N", "-s", "/bin/sh", "-d", "/nonexistent", name).CombinedOutput(); err != nil {
		t.Fatalf("useradd: %v %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("userdel", name).Run() })
	m := newFakeMaster(t, testToken)
	startWorker(t, m, func(c *Config) { c.RunAs = RunAsUser })
	mc := m.next(t)
	dir := testutil.ReachableTempDir(t)
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	pidFile := filepath.Join(dir, "pid")
	fin, out := runToEnd(t, m, mc, &pb.ExecuteTask{TaskId: "t-user", Attempt: 1, User: name, Argv: []string{"sh", "-c",
		`(setsid sh -c 'echo $$ > "$1"; exec sleep 600' sh "$1" </dev/null >/dev/null 2>&1 &); while [ ! -s "$1" ]; do sleep 0.01; done; id -un`, "sh", pidFile}})
	if fin.GetExitCode() != 0 || strings.TrimSpace(out) != name {
		t.Fatalf("run: %v %q", fin, out)
	}
	b, _ := os.ReadFile(pidFile)
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatalf("pid file %q", b)
	}
	t.Cleanup(func() { syscall.Kill(pid, syscall.SIGKILL) })
	waitFor(t, 5*time.Second, "the escaped child of the account dead", func() bool { return testutil.GroupGone(pid) })
}

// TestResources_UsageSeries: a run in its group is sampled for the series
// sys/cpu_cores and sys/memory_mb: a busy loop capped at one core shows
// about one, and the memory it holds. On a worker without GPUs the usage
// comes alone every GPU_SAMPLE_SECONDS; on one with GPUs it rides on the
// GPU samples.
func TestResources_UsageSeries(t *testing.T) {
	needCgroupV1(t)
	fake := fakesmi.Install(t)
	fake.SetGPUs(fakesmi.GPUs(1, "NVIDIA A100")...)
	t.Setenv("NVIDIA_SMI", fake.Bin)
	gpus, err := DetectGPUs()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		gpus []GPU
	}{{"no GPUs", nil}, {"GPUs", gpus}} {
		t.Run(tc.name, func(t *testing.T) {
			m := newFakeMaster(t, testToken)
			startWorker(t, m, func(c *Config) { c.GPUs, c.GPUSample = tc.gpus, 200*time.Millisecond })
			mc := m.next(t)
			id := "t-busy-" + strconv.Itoa(len(tc.gpus))
			mc.send(&pb.ExecuteTask{TaskId: id, Attempt: 1, Fence: 1, CpuMillis: 1000, MemoryMb: 512,
				Argv: []string{"python3", "-c", "a = bytearray(96 << 20)\nwhile True: pass"}})
			mc.started(t, id)
			since := time.Now()
			var cores []float64
			var memMB uint64
			waitFor(t, 30*time.Second, "five samples of the run's usage", func() bool {
				cores = cores[:0]
				for _, s := range mc.gpuSamples() {
					if len(s.UtilPct) != len(tc.gpus) {
						t.Fatalf("a sample of %d GPUs on a worker of %d", len(s.UtilPct), len(tc.gpus))
					}
					for _, u := range s.Runs {
						if u.GetTaskId() == id {
							cores, memMB = append(cores, float64(u.GetCpuMillicores())/1000), u.GetMemoryMb()
						}
					}
				}
				return len(cores) >= 5
			})
			mc.send(&pb.CancelTask{TaskId: id, Attempt: 1, Fence: 1})
			fin := mc.expect(t, 20*time.Second, "TaskFinished", func(m proto.Message) bool { _, ok := m.(*pb.TaskFinished); return ok }).(*pb.TaskFinished)
			wall := time.Since(since).Seconds()
			// The quota caps it at one core, and the samples add up to the
			// CPU time its group counted in all. On an idle machine a
			// spinning loop shows about one core; on a loaded one (the
			// helpers' machine runs at a load of 15 on 2 cores) as much as
			// it got.
			sum := 0.0
			for _, c := range cores {
				if c > 1.1 {
					t.Fatalf("cores %v: over its one-core quota", cores)
				}
				sum += c
			}
			mean, got := sum/float64(len(cores)), fin.GetCpuSeconds()/wall
			if mean < got/2 || mean > got*2 || mean < 0.02 {
				t.Fatalf("cores %v (mean %.2f) for a run that used %.2f of a core over its life", cores, mean, got)
			}
			if memMB < 96 || memMB > 400 {
				t.Fatalf("memory %d MiB, want the 96 MiB it holds and the interpreter", memMB)
			}
			t.Logf("cores %v, %.2f over its life; memory %d MiB", cores, got, memMB)
		})
	}
}
