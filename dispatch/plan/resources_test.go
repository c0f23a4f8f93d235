package plan

import (
	"fmt"
	"reflect"
	"testing"

	"github.com/rlsched/rlsched/core"
)

func asking(id string, gpus int, cpus float64, memMB int64) core.Task {
	t := queued(id, gpus, 0)
	t.CPUs, t.MemoryMB = cpus, memMB
	return t
}

// A run starts only where its GPUs, cores and memory all fit: best fit
// among those; a CPU run on a machine without free GPUs first.
func TestPlanResourcesPlacement(t *testing.T) {
	f := func(s Snapshot, q []core.Task, want map[string]string) {
		t.Helper()
		got := map[string]string{}
		for _, p := range Plan(s, q).Placements {
			got[p.Task.ID] = fmt.Sprintf("%s %v", p.Worker, p.GPUs)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("got %v, want %v", got, want)
		}
	}
	s := Snapshot{Connected: 3, MaxGPUs: 4, MaxSlots: 4, Free: []Worker{
		{ID: "gpu-few-cores", FreeGPUs: []int{0}, FreeSlots: 4, FreeCPUMillis: 1000, FreeMemoryMB: 64 << 10},
		{ID: "gpu-many-cores", FreeGPUs: []int{0, 1, 2, 3}, FreeSlots: 4, FreeCPUMillis: 32000, FreeMemoryMB: 8 << 10},
		{ID: "cpu-only", FreeSlots: 2, FreeCPUMillis: 8000, FreeMemoryMB: 16 << 10},
	}}
	// Best fit is gpu-few-cores (1 free GPU), but only gpu-many-cores has
	// the cores; the CPU runs go to cpu-only while it holds them, then to
	// a GPU machine.
	f(s, []core.Task{asking("g", 1, 4, 1024), asking("c1", 0, 4, 1024), asking("c2", 0, 4, 1024), asking("c3", 0, 4, 1024)},
		map[string]string{"g": "gpu-many-cores [0]", "c1": "cpu-only []", "c2": "cpu-only []", "c3": "gpu-many-cores []"})
	// Memory binds the same way: 16 GiB is only on gpu-few-cores.
	f(s, []core.Task{asking("g", 1, 1, 16<<10)}, map[string]string{"g": "gpu-few-cores [0]"})
	// A run asking for nothing fits anywhere it fitted before.
	f(s, []core.Task{queued("g", 1, 0)}, map[string]string{"g": "gpu-few-cores [0]"})
	// Unreported cores and memory are unlimited.
	u := Snapshot{Connected: 1, MaxGPUs: 1, MaxSlots: 1, Free: []Worker{
		{ID: "old", FreeGPUs: []int{0}, FreeSlots: 1, FreeCPUMillis: Unlimited, FreeMemoryMB: Unlimited}}}
	f(u, []core.Task{asking("g", 1, 4000, 64<<20), asking("c", 0, 4000, 64<<20)}, map[string]string{"g": "old [0]", "c": "old []"})
}

func TestPlanResourcesReasons(t *testing.T) {
	sizes := []Size{{GPUs: 2, Slots: 4, CPUMillis: 8000, MemoryMB: 32 << 10}, {GPUs: 0, Slots: 4, CPUMillis: 64000, MemoryMB: 8 << 10}}
	s := Snapshot{Connected: 2, MaxGPUs: 2, MaxSlots: 4, Sizes: sizes, Free: []Worker{
		{ID: "g", FreeGPUs: []int{0, 1}, FreeSlots: 4, FreeCPUMillis: 2000, FreeMemoryMB: 4 << 10},
		{ID: "c", FreeSlots: 4, FreeCPUMillis: 1500, FreeMemoryMB: 8 << 10},
	}}
	f := func(r core.Task, want core.QueueInfo) {
		t.Helper()
		want.Position = 1
		if got := Plan(s, []core.Task{r}).Waiting[r.ID]; got != want {
			t.Fatalf("%+v:\n got  %+v\n want %+v", r, got, want)
		}
	}
	f(asking("r", 1, 16, 1024), core.QueueInfo{Code: CodeNoWorker,
		Reason: "needs 16 cores, no worker with 1 GPU has that many (the largest offers 8 cores)"})
	f(asking("r", 0, 100, 1024), core.QueueInfo{Code: CodeNoWorker,
		Reason: "needs 100 cores, no worker has that many (the largest offers 64 cores)"})
	f(asking("r", 2, 1, 64<<10), core.QueueInfo{Code: CodeNoWorker,
		Reason: "needs 64 GiB of memory, no worker with 2 GPUs has that much (the largest offers 32 GiB)"})
	f(asking("r", 0, 32, 16<<10), core.QueueInfo{Code: CodeNoWorker,
		Reason: "needs 32 cores and 16 GiB of memory, no worker has both"})
	f(asking("r", 1, 4, 1024), core.QueueInfo{Code: CodeCPU,
		Reason: "needs 4 cores, the most free on a worker with 1 free GPU is 2 cores"})
	f(asking("r", 0, 1, 16<<10), core.QueueInfo{Code: CodeMemory,
		Reason: "needs 16 GiB of memory, the most free on a worker with a free CPU slot is 8 GiB"})
	f(asking("r", 2, 1, 4096), core.QueueInfo{Reason: "starting on g"})
	// The GPU reasons still come first.
	f(asking("r", 3, 1, 1024), core.QueueInfo{Code: CodeNoWorker, Reason: "needs 3 GPUs, no worker has that many (the largest has 2)"})
}
