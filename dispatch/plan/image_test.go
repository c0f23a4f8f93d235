package plan

import (
	"strings"
	"testing"

	"github.com/rlsched/rlsched/core"
)

// A run with an image (issue 27) goes only to a worker with a container
// runtime, whole-GPU, fractional or CPU; with none connected it waits
// no_worker, saying so.
func TestImageNeedsRuntime(t *testing.T) {
	w := func(id string, containers bool) Worker {
		return Worker{ID: id, FreeGPUs: []int{0, 1}, GPUs: 2, Models: models("A100", 81920, 2), FreeSlots: 2,
			FreeCPUMillis: Unlimited, FreeMemoryMB: Unlimited, Containers: containers}
	}
	snap := func(ws ...Worker) Snapshot {
		s := Snapshot{Connected: len(ws), MaxGPUs: 2, MaxSlots: 2, Free: ws}
		for _, fw := range ws {
			s.Machines = append(s.Machines, Machine{Labels: fw.Labels, GPUs: fw.Models, Containers: fw.Containers})
		}
		return s
	}
	// "a" sorts first: without the rule every run would go there.
	s := snap(w("a", false), w("b", true))
	gpu, cpu, share := queued("gpu", 1, 0), queued("cpu", 0, 0), frac("share", 0.5)
	for _, tk := range []core.Task{gpu, cpu, share} {
		tk.Image = "debian:bookworm"
		if ps := Place(s, []core.Task{tk}); len(ps) != 1 || ps[0].Worker != "b" {
			t.Fatalf("%s: %+v, want on b", tk.ID, ps)
		}
		tk.Image = ""
		if ps := Place(s, []core.Task{tk}); len(ps) != 1 || ps[0].Worker != "a" {
			t.Fatalf("%s without an image: %+v, want on a", tk.ID, ps)
		}
	}
	none := snap(w("a", false))
	gpu.Image = "debian:bookworm"
	if ps := Place(none, []core.Task{gpu}); len(ps) != 0 {
		t.Fatalf("placed on a worker without a runtime: %+v", ps)
	}
	got := Plan(none, []core.Task{gpu}).Waiting[gpu.ID]
	if want := "runs in image debian:bookworm, and no connected worker has a container runtime"; got.Code != CodeNoWorker || !strings.Contains(got.Reason, want) {
		t.Fatalf("%+v, want no_worker saying %q", got, want)
	}
	gpu.Constraints = map[string]string{"pool": "x"}
	got = Plan(snap(w("b", true)), []core.Task{gpu}).Waiting[gpu.ID]
	if want := "no connected worker with a container runtime has the labels it asks for (pool=x)"; got.Code != CodeNoWorker || !strings.Contains(got.Reason, want) {
		t.Fatalf("%+v, want no_worker saying %q", got, want)
	}
}
