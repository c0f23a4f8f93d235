package plan

import (
	"testing"

	"github.com/rlsched/rlsched/core"
)

// A GPU with a foreign process is given to no run: a 1-GPU run goes to the
// other GPU, a second waits with gpu_foreign; a run that would not fit even
// with it keeps its own reason.
func TestForeignGPUs(t *testing.T) {
	s := Snapshot{Connected: 1, MaxGPUs: 2,
		Free: []Worker{{ID: "w1", FreeGPUs: []int{0, 1}, ForeignGPUs: []int{1}}}}
	queue := []core.Task{{ID: "a", GPUs: 1}, {ID: "b", GPUs: 1}, {ID: "c", GPUs: 3}}
	res := Plan(s, queue)
	if len(res.Placements) != 1 || res.Placements[0].Task.ID != "a" || res.Placements[0].GPUs[0] != 0 {
		t.Fatalf("placements %+v", res.Placements)
	}
	if w := res.Waiting["b"]; w.Code != CodeGPUForeign || w.Reason != "needs 1 GPU; 1 GPU no run holds has a process rlsched did not start" {
		t.Fatalf("b waits %+v", w)
	}
	if w := res.Waiting["c"]; w.Code != CodeNoWorker {
		t.Fatalf("c waits %+v", w)
	}
	if s.Free[0].FreeGPUs[1] != 1 || len(s.Free[0].FreeGPUs) != 2 {
		t.Fatalf("the snapshot was changed: %+v", s.Free)
	}

	// The process goes: both start.
	s.Free[0].ForeignGPUs = nil
	if p := Place(s, queue); len(p) != 2 {
		t.Fatalf("without the foreign process: %+v", p)
	}

	// A foreign process on a GPU a run holds changes nothing for the free one.
	s.Free[0] = Worker{ID: "w1", FreeGPUs: []int{0}, ForeignGPUs: []int{1}}
	if p := Place(s, queue[:1]); len(p) != 1 || p[0].GPUs[0] != 0 {
		t.Fatalf("foreign on a held GPU: %+v", p)
	}
}
