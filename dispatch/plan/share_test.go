package plan

import (
	"fmt"
	"strings"
	"testing"

	"pgregory.net/rapid"

	"github.com/rlsched/rlsched/core"
)

func frac(id string, f float64) core.Task {
	return core.Task{ID: id, GPUFraction: f, Status: core.StatusQueued}
}

func models(name string, mb int64, n int) []core.GPU {
	out := make([]core.GPU, n)
	for i := range out {
		out[i] = core.GPU{Index: i, Name: name, MemoryMB: mb}
	}
	return out
}

// Four quarter-GPU runs share one GPU of a 2-GPU worker while a whole-GPU
// run takes the other; a fifth quarter and a second whole run wait.
func TestShareFourQuartersOneGPU(t *testing.T) {
	s := Snapshot{Connected: 1, MaxGPUs: 2, Free: []Worker{{ID: "w", FreeGPUs: []int{0, 1}, GPUs: 2, Models: models("NVIDIA A100", 40000, 2),
		FreeCPUMillis: Unlimited, FreeMemoryMB: Unlimited}}}
	q := []core.Task{frac("q1", 0.25), queued("whole", 1, 0), frac("q2", 0.25), frac("q3", 0.25), frac("q4", 0.25), frac("q5", 0.25), queued("whole2", 1, 0)}
	res := Plan(s, q)
	on := map[string][]int{}
	for _, p := range res.Placements {
		on[p.Task.ID] = p.GPUs
		if p.Task.Fractional() && p.GPUMemoryMB != 10000 {
			t.Fatalf("%s: memory share %d, want a quarter of 40000", p.Task.ID, p.GPUMemoryMB)
		}
	}
	for _, id := range []string{"q1", "q2", "q3", "q4"} {
		if g := on[id]; len(g) != 1 || g[0] != 0 {
			t.Fatalf("%s on %v, want GPU 0 (placements %v)", id, g, on)
		}
	}
	if g := on["whole"]; len(g) != 1 || g[0] != 1 {
		t.Fatalf("whole on %v, want GPU 1", g)
	}
	if _, ok := on["q5"]; ok {
		t.Fatal("a fifth quarter was placed on a full GPU")
	}
	if _, ok := on["whole2"]; ok {
		t.Fatal("a whole-GPU run got a shared GPU")
	}
	w := res.Waiting["q5"]
	if w.Code != CodeResources || !strings.Contains(w.Reason, "needs 0.25 GPU") {
		t.Fatalf("q5: %+v", w)
	}
}

// Shares never mix with exclusive runs, and the best fit is the shared GPU
// whose room after placing is smallest; a free GPU is broken only when no
// shared GPU has room, on the worker with the fewest free GPUs.
func TestShareBestFitAndNeverMixed(t *testing.T) {
	s := Snapshot{Connected: 3, MaxGPUs: 4, Free: []Worker{
		{ID: "a", FreeGPUs: []int{1, 2, 3}, GPUs: 4, Shares: []Share{{Index: 0, Used: 25}}, FreeCPUMillis: Unlimited, FreeMemoryMB: Unlimited},
		{ID: "b", FreeGPUs: []int{1}, GPUs: 2, Shares: []Share{{Index: 0, Used: 50}}, FreeCPUMillis: Unlimited, FreeMemoryMB: Unlimited},
		{ID: "c", FreeGPUs: []int{0, 1, 2, 3}, GPUs: 4, FreeCPUMillis: Unlimited, FreeMemoryMB: Unlimited},
	}}
	f := func(q []core.Task, want ...string) {
		t.Helper()
		ps := Place(s, q)
		var got []string
		for _, p := range ps {
			got = append(got, fmt.Sprintf("%s:%s%v", p.Task.ID, p.Worker, p.GPUs))
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("got %v, want %v", got, want)
		}
	}
	f([]core.Task{frac("h", 0.5)}, "h:b[0]")  // b's GPU 0 is left full; a's would be left 0.25
	f([]core.Task{frac("t", 0.75)}, "t:a[0]") // only a's shared GPU has room
	f([]core.Task{frac("h", 0.5), frac("h2", 0.5)}, "h:b[0]", "h2:a[0]")
	f([]core.Task{frac("x", 0.8)}, "x:b[1]") // no share has room: a free GPU of the fullest worker
	f([]core.Task{queued("w", 4, 0), frac("x", 0.8)}, "w:c[0 1 2 3]", "x:b[1]")
	f([]core.Task{queued("w", 1, 0)}, "w:b[1]") // whole runs never get a shared GPU
}

