package e2e

import (
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rlsched/rlsched/internal/testkit/fakesmi"
	"github.com/rlsched/rlsched/internal/testkit/rig"
	"github.com/rlsched/rlsched/internal/testkit/testutil"
)

// gpuTask is what these tests read of a run beyond task.
type gpuTask struct {
	Status      string `json:"status"`
	Error       string `json:"error"`
	GPUIndices  []int  `json:"gpuIndices"`
	PendingCode string `json:"pendingCode"`
	Warnings    []struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"warnings"`
}

func (c *client) gpuTask(id string) gpuTask {
	c.T.Helper()
	var tk gpuTask
	c.Must("GET", "/api/tasks/"+id, nil, 200, &tk)
	return tk
}

type workerGPUs struct {
	Items []struct {
		ID         string `json:"id"`
		GPUProblem string `json:"gpuProblem"`
		GPUs       []struct {
			Index       int    `json:"index"`
			UUID        string `json:"uuid"`
			TaskID      string `json:"taskId"`
			Utilization *int   `json:"utilization"`
			Foreign     []struct {
				PID     int    `json:"pid"`
				User    string `json:"user"`
				Command string `json:"command"`
			} `json:"foreign"`
		} `json:"gpus"`
	} `json:"items"`
}

// startGPUWorker runs a worker whose nvidia-smi is fake (GPUs detected
// from it, sampled every second).
func (b *bed) startGPUWorker(name, rpc, id string, fake *fakesmi.Fake) *proc {
	b.T.Helper()
	return b.StartWorker(name, rpc, rig.WorkerOpts{ID: id, GPUs: -1, Env: []string{"NVIDIA_SMI=" + fake.Bin, "GPU_SAMPLE_SECONDS=1"}})
}

// TestGPUForeignProcess: a process rlsched did not start on GPU 1 (a real
// process, listed by the fake nvidia-smi) keeps new runs off it: a 1-GPU
// run goes to GPU 0, a second waits with gpu_foreign; an admin sees whose
// process it is in /api/workers, a user only that it is there. The process
// goes and the second run starts on GPU 1.
func TestGPUForeignProcess(t *testing.T) {
	b := newBed(t)
	fake := fakesmi.Install(t)
	fake.SetGPUs(fakesmi.GPUs(2, "Fake A100")...)
	fake.SetUtil(0, 50)
	fake.SetUtil(1, 50)
	other := exec.Command("sleep", "600")
	if err := other.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = other.Process.Kill(); _ = other.Wait() })
	fake.SetProcs(fakesmi.Proc{GPUUUID: fakesmi.UUID(1), PID: other.Process.Pid, UsedMemoryMB: 1200})

	m := b.StartMaster("master", rig.MasterOpts{DataDir: filepath.Join(b.Dir, "data")})
	b.startGPUWorker("worker", m.RPC, "gpu-w1", fake)
	m.WaitJoined(t, "gpu-w1")
	admin, _ := signup(t, m.URL, "admin", "ADMIN")
	user, _ := signup(t, m.URL, "carol", "USER")

	var ws workerGPUs
	testutil.Eventually(t, 30*time.Second, func() (bool, string) {
		admin.Must("GET", "/api/workers", nil, 200, &ws)
		if len(ws.Items) != 1 || len(ws.Items[0].GPUs) != 2 || len(ws.Items[0].GPUs[1].Foreign) != 1 {
			return false, fmt.Sprintf("workers %+v", ws)
		}
		return true, ""
	})
	g1 := ws.Items[0].GPUs[1]
	if g1.UUID != fakesmi.UUID(1) || g1.Foreign[0].PID != other.Process.Pid || g1.Foreign[0].User == "" ||
		!strings.HasPrefix(g1.Foreign[0].Command, "sleep 600") || g1.Utilization == nil || *g1.Utilization != 50 {
		t.Fatalf("GPU 1 as an admin sees it: %+v", g1)
	}
	user.Must("GET", "/api/workers", nil, 200, &ws)
	if f := ws.Items[0].GPUs[1].Foreign; len(f) != 1 || f[0].User != "" || f[0].Command != "" {
		t.Fatalf("GPU 1's foreign process as a user sees it: %+v", f)
	}

	first, _ := b.submit(user, map[string]any{"command": []string{"sleep", "600"}, "gpus": 1})
	user.waitStatus(first, "RUNNING", 30*time.Second)
	if tk := user.gpuTask(first); len(tk.GPUIndices) != 1 || tk.GPUIndices[0] != 0 {
		t.Fatalf("first run on GPUs %v, want [0]", tk.GPUIndices)
	}
	second, _ := b.submit(user, map[string]any{"command": []string{"sleep", "600"}, "gpus": 1})
	testutil.Eventually(t, 30*time.Second, func() (bool, string) {
		tk := user.gpuTask(second)
		return tk.Status == "QUEUED" && tk.PendingCode == "gpu_foreign", fmt.Sprintf("second run %+v", tk)
	})

	// The process goes: the second run starts on GPU 1.
	_ = other.Process.Kill()
	_ = other.Wait()
	fake.SetProcs()
	user.waitStatus(second, "RUNNING", 30*time.Second)
	if tk := user.gpuTask(second); len(tk.GPUIndices) != 1 || tk.GPUIndices[0] != 1 {
		t.Fatalf("second run on GPUs %v, want [1]", tk.GPUIndices)
	}
	for _, id := range []string{first, second} {
		user.Must("POST", "/api/tasks/"+id+"/cancel", nil, 202, nil)
		user.waitStatus(id, "CANCELLED", 30*time.Second)
	}
}

// TestIdleGPUCancel: a run whose GPU stays at 0 % for IDLE_GPU_SECONDS
// gets the idle_gpu warning and, with IDLE_GPU_ACTION=cancel, ends
// CANCELLED with "idle GPU for N s"; its GPU series is stored.
func TestIdleGPUCancel(t *testing.T) {
	b := newBed(t)
	fake := fakesmi.Install(t)
	fake.SetGPUs(fakesmi.GPUs(1, "Fake A100")...)
	m := b.StartMaster("master", rig.MasterOpts{DataDir: filepath.Join(b.Dir, "data"), Env: []string{"IDLE_GPU_SECONDS=3", "IDLE_GPU_UTIL=5", "IDLE_GPU_ACTION=cancel"}})
	b.startGPUWorker("worker", m.RPC, "gpu-idle", fake)
	m.WaitJoined(t, "gpu-idle")
	signup(t, m.URL, "admin", "ADMIN") // the first user is an admin
	user, _ := signup(t, m.URL, "dave", "USER")

	id, _ := b.submit(user, map[string]any{"command": []string{"sleep", "600"}, "gpus": 1})
	user.waitStatus(id, "CANCELLED", 60*time.Second)
	tk := user.gpuTask(id)
	if !strings.HasPrefix(tk.Error, "idle GPU for ") || !strings.HasSuffix(tk.Error, " s") {
		t.Fatalf("error %q, want \"idle GPU for N s\"", tk.Error)
	}
	found := false
	for _, w := range tk.Warnings {
		found = found || (w.Code == "idle_gpu" && strings.Contains(w.Message, "GPU 0 idle"))
	}
	if !found {
		t.Fatalf("warnings %+v, want idle_gpu", tk.Warnings)
	}
	var ms struct {
		Series map[string][][2]float64 `json:"series"`
	}
	testutil.Eventually(t, 30*time.Second, func() (bool, string) {
		user.Must("GET", "/api/tasks/"+id+"/metrics?names=sys/gpu_utilization,sys/gpu_memory_mb", nil, 200, &ms)
		b, _ := json.Marshal(ms)
		return len(ms.Series["sys/gpu_utilization"]) > 0 && len(ms.Series["sys/gpu_memory_mb"]) > 0, string(b)
	})
}
