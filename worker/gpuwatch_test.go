package worker

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rlsched/rlsched/codec/pb"
	"github.com/rlsched/rlsched/core"
	"github.com/rlsched/rlsched/internal/testkit/fakesmi"
)

// stepClock is a clock that moves only when the test steps it.
type stepClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *stepClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *stepClock) step(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// gpuWorker starts a worker on n fake GPUs "NVIDIA A10" (24 GiB) whose
// samples are stamped by clk, and returns the fake and the connection.
func gpuWorker(t *testing.T, n int, clk *stepClock, edit func(*Config)) (*fakesmi.Fake, *fakeMaster, *masterConn) {
	t.Helper()
	fake := fakesmi.Install(t)
	gpus := fakesmi.GPUs(n, "NVIDIA A10")
	for i := range gpus {
		gpus[i].MemoryTotalMB = 24576
	}
	fake.SetGPUs(gpus...)
	t.Setenv("NVIDIA_SMI", fake.Bin)
	detected, err := DetectGPUs()
	if err != nil || len(detected) != n {
		t.Fatalf("DetectGPUs: %v %v", detected, err)
	}
	m := newFakeMaster(t, testToken)
	startWorker(t, m, func(c *Config) {
		c.GPUs, c.GPUSample, c.GPUMemoryGrace, c.Slots, c.now = detected, 20*time.Millisecond, 30*time.Second, 4, clk.Now
		if edit != nil {
			edit(c)
		}
	})
	return fake, m, m.next(t)
}

// samplesPass waits until the master got n more GPU samples.
func samplesPass(t *testing.T, mc *masterConn, n int) {
	t.Helper()
	from := len(mc.gpuSamples())
	waitFor(t, 10*time.Second, "more GPU samples", func() bool { return len(mc.gpuSamples()) >= from+n })
}

// A quarter run over its GPU memory share is warned at once and stopped
// when still over past the grace, with reason gpu_memory, even though it
// exits 0 on SIGTERM; its neighbour within its share keeps running, and a
// run that comes back under its share in time is not stopped.
func TestGPUMemoryWatchdog(t *testing.T) {
	clk := &stepClock{now: time.Unix(1_800_000_000, 0)}
	fake, m, mc := gpuWorker(t, 1, clk, nil)
	argv := []string{"sh", "-c", `trap 'echo got TERM; exit 0' TERM; echo started; while :; do sleep 0.05; done`}
	for _, id := range []string{"hog", "calm"} {
		mc.send(&pb.ExecuteTask{TaskId: id, Attempt: 1, Fence: 1, Argv: argv, GpuIndices: []int32{0}, GpuFraction: 0.25, GpuMemoryMb: 4096})
	}
	hog, calm := mc.started(t, "hog"), mc.started(t, "calm")
	u := fakesmi.UUID(0)
	fake.SetProcMemory(u, int(calm.GetPid()), 3000)
	fake.SetProcMemory(u, int(hog.GetPid()), 9210)

	waitFor(t, 10*time.Second, "the warning in the hog's log", func() bool {
		return strings.Contains(m.log("hog", 1), "[rlsched] warning: the run uses 9,210 MiB of GPU 0, over its 4,096 MiB share; it is stopped if still over in 30s")
	})
	clk.step(29 * time.Second)
	samplesPass(t, mc, 3)
	mc.expectNone(t, 100*time.Millisecond, "TaskFinished within the grace", isFinished("hog"))
	if strings.Contains(m.log("hog", 1), "got TERM") {
		t.Fatalf("stopped within the grace:\n%s", m.log("hog", 1))
	}

	clk.step(2 * time.Second)
	fin := mc.finished(t, "hog", 10*time.Second)
	wantErr := "used 9,210 MiB of GPU 0, over its 4,096 MiB share for 31 s; ask for more with --gpu-memory"
	if fin.GetReason() != core.ReasonGPUMemory || fin.GetError() != wantErr || fin.GetExitCode() != 0 || fin.GetOutcome() != pb.Outcome_OUTCOME_EXITED {
		t.Fatalf("hog's report: %v, want reason gpu_memory and %q", fin, wantErr)
	}
	if log := m.log("hog", 1); !strings.HasSuffix(log, "\n[rlsched] stopped by the worker: the run "+wantErr+"\n") || !strings.Contains(log, "got TERM") {
		t.Fatalf("hog's log:\n%s", log)
	}
	mc.send(&pb.TaskFinishedAck{TaskId: "hog", Attempt: 1})
	fake.SetProcMemory(u, int(hog.GetPid()), -1)

	// The neighbour goes over, comes back within the grace: not stopped.
	fake.SetProcMemory(u, int(calm.GetPid()), 5000)
	waitFor(t, 10*time.Second, "the warning in calm's log", func() bool { return strings.Contains(m.log("calm", 1), "over its 4,096 MiB share") })
	fake.SetProcMemory(u, int(calm.GetPid()), 4000)
	samplesPass(t, mc, 3)
	clk.step(time.Minute)
	samplesPass(t, mc, 3)
	mc.expectNone(t, 100*time.Millisecond, "calm's TaskFinished", isFinished("calm"))
	if strings.Contains(m.log("calm", 1), "stopped by the worker") {
		t.Fatalf("calm was stopped:\n%s", m.log("calm", 1))
	}

	// Over again, then nvidia-smi's process query fails: samples without
	// it judge nothing, however long; once it answers and the run is still
	// over, it has been over since before.
	fake.SetProcMemory(u, int(calm.GetPid()), 5000)
	waitFor(t, 10*time.Second, "the second warning in calm's log", func() bool {
		return strings.Count(m.log("calm", 1), "over its 4,096 MiB share") == 2
	})
	fake.SetBehaviour(fakesmi.QueryApps, fakesmi.Behaviour{Exit: 9, Stdout: "Unknown Error"})
	samplesPass(t, mc, 3)
	clk.step(time.Hour)
	samplesPass(t, mc, 3)
	mc.expectNone(t, 100*time.Millisecond, "calm's TaskFinished while the process query fails", isFinished("calm"))
	fake.SetBehaviour(fakesmi.QueryApps, fakesmi.Behaviour{})
	fin = mc.finished(t, "calm", 10*time.Second)
	if want := "used 5,000 MiB of GPU 0, over its 4,096 MiB share for 3600 s; ask for more with --gpu-memory"; fin.GetReason() != core.ReasonGPUMemory || fin.GetError() != want {
		t.Fatalf("calm's report: %v, want %q", fin, want)
	}
}