// On a worker whose MPS GPUs serve one user at a time (gpu.sharing
// mps-per-user), a fraction joins only a GPU its owner's runs share, else
// takes a free GPU or waits; elsewhere any user's fractions share.
func TestShareMPSPerUser(t *testing.T) {
	w := func(sharing string) Worker {
		return Worker{ID: "w", FreeGPUs: []int{1}, GPUs: 2, Shares: []Share{{Index: 0, Used: 25, User: 1}},
			Labels: map[string]string{core.LabelGPUSharing: sharing}, FreeCPUMillis: Unlimited, FreeMemoryMB: Unlimited}
	}
	of := func(id string, user int64) core.Task {
		tk := frac(id, 0.25)
		tk.UserID = user
		return tk
	}
	f := func(sharing string, q []core.Task, want ...string) {
		t.Helper()
		var got []string
		for _, p := range Place(Snapshot{Connected: 1, MaxGPUs: 2, Free: []Worker{w(sharing)}}, q) {
			got = append(got, fmt.Sprintf("%s:%v", p.Task.ID, p.GPUs))
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("%s: got %v, want %v", sharing, got, want)
		}
	}
	f(core.SharingMPSPerUser, []core.Task{of("bob", 2), of("ann", 1), of("bob2", 2), of("cat", 3)}, "bob:[1]", "ann:[0]", "bob2:[1]")
	f("mps", []core.Task{of("bob", 2), of("cat", 3)}, "bob:[0]", "cat:[0]")
	// A GPU shared by two users (adopted runs) takes neither user's more.
	mixed := w(core.SharingMPSPerUser)
	mixed.Shares[0].User, mixed.FreeGPUs = -1, nil
	if ps := Place(Snapshot{Connected: 1, MaxGPUs: 2, Free: []Worker{mixed}}, []core.Task{of("ann", 1)}); len(ps) != 0 {
		t.Fatalf("placed on a GPU of several users: %+v", ps)
	}
}

// Memory shares on one GPU never pass its memory, whatever the fractions.
func TestShareMemory(t *testing.T) {
	s := Snapshot{Connected: 1, MaxGPUs: 1, Free: []Worker{{ID: "w", GPUs: 1, Models: models("RTX 4090", 24000, 1),
		Shares: []Share{{Index: 0, Used: 25, MemoryMB: 16000, TotalMB: 24000}}, FreeCPUMillis: Unlimited, FreeMemoryMB: Unlimited}}}
	big := frac("big", 0.25)
	big.GPUMemoryMB = 10000
	small := frac("small", 0.25)
	small.GPUMemoryMB = 8000
	ps := Place(s, []core.Task{big, small})
	if len(ps) != 1 || ps[0].Task.ID != "small" || ps[0].GPUMemoryMB != 8000 {
		t.Fatalf("placements %+v, want only small with 8000 MiB", ps)
	}
}

// gpuType and gpuMemoryMb pick the GPUs, constraints the workers; what no
// connected worker has is no_worker with a sentence that says which.
func TestShareFilters(t *testing.T) {
	w := func(id, name string, mb int64, labels map[string]string) Worker {
		return Worker{ID: id, FreeGPUs: []int{0, 1}, GPUs: 2, Models: models(name, mb, 2), Labels: labels, FreeSlots: 2,
			FreeCPUMillis: Unlimited, FreeMemoryMB: Unlimited}
	}
	s := Snapshot{Connected: 2, MaxGPUs: 2, MaxSlots: 2, Free: []Worker{
		w("rtx", "NVIDIA GeForce RTX 4090", 24564, map[string]string{"pool": "gpu"}),
		w("a100", "NVIDIA A100-SXM4-80GB", 81920, map[string]string{"pool": "a100"}),
	}}
	for _, fw := range s.Free {
		s.Machines = append(s.Machines, Machine{Labels: fw.Labels, GPUs: fw.Models})
	}
	f := func(tk core.Task, worker string) {
		t.Helper()
		ps := Place(s, []core.Task{tk})
		if worker == "" {
			if len(ps) != 0 {
				t.Fatalf("%s placed on %s", tk.ID, ps[0].Worker)
			}
			return
		}
		if len(ps) != 1 || ps[0].Worker != worker {
			t.Fatalf("%s: %+v, want on %s", tk.ID, ps, worker)
		}
	}
	a := queued("a", 1, 0)
	a.GPUType = []string{"a100"}
	f(a, "a100")
	qa := frac("qa", 0.5)
	qa.GPUType = []string{"A100"}
	f(qa, "a100")
	mem := queued("mem", 2, 0)
	mem.GPUMemoryMB = 40000
	f(mem, "a100")
	notA := queued("notA", 0, 0)
	notA.Constraints = map[string]string{"!pool": "gpu"}
	f(notA, "a100")
	pool := frac("pool", 0.25)
	pool.Constraints = map[string]string{"pool": "gpu"}
	f(pool, "rtx")

	why := func(tk core.Task, want string) {
		t.Helper()
		got := Plan(s, []core.Task{tk}).Waiting[tk.ID]
		if got.Code != CodeNoWorker || !strings.Contains(got.Reason, want) {
			t.Fatalf("%s: %+v, want no_worker saying %q", tk.ID, got, want)
		}
	}
	h := frac("h100", 0.25)
	h.GPUType = []string{"H100"}
	why(h, "needs 0.25 GPU of type H100, no connected worker has that (their GPUs: NVIDIA A100-SXM4-80GB, NVIDIA GeForce RTX 4090)")
	huge := queued("huge", 1, 0)
	huge.GPUMemoryMB = 100000
	why(huge, "needs 1 GPU with 97.7 GiB of GPU memory each, no connected worker has that (the largest has 80 GiB)")
	lab := queued("lab", 0, 0)
	lab.Constraints = map[string]string{"zone": "eu"}
	why(lab, "no connected worker has the labels it asks for (zone=eu)")
	both := queued("both", 1, 0)
	both.GPUType, both.Constraints = []string{"a100"}, map[string]string{"pool": "gpu"}
	why(both, "no connected worker with its labels has that")
}

