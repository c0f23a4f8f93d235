package plan

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"

	"pgregory.net/rapid"

	"github.com/rlsched/rlsched/core"
)

func queued(id string, gpus, prio int) core.Task {
	return core.Task{ID: id, GPUs: gpus, Priority: prio, Status: core.StatusQueued}
}

// twoWorkers: a has GPU 1 and a CPU slot free, b has GPU 0 free; each has 2 GPUs.
func twoWorkers() Snapshot {
	return Snapshot{Connected: 2, MaxGPUs: 2, MaxSlots: 1,
		Free: []Worker{{ID: "a", FreeGPUs: []int{1}, FreeSlots: 1}, {ID: "b", FreeGPUs: []int{0}}}}
}

// The reasons the live scheduler leaves too briefly to observe: free
// capacity that runs ahead take first, and the window one pass reads.
func TestPlanReasons(t *testing.T) {
	got := Plan(twoWorkers(), []core.Task{
		queued("hi1", 1, 9), queued("hi2", 1, 8), queued("lo", 1, 0), queued("cpu1", 0, 0), queued("cpu2", 0, 0), queued("big", 2, 0),
	}).Waiting
	want := map[string]core.QueueInfo{
		"hi1":  {Position: 1, Reason: "starting on a"},
		"hi2":  {Position: 2, Reason: "starting on b"},
		"lo":   {Position: 3, Reason: "waiting behind 2 higher-priority runs that take the free GPUs", Code: CodePriority},
		"cpu1": {Position: 4, Reason: "starting on a"},
		"cpu2": {Position: 5, Reason: "waiting behind 1 older run that takes the free CPU slots", Code: CodePriority},
		"big":  {Position: 6, Reason: "needs 2 GPUs, the largest free block is 1", Code: CodeResources},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got  %+v\nwant %+v", got, want)
	}
}

func TestPlanReasonsWithoutWorkers(t *testing.T) {
	f := func(s Snapshot, gpus int, want core.QueueInfo) {
		t.Helper()
		got := Plan(s, []core.Task{queued("r", gpus, 0)}).Waiting["r"]
		if got != want {
			t.Fatalf("%d GPUs on %+v: got %+v, want %+v", gpus, s, got, want)
		}
	}
	f(Snapshot{}, 0, core.QueueInfo{Position: 1, Reason: "no worker is connected", Code: CodeNoWorker})
	cpuOnly := Snapshot{Connected: 1, MaxSlots: 2, Free: []Worker{{ID: "c", FreeSlots: 2}}}
	f(cpuOnly, 1, core.QueueInfo{Position: 1, Reason: "needs 1 GPU, no connected worker has a GPU", Code: CodeNoWorker})
	f(twoWorkers(), 3, core.QueueInfo{Position: 1, Reason: "needs 3 GPUs, no worker has that many (the largest has 2)", Code: CodeNoWorker})
	gpuOnly := Snapshot{Connected: 1, MaxGPUs: 1, Free: []Worker{{ID: "g", FreeGPUs: []int{0}}}}
	f(gpuOnly, 0, core.QueueInfo{Position: 1, Reason: "no connected worker has CPU slots; it needs one", Code: CodeNoWorker})
	busy := Snapshot{Connected: 1, MaxGPUs: 2, MaxSlots: 1}
	f(busy, 2, core.QueueInfo{Position: 1, Reason: "needs 2 GPUs, every GPU is busy", Code: CodeResources})
	f(busy, 0, core.QueueInfo{Position: 1, Reason: "needs a CPU slot, every slot is busy", Code: CodeResources})
}

// A run the registry has placed already is not placed again and has no
// position; the runs behind it move up.
func TestPlanSkipsRunsInFlight(t *testing.T) {
	s := twoWorkers()
	s.InFlight = map[string]string{"x": "b"}
	res := Plan(s, []core.Task{queued("x", 1, 5), queued("y", 1, 0)})
	if res.Waiting["x"] != (core.QueueInfo{Reason: "starting on b"}) || res.Waiting["y"].Position != 1 {
		t.Fatalf("got %+v", res.Waiting)
	}
	if len(res.Placements) != 1 || res.Placements[0].Task.ID != "y" {
		t.Fatalf("placements %+v", res.Placements)
	}
}

