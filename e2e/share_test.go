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