// A fractional run counts its fraction against its owner's GPU quota.
func TestShareQuota(t *testing.T) {
	s := Snapshot{Connected: 1, MaxGPUs: 2, Free: []Worker{{ID: "w", FreeGPUs: []int{0, 1}, GPUs: 2, FreeCPUMillis: Unlimited, FreeMemoryMB: Unlimited}},
		Users: map[int64]User{1: {Name: "ann", MaxGPUs: 1, MaxRuns: -1}}}
	q := []core.Task{frac("a", 0.5), frac("b", 0.5), frac("c", 0.25)}
	for i := range q {
		q[i].UserID = 1
	}
	res := Plan(s, q)
	if len(res.Placements) != 2 || res.Waiting["c"].Code != CodeQuota || !strings.Contains(res.Waiting["c"].Reason, "needs 0.25 GPU; ann has 1 of a quota of 1 GPUs") {
		t.Fatalf("placements %d, c: %+v", len(res.Placements), res.Waiting["c"])
	}
}

// Over random fleets and queues: no GPU is given both whole and shared,
// the shares of a GPU never sum past one GPU or its memory.
func TestShareProperties(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		var s Snapshot
		nw := rapid.IntRange(1, 4).Draw(t, "workers")
		for i := range nw {
			n := rapid.IntRange(1, 4).Draw(t, "gpus")
			w := Worker{ID: fmt.Sprint("w", i), GPUs: n, Models: models("G", 16000, n), FreeCPUMillis: Unlimited, FreeMemoryMB: Unlimited}
			for g := range n {
				switch rapid.IntRange(0, 2).Draw(t, "state") {
				case 0:
					w.FreeGPUs = append(w.FreeGPUs, g)
				case 1:
					u := rapid.IntRange(1, 100).Draw(t, "used")
					w.Shares = append(w.Shares, Share{Index: g, Used: u, MemoryMB: int64(u) * 160, TotalMB: 16000})
				}
			}
			s.Free = append(s.Free, w)
			s.Connected, s.MaxGPUs = s.Connected+1, max(s.MaxGPUs, n)
		}
		var q []core.Task
		for i := range rapid.IntRange(0, 30).Draw(t, "runs") {
			if rapid.Bool().Draw(t, "fractional") {
				tk := frac(fmt.Sprint("f", i), float64(rapid.IntRange(1, 99).Draw(t, "h"))/100)
				if rapid.Bool().Draw(t, "mem") {
					tk.GPUMemoryMB = int64(rapid.IntRange(1, 16000).Draw(t, "mb"))
				}
				q = append(q, tk)
			} else {
				q = append(q, queued(fmt.Sprint("g", i), rapid.IntRange(1, 3).Draw(t, "whole"), 0))
			}
		}
		used := map[string]int{}
		mem := map[string]int64{}
		whole := map[string]bool{}
		for _, w := range s.Free {
			for _, sh := range w.Shares {
				k := fmt.Sprint(w.ID, "/", sh.Index)
				used[k], mem[k] = sh.Used, sh.MemoryMB
			}
		}
		for _, p := range Plan(s, q).Placements {
			for _, g := range p.GPUs {
				k := fmt.Sprint(p.Worker, "/", g)
				if p.Task.Fractional() {
					if whole[k] {
						t.Fatalf("%s shares %s, held whole", p.Task.ID, k)
					}
					used[k] += p.Task.GPUHundredths()
					mem[k] += p.GPUMemoryMB
					if used[k] > 100 || mem[k] > 16000 {
						t.Fatalf("%s over-commits %s: %d hundredths, %d MiB", p.Task.ID, k, used[k], mem[k])
					}
				} else {
					if whole[k] || used[k] > 0 {
						t.Fatalf("%s takes %s, already given", p.Task.ID, k)
					}
					whole[k] = true
				}
			}
		}
	})
}