// A full page of runs that cannot start does not hide a run behind it that
// fits (the scheduler then looks Deep runs deep), but one past Deep waits.
func TestPlanLooksDeep(t *testing.T) {
	var q []core.Task
	for i := range Batch {
		q = append(q, queued(fmt.Sprintf("stuck%d", i), 2, 1))
	}
	q = append(q, queued("small", 1, 0))
	if r := Plan(twoWorkers(), q).Waiting["small"].Reason; r != "starting on a" && r != "starting on b" {
		t.Fatalf("small behind a stuck page: %q, want it starting", r)
	}
	deep := slices.Clone(q[:Batch])
	for i := len(deep); i < Deep; i++ {
		deep = append(deep, queued(fmt.Sprintf("deep%d", i), 2, 1))
	}
	deep = append(deep, queued("far", 1, 0))
	want := core.QueueInfo{Position: Deep + 1, Reason: "waiting behind 4096 queued runs the scheduler looks at first", Code: CodePriority}
	if got := Plan(twoWorkers(), deep).Waiting["far"]; got != want {
		t.Fatalf("far: got %+v, want %+v", got, want)
	}
	// One that does start opens the window by one more run per pass.
	q[0].GPUs = 1
	if got := Plan(twoWorkers(), q).Waiting["small"].Reason; got != "starting on b" {
		t.Fatalf("small after a pass that placed: %q", got)
	}
}

