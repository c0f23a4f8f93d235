package worker

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rlsched/rlsched/codec/pb"
	"github.com/rlsched/rlsched/internal/testkit/fakesmi"
	"github.com/rlsched/rlsched/internal/testkit/testutil"
	"github.com/rs/zerolog"
)

// fakeMPSControl writes a fake nvidia-cuda-mps-control that records each
// call in the returned log: "start vis=… pipe=… log=…" for -d (writing the
// control socket and pid file a real daemon leaves in its pipe dir), and
// "<command read from stdin> pipe=…" otherwise.
func fakeMPSControl(t *testing.T) (bin, log string) {
	t.Helper()
	dir := t.TempDir()
	bin, log = filepath.Join(dir, "nvidia-cuda-mps-control"), filepath.Join(dir, "calls")
	script := `#!/bin/sh
if [ "$1" = "-d" ]; then
	echo "start vis=$CUDA_VISIBLE_DEVICES pipe=$CUDA_MPS_PIPE_DIRECTORY log=$CUDA_MPS_LOG_DIRECTORY" >> '` + log + `'
	: > "$CUDA_MPS_PIPE_DIRECTORY/control"
	echo $$ > "$CUDA_MPS_PIPE_DIRECTORY/nvidia-cuda-mps-control.pid"
	exit 0
fi
read cmd
echo "$cmd pipe=$CUDA_MPS_PIPE_DIRECTORY" >> '` + log + `'
rm -f "$CUDA_MPS_PIPE_DIRECTORY/control"
`
	if err := os.WriteFile(bin, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return bin, log
}

func readCalls(log string) string {
	b, _ := os.ReadFile(log)
	return string(b)
}

// GPU_SHARING=mps: a daemon per GPU with fractional runs, started for the
// first and told to quit after the last; each run its MPS environment; the
// watchdog warns but does not stop (MPS holds the share).
func TestMPSDaemonPerSharedGPU(t *testing.T) {
	bin, calls := fakeMPSControl(t)
	clk := &stepClock{now: time.Unix(1_800_000_000, 0)}
	var dataDir string
	fake, m, mc := gpuWorker(t, 2, clk, func(c *Config) {
		c.GPUSharing, c.RunAs, c.MPSControl = SharingMPS, RunAsNone, bin
		dataDir = c.DataDir
	})
	sleeper := []string{"sh", "-c", `env | grep -E '^(CUDA_VISIBLE_DEVICES|CUDA_MPS_|RLSCHED_GPU_)' | sort; echo ready; exec sleep 60`}
	exec := func(id string, gpu int32, f float64, mem int64) *pb.TaskStarted {
		t.Helper()
		mc.send(&pb.ExecuteTask{TaskId: id, Attempt: 1, Fence: 1, Argv: sleeper, GpuIndices: []int32{gpu}, GpuFraction: f, GpuMemoryMb: mem})
		st := mc.started(t, id)
		waitFor(t, 10*time.Second, "the env of "+id, func() bool { return strings.Contains(m.log(id, 1), "ready") })
		return st
	}
	a := exec("a", 0, 0.25, 4096)
	exec("b", 0, 0.5, 0)
	exec("c", 1, 0.25, 2048)

	pipe0, pipe1 := filepath.Join(dataDir, "mps", "gpu0", "pipe"), filepath.Join(dataDir, "mps", "gpu1", "pipe")
	u0, u1 := fakesmi.UUID(0), fakesmi.UUID(1)
	want := "start vis=" + u0 + " pipe=" + pipe0 + " log=" + filepath.Join(dataDir, "mps", "gpu0", "log") + "\n" +
		"start vis=" + u1 + " pipe=" + pipe1 + " log=" + filepath.Join(dataDir, "mps", "gpu1", "log") + "\n"
	if got := readCalls(calls); got != want {
		t.Fatalf("MPS calls:\n%s\nwant\n%s", got, want)
	}
	if got, want := m.log("a", 1), "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=25\nCUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=4096M\nCUDA_MPS_PIPE_DIRECTORY="+pipe0+
		"\nCUDA_VISIBLE_DEVICES="+u0+"\nRLSCHED_GPU_FRACTION=0.25\nRLSCHED_GPU_MEMORY_MB=4096\nready\n"; got != want {
		t.Fatalf("a sees\n%s\nwant\n%s", got, want)
	}
	if got := m.log("b", 1); !strings.Contains(got, "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=50\n") || strings.Contains(got, "PINNED") {
		t.Fatalf("b (no memory share) sees\n%s", got)
	}

	// Over its share under MPS: a warning, never a stop.
	fake.SetProcMemory(u0, int(a.GetPid()), 9000)
	waitFor(t, 10*time.Second, "the warning in a's log", func() bool {
		return strings.Contains(m.log("a", 1), "[rlsched] warning: the run uses 9,000 MiB of GPU 0, over its 4,096 MiB share; MPS holds it to its share")
	})
	clk.step(time.Hour)
	samplesPass(t, mc, 3)
	mc.expectNone(t, 100*time.Millisecond, "a's TaskFinished", isFinished("a"))

	stop := func(id string) {
		t.Helper()
		mc.send(&pb.CancelTask{TaskId: id, Attempt: 1, Fence: 1})
		mc.finished(t, id, 10*time.Second)
		mc.send(&pb.TaskFinishedAck{TaskId: id, Attempt: 1})
	}
	stop("c")
	want += "quit pipe=" + pipe1 + "\n"
	waitFor(t, 10*time.Second, "GPU 1's daemon told to quit", func() bool { return readCalls(calls) == want })
	stop("a")
	samplesPass(t, mc, 2)
	if got := readCalls(calls); got != want {
		t.Fatalf("after a, b still on GPU 0, the calls are\n%s", got)
	}
	stop("b")
	want += "quit pipe=" + pipe0 + "\n"
	waitFor(t, 10*time.Second, "GPU 0's daemon told to quit", func() bool { return readCalls(calls) == want })
}

// One MPS server serves one uid: a run of another uid on the GPU is
// refused until the GPU's runs end.
func TestMPSOneUIDPerGPU(t *testing.T) {
	bin, calls := fakeMPSControl(t)
	dir := testutil.ReachableTempDir(t)
	m, err := newMPS(Config{MPSControl: bin, DataDir: dir, GPUs: SyntheticGPUs(1)}, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	r := &run{gpus: []int{0}, fraction: 0.5}
	env, done1, err := m.acquire(r, 61000)
	if err != nil || !strings.Contains(strings.Join(env, " "), "CUDA_VISIBLE_DEVICES=0 ") {
		t.Fatalf("first run: %v %v", env, err)
	}
	_, done2, err := m.acquire(r, 61000)
	if err != nil {
		t.Fatalf("a second run of the same uid: %v", err)
	}
	if _, _, err := m.acquire(r, 61001); err == nil ||
		!strings.Contains(err.Error(), "GPU 0 serves MPS clients of uid 61000 until its 2 runs end, and an MPS server serves one uid at a time") {
		t.Fatalf("a run of another uid: %v", err)
	}
	done1()
	done1() // once only
	if _, _, err := m.acquire(r, 61001); err == nil {
		t.Fatal("a run of another uid while one run of the first is left")
	}
	done2()
	_, done3, err := m.acquire(r, 61001)
	if err != nil {
		t.Fatalf("once the GPU drained, another uid: %v", err)
	}
	done3()
	if n := strings.Count(readCalls(calls), "start "); n != 2 {
		t.Fatalf("daemon starts: %d\n%s", n, readCalls(calls))
	}

	// A daemon a crashed worker of this dir left is told to quit.
	if err := os.WriteFile(filepath.Join(dir, "mps", "gpu0", "pipe", "control"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := newMPS(Config{MPSControl: bin, DataDir: dir, GPUs: SyntheticGPUs(1)}, zerolog.Nop()); err != nil {
		t.Fatal(err)
	}
	if got := readCalls(calls); !strings.HasSuffix(got, "quit pipe="+filepath.Join(dir, "mps", "gpu0", "pipe")+"\n") {
		t.Fatalf("calls after a restart:\n%s", got)
	}
}

// A worker with GPU_SHARING=mps and no MPS control binary does not start.
func TestMPSControlMissing(t *testing.T) {
	cfg := Config{ID: "w1", Masters: []string{"127.0.0.1:1"}, JoinToken: testToken, DataDir: testutil.ReachableTempDir(t),
		GPUs: SyntheticGPUs(1), GPUSharing: SharingMPS, RunAs: RunAsNone, MPSControl: filepath.Join(t.TempDir(), "nvidia-cuda-mps-control")}
	w, err := Start(context.Background(), cfg)
	if err == nil {
		w.Close(context.Background())
		t.Fatal("the worker started")
	}
	if !strings.Contains(err.Error(), "cannot start worker: GPU_SHARING=mps, but") || !strings.Contains(err.Error(), "GPU_SHARING=timeslice") {
		t.Fatalf("error %v", err)
	}
}

func TestResolveSharing(t *testing.T) {
	f := func(mode, runAs, want, wantErr string) {
		t.Helper()
		got, err := resolveSharing(mode, runAs)
		if wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), wantErr) {
				t.Fatalf("%q %q: %q %v, want the error %q", mode, runAs, got, err, wantErr)
			}
			return
		}
		if err != nil || got != want {
			t.Fatalf("%q %q: %q %v, want %q", mode, runAs, got, err, want)
		}
	}
	f("", RunAsDynamic, SharingTimeslice, "")
	f("timeslice", RunAsDynamic, SharingTimeslice, "")
	f("mps", RunAsUser, SharingMPS, "")
	f("mps", RunAsNone, SharingMPS, "")
	f("mps", RunAsDynamic, "", "GPU_SHARING=mps with RUN_AS=dynamic")
	f("MPS", RunAsNone, "", `GPU_SHARING="MPS": want timeslice or mps`)
}
