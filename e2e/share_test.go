package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/rlsched/rlsched/internal/testkit/fakesmi"
	"github.com/rlsched/rlsched/internal/testkit/rig"
	"github.com/rlsched/rlsched/internal/testkit/testutil"
)

// TestGPUShares (issue 28): on a real master and a worker with two fake
// A100s, four runs of a quarter of a GPU run at once on one GPU while a
// 1-GPU run takes the other; a second 1-GPU run waits for a whole GPU
// (resources), a run asking for an H100 waits with no_worker and says
// why, and /api/workers lists the shared GPU's runs with their memory.
func TestGPUShares(t *testing.T) {
	b := newBed(t)
	fake := fakesmi.Install(t)
	fake.SetGPUs(fakesmi.GPUs(2, "NVIDIA A100-SXM4-40GB")...)
	m := b.StartMaster("master", rig.MasterOpts{})
	b.startGPUWorker("worker", m.RPC, "share-w1", fake)
	m.WaitJoined(t, "share-w1")
	signup(t, m.URL, "admin", "ADMIN")
	user, _ := signup(t, m.URL, "dana", "USER")

	whole, _ := b.submit(user, map[string]any{"command": []string{"sleep", "600"}, "gpus": 1})
	user.waitStatus(whole, "RUNNING", 30*time.Second)
	var quarters []string
	for range 4 {
		id, _ := b.submit(user, map[string]any{"command": []string{"sleep", "600"}, "gpus": 0.25, "gpuType": "a100"})
		quarters = append(quarters, id)
	}
	wholeGPU := user.gpuTask(whole).GPUIndices[0]
	for _, id := range quarters {
		user.waitStatus(id, "RUNNING", 30*time.Second)
		if g := user.gpuTask(id).GPUIndices; len(g) != 1 || g[0] != 1-wholeGPU {
			t.Fatalf("quarter %s on GPUs %v, want [%d]", id, g, 1-wholeGPU)
		}
	}
	second, _ := b.submit(user, map[string]any{"command": []string{"sleep", "600"}, "gpus": 1})
	h100, _ := b.submit(user, map[string]any{"command": []string{"sleep", "600"}, "gpus": 0.5, "gpuType": []string{"H100"}})
	testutil.Eventually(t, 30*time.Second, func() (bool, string) {
		a, c := user.gpuTask(second), user.gpuTask(h100)
		return a.Status == "QUEUED" && a.PendingCode == "resources" && c.Status == "QUEUED" && c.PendingCode == "no_worker",
			fmt.Sprintf("second %+v, h100 %+v", a, c)
	})
	var why struct {
		PendingReason string `json:"pendingReason"`
	}
	user.Must("GET", "/api/tasks/"+h100, nil, 200, &why)
	if !strings.Contains(why.PendingReason, "of type H100, no connected worker has that (their GPUs: NVIDIA A100-SXM4-40GB)") {
		t.Fatalf("h100's reason: %q", why.PendingReason)
	}

	var ws struct {
		Items []struct {
			GPUs []struct {
				Index  int    `json:"index"`
				TaskID string `json:"taskId"`
				Shares []struct {
					Run      string  `json:"run"`
					Fraction float64 `json:"fraction"`
					MemoryMB int64   `json:"memoryMb"`
				} `json:"shares"`
			} `json:"gpus"`
		} `json:"items"`
	}
	user.Must("GET", "/api/workers", nil, 200, &ws)
	g := ws.Items[0].GPUs[1-wholeGPU]
	if g.TaskID != "" || len(g.Shares) != 4 || g.Shares[0].Fraction != 0.25 || g.Shares[0].MemoryMB != 10240 {
		t.Fatalf("shared GPU in /api/workers: %+v", g)
	}
}

// TestGPUTypesAndPools (issue 28, "Done when"): on a real master with an
// A100 worker and an RTX worker (fake nvidia-smi names) and a CPU worker
// labelled pool=cpu, a second run asking for an A100 waits for the one
// A100 (resources) while the RTX GPUs stay free, and never lands on the RTX
// worker; CPU runs constrained to pool=cpu fill the CPU worker and the
// next one waits rather than take a slot of a GPU worker.
func TestGPUTypesAndPools(t *testing.T) {
	b := newBed(t)
	a100 := fakesmi.Install(t)
	a100.SetGPUs(fakesmi.GPUs(1, "NVIDIA A100-SXM4-40GB")...)
	rtx := fakesmi.Install(t)
	rtx.SetGPUs(fakesmi.GPUs(2, "NVIDIA GeForce RTX 4090")...)
	m := b.StartMaster("master", rig.MasterOpts{})
	b.startGPUWorker("worker-a100", m.RPC, "types-a100", a100)
	b.startGPUWorker("worker-rtx", m.RPC, "types-rtx", rtx)
	b.StartWorker("worker-cpu", m.RPC, rig.WorkerOpts{ID: "types-cpu", GPUs: 0, Slots: 2, Env: []string{"WORKER_LABELS=pool=cpu"}})
	for _, id := range []string{"types-a100", "types-rtx", "types-cpu"} {
		m.WaitJoined(t, id)
	}
	signup(t, m.URL, "admin", "ADMIN")
	user, _ := signup(t, m.URL, "erin", "USER")
	type placed struct {
		Status      string `json:"status"`
		Worker      string `json:"worker"`
		PendingCode string `json:"pendingCode"`
	}
	get := func(id string) placed {
		var p placed
		user.Must("GET", "/api/tasks/"+id, nil, 200, &p)
		return p
	}
	sleep := []string{"sleep", "600"}
	first, _ := b.submit(user, map[string]any{"command": sleep, "cpus": 0.1, "memoryMb": 64, "gpus": 1, "gpuType": "a100"})
	user.waitStatus(first, "RUNNING", 30*time.Second)
	if w := get(first).Worker; w != "types-a100" {
		t.Fatalf("the A100 run is on %s", w)
	}
	second, _ := b.submit(user, map[string]any{"command": sleep, "cpus": 0.1, "memoryMb": 64, "gpus": 0.5, "gpuType": []string{"A100"}})
	var cpus []string
	for range 3 {
		id, _ := b.submit(user, map[string]any{"command": sleep, "cpus": 0.1, "memoryMb": 64, "gpus": 0, "constraints": map[string]string{"pool": "cpu"}})
		cpus = append(cpus, id)
	}
	testutil.Eventually(t, 30*time.Second, func() (bool, string) {
		s := get(second)
		running, queued := 0, 0
		var ps []placed
		for _, id := range cpus {
			p := get(id)
			ps = append(ps, p)
			if p.Status == "RUNNING" && p.Worker == "types-cpu" {
				running++
			} else if p.Status == "QUEUED" && p.Worker == "" && p.PendingCode != "" {
				queued++
			}
		}
		return s.Status == "QUEUED" && s.PendingCode == "resources" && running == 2 && queued == 1,
			fmt.Sprintf("second %+v, CPU runs %+v", s, ps)
	})
	// The RTX GPUs were free all along: any run may have them.
	anyGPU, _ := b.submit(user, map[string]any{"command": sleep, "cpus": 0.1, "memoryMb": 64, "gpus": 1})
	user.waitStatus(anyGPU, "RUNNING", 30*time.Second)
	if w := get(anyGPU).Worker; w != "types-rtx" {
		t.Fatalf("a run of any GPU type is on %s, want the RTX worker", w)
	}
	if s := get(second); s.Status != "QUEUED" || s.Worker != "" {
		t.Fatalf("the second A100 run: %+v", s)
	}
}