func TestPlanBestFit(t *testing.T) {
	s := Snapshot{Connected: 3, MaxGPUs: 4, MaxSlots: 3, Free: []Worker{
		{ID: "four", FreeGPUs: []int{0, 1, 2, 3}, FreeSlots: 1},
		{ID: "two", FreeGPUs: []int{2, 3}, FreeSlots: 3},
		{ID: "one", FreeGPUs: []int{5}},
	}}
	res := Plan(s, []core.Task{queued("g2", 2, 0), queued("g1", 1, 0), queued("g3", 3, 0), queued("c", 0, 0)})
	got := map[string]string{}
	for _, p := range res.Placements {
		got[p.Task.ID] = fmt.Sprintf("%s %v", p.Worker, p.GPUs)
	}
	want := map[string]string{"g2": "two [2 3]", "g1": "one [5]", "g3": "four [0 1 2]", "c": "two []"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	if s.Free[0].FreeGPUs[0] != 0 || len(s.Free[0].FreeGPUs) != 4 || s.Free[1].FreeSlots != 3 {
		t.Fatalf("Plan changed its snapshot: %+v", s.Free)
	}
}

// farm draws a random set of connected workers, some GPUs and slots busy.
func farm(t *rapid.T) Snapshot {
	var s Snapshot
	n := rapid.IntRange(0, 8).Draw(t, "workers")
	for i := range n {
		gpus := rapid.IntRange(0, 8).Draw(t, "gpus")
		slots := rapid.IntRange(0, 4).Draw(t, "slots")
		s.Connected++
		s.MaxGPUs, s.MaxSlots = max(s.MaxGPUs, gpus), max(s.MaxSlots, slots)
		w := Worker{ID: fmt.Sprintf("w%d", i), FreeSlots: rapid.IntRange(0, slots).Draw(t, "freeSlots")}
		for g := range gpus {
			if rapid.Bool().Draw(t, "gpuFree") {
				w.FreeGPUs = append(w.FreeGPUs, g)
			}
		}
		// Cores and memory: unreported (Unlimited) now and then, else a
		// machine's worth with some of it taken.
		z := Size{GPUs: gpus, Slots: slots, CPUMillis: Unlimited, MemoryMB: Unlimited}
		w.FreeCPUMillis, w.FreeMemoryMB = Unlimited, Unlimited
		if rapid.IntRange(0, 4).Draw(t, "cpuReported") > 0 {
			z.CPUMillis = 500 * rapid.Int64Range(1, 32).Draw(t, "cpu")
			w.FreeCPUMillis = z.CPUMillis - 500*rapid.Int64Range(0, z.CPUMillis/500).Draw(t, "cpuUsed")
		}
		if rapid.IntRange(0, 4).Draw(t, "memReported") > 0 {
			z.MemoryMB = 1024 * rapid.Int64Range(1, 64).Draw(t, "mem")
			w.FreeMemoryMB = z.MemoryMB - 1024*rapid.Int64Range(0, z.MemoryMB/1024).Draw(t, "memUsed")
		}
		if !slices.Contains(s.Sizes, z) {
			s.Sizes = append(s.Sizes, z)
		}
		if len(w.FreeGPUs) > 0 || w.FreeSlots > 0 {
			s.Free = append(s.Free, w)
		}
	}
	return s
}

// queue draws queued runs in the store's order, with now and then a long
// head of runs too large for the farm (so deep looks happen) and runs
// already in flight.
func queue(t *rapid.T, s *Snapshot) []core.Task {
	var q []core.Task
	if rapid.IntRange(0, 3).Draw(t, "stuckHead") == 0 {
		for i := range rapid.IntRange(Batch-2, Batch+2).Draw(t, "head") {
			q = append(q, queued(fmt.Sprintf("big%d", i), s.MaxGPUs+1, 0))
		}
	}
	for i := range rapid.IntRange(0, 2*Batch).Draw(t, "runs") {
		gpus := rapid.IntRange(0, 9).Draw(t, "runGPUs")
		if gpus > 3 && rapid.Bool().Draw(t, "cpu") {
			gpus = 0
		}
		r := queued(fmt.Sprintf("r%d", i), gpus, 0)
		r.CPUs = rapid.SampledFrom([]float64{0, 0.5, 1, 2, 4, 8, 32}).Draw(t, "runCPUs")
		r.MemoryMB = rapid.SampledFrom([]int64{0, 512, 4096, 16384, 100000}).Draw(t, "runMemory")
		q = append(q, r)
	}
	for _, r := range q {
		if s.Connected > 0 && rapid.IntRange(0, 30).Draw(t, "inFlight") == 0 {
			if s.InFlight == nil {
				s.InFlight = map[string]string{}
			}
			s.InFlight[r.ID] = "w0"
		}
	}
	return q
}

func clone(s Snapshot) Snapshot {
	c := s
	c.Free = nil
	for _, w := range s.Free {
		w.FreeGPUs = slices.Clone(w.FreeGPUs)
		c.Free = append(c.Free, w)
	}
	return c
}

func TestPlanProperties(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		s := farm(t)
		q := queue(t, &s)
		before := clone(s)
		res := Plan(s, q)
		if !reflect.DeepEqual(clone(s), before) {
			t.Fatal("Plan changed its snapshot")
		}
		if got := Place(s, q); !reflect.DeepEqual(got, res.Placements) {
			t.Fatalf("Place and Plan disagree:\n%v\n%v", got, res.Placements)
		}
		free := map[string]Worker{}
		for _, w := range s.Free {
			free[w.ID] = w
		}
		gpuHolder := map[string]string{} // "worker/gpu" → run
		slotsUsed := map[string]int{}
		cpuUsed, memUsed := map[string]int64{}, map[string]int64{}
		placed := map[string]Placement{}
		for _, p := range res.Placements {
			t.Logf("%s (%d GPUs) on %s %v", p.Task.ID, p.Task.GPUs, p.Worker, p.GPUs)
			if _, dup := placed[p.Task.ID]; dup {
				t.Fatalf("%s placed twice", p.Task.ID)
			}
			if _, ok := s.InFlight[p.Task.ID]; ok {
				t.Fatalf("%s is in flight and placed again", p.Task.ID)
			}
			placed[p.Task.ID] = p
			w, ok := free[p.Worker]
			if !ok {
				t.Fatalf("%s placed on %s, which has nothing free", p.Task.ID, p.Worker)
			}
			cpu, mem := need(p.Task)
			if cpuUsed[p.Worker] += cpu; cpuUsed[p.Worker] > w.FreeCPUMillis {
				t.Fatalf("%s takes %s's cores to %d thousandths, it has %d free", p.Task.ID, p.Worker, cpuUsed[p.Worker], w.FreeCPUMillis)
			}
			if memUsed[p.Worker] += mem; memUsed[p.Worker] > w.FreeMemoryMB {
				t.Fatalf("%s takes %s's memory to %d MiB, it has %d free", p.Task.ID, p.Worker, memUsed[p.Worker], w.FreeMemoryMB)
			}
			if p.Task.GPUs == 0 {
				if len(p.GPUs) != 0 {
					t.Fatalf("CPU run %s given GPUs %v", p.Task.ID, p.GPUs)
				}
				if slotsUsed[p.Worker]++; slotsUsed[p.Worker] > w.FreeSlots {
					t.Fatalf("%s is run %d on %s, which has %d free slots", p.Task.ID, slotsUsed[p.Worker], p.Worker, w.FreeSlots)
				}
				continue
			}
			if len(p.GPUs) != p.Task.GPUs {
				t.Fatalf("%s needs %d GPUs, given %v", p.Task.ID, p.Task.GPUs, p.GPUs)
			}
			for _, g := range p.GPUs {
				if !slices.Contains(w.FreeGPUs, g) {
					t.Fatalf("%s given GPU %d of %s, which is not free (%v)", p.Task.ID, g, p.Worker, w.FreeGPUs)
				}
				key := fmt.Sprintf("%s/%d", p.Worker, g)
				if other, ok := gpuHolder[key]; ok {
					t.Fatalf("GPU %s given to %s and %s", key, other, p.Task.ID)
				}
				gpuHolder[key] = p.Task.ID
			}
		}

		// Every run is explained; positions count the runs not in flight in
		// queue order, and placements come in the order of their positions.
		pos := 0
		for _, r := range q {
			qi, ok := res.Waiting[r.ID]
			if !ok {
				t.Fatalf("%s has no explanation", r.ID)
			}
			if w, ok := s.InFlight[r.ID]; ok {
				if qi != (core.QueueInfo{Reason: "starting on " + w}) {
					t.Fatalf("%s in flight on %s: %+v", r.ID, w, qi)
				}
				continue
			}
			pos++
			if qi.Position != pos {
				t.Fatalf("%s: position %d, want %d", r.ID, qi.Position, pos)
			}
			if p, ok := placed[r.ID]; ok {
				if qi.Reason != "starting on "+p.Worker || qi.Code != "" {
					t.Fatalf("%s placed on %s, explained %+v", r.ID, p.Worker, qi)
				}
				continue
			}
			switch {
			case qi.Reason == "" || strings.HasPrefix(qi.Reason, "starting"):
				t.Fatalf("%s left queued with reason %q", r.ID, qi.Reason)
			case qi.Code == CodeNoWorker:
				cpu, mem := need(&r)
				for _, z := range s.Sizes {
					if z.GPUs >= r.GPUs && (r.GPUs > 0 || z.Slots > 0) && z.CPUMillis >= cpu && z.MemoryMB >= mem {
						t.Fatalf("%s (%d GPUs, %v cores, %d MiB) said never to fit (%q), but %+v could hold it",
							r.ID, r.GPUs, r.CPUs, r.MemoryMB, qi.Reason, z)
					}
				}
			case qi.Code == CodeCPU || qi.Code == CodeMemory:
				// Its GPUs are free somewhere; its cores or memory beside them not.
				if r.GPUs > 0 && !slices.ContainsFunc(s.Free, func(w Worker) bool { return len(w.FreeGPUs) >= r.GPUs }) {
					t.Fatalf("%s: code %q (%q), but no worker has %d GPUs free", r.ID, qi.Code, qi.Reason, r.GPUs)
				}
			case qi.Code != CodeResources && qi.Code != CodePriority:
				t.Fatalf("%s: code %q for %q", r.ID, qi.Code, qi.Reason)
			}
		}
		last := 0
		for _, p := range res.Placements {
			if n := res.Waiting[p.Task.ID].Position; n <= last {
				t.Fatalf("%s at position %d placed after position %d", p.Task.ID, n, last)
			} else {
				last = n
			}
		}
	})
}

// TestPlanIsTheSchedulersPasses: the scheduler places only the page it read
// (Batch runs, or Deep when LookDeeper), executes, and reads again while
// PassAgain. Explain plans the whole queue at once. Both must start the
// same runs on the same GPUs in the same order.
func TestPlanIsTheSchedulersPasses(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		s := farm(t)
		q := queue(t, &s)
		want := Plan(clone(s), slices.Clone(q)).Placements

		var got []Placement
		cur, rest := clone(s), slices.Clone(q)
		for len(cur.Free) > 0 && len(rest) > 0 {
			page := rest[:min(Batch, len(rest))]
			placements := Place(cur, page)
			if LookDeeper(len(placements), len(page)) {
				placements = Place(cur, rest[:min(Deep, len(rest))])
			}
			started := map[string]bool{}
			for _, p := range placements {
				got = append(got, Placement{Task: &core.Task{ID: p.Task.ID}, Worker: p.Worker, GPUs: p.GPUs})
				started[p.Task.ID] = true
				for i := range cur.Free {
					if cur.Free[i].ID == p.Worker {
						take(cur.Free, i, p.Task, p.GPUs, nil)
					}
				}
			}
			cur.Free = slices.DeleteFunc(cur.Free, func(w Worker) bool { return len(w.FreeGPUs) == 0 && w.FreeSlots <= 0 })
			rest = slices.DeleteFunc(rest, func(r core.Task) bool { return started[r.ID] })
			if !PassAgain(len(placements), len(page)) {
				break
			}
		}
		if len(got) != len(want) {
			t.Fatalf("the scheduler's passes start %d runs, the plan of the whole queue %d", len(got), len(want))
		}
		for i := range want {
			if got[i].Task.ID != want[i].Task.ID || got[i].Worker != want[i].Worker || !slices.Equal(got[i].GPUs, want[i].GPUs) {
				t.Fatalf("placement %d: the scheduler's passes %s on %s %v, the plan %s on %s %v", i,
					got[i].Task.ID, got[i].Worker, got[i].GPUs, want[i].Task.ID, want[i].Worker, want[i].GPUs)
			}
		}
	})
}

// A scheduler pass of the dispatch benchmark: a page of CPU runs over 100
// workers with 16 free slots each.
func BenchmarkPlace(b *testing.B) {
	var s Snapshot
	for i := range 100 {
		s.Free = append(s.Free, Worker{ID: fmt.Sprintf("w%03d", i), FreeSlots: 16})
	}
	s.Connected, s.MaxSlots = 100, 16
	q := make([]core.Task, Batch)
	for i := range q {
		q[i] = queued(fmt.Sprintf("r%d", i), 0, 0)
	}
	b.ReportAllocs()
	for b.Loop() {
		if len(Place(s, q)) != Batch {
			b.Fatal("not all placed")
		}
	}
}
