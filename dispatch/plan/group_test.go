package plan

import (
	"slices"
	"testing"
	"time"

	"github.com/rlsched/rlsched/core"
)

func group(id string, nodes, gpus, at int) core.Task {
	t := waiting(id, gpus, at)
	t.Nodes = nodes
	return t
}

// threeWorkers: a and c have 2 GPUs free, b 1; each has 2 in all.
func threeWorkers() Snapshot {
	return Snapshot{Connected: 3, MaxGPUs: 2, MaxSlots: 1, Free: []Worker{
		{ID: "a", FreeGPUs: []int{0, 1}, GPUs: 2, FreeCPUMillis: Unlimited, FreeMemoryMB: Unlimited},
		{ID: "b", FreeGPUs: []int{1}, GPUs: 2, FreeCPUMillis: Unlimited, FreeMemoryMB: Unlimited},
		{ID: "c", FreeGPUs: []int{0, 1}, GPUs: 2, FreeCPUMillis: Unlimited, FreeMemoryMB: Unlimited}}}
}

// A group starts with every member on a worker of its own, or not at all:
// a 3 × 2-GPU group with two workers that fit a member takes nothing, and
// the run behind it starts; a 2 × 2-GPU group takes a and c whole.
func TestGroupAllOrNothing(t *testing.T) {
	res := Plan(threeWorkers(), []core.Task{group("g3", 3, 2, 0), waiting("s", 1, 1)})
	if got := ids(res.Placements); !slices.Equal(got, []string{"s"}) {
		t.Fatalf("placed %v, want only s (the group does not fit)", got)
	}
	if w := res.Waiting["g3"]; w.Code != CodeResources || w.Reason != "needs 3 workers with 2 GPUs each at once, 2 have them free now" {
		t.Fatalf("g3: %+v", w)
	}

	res = Plan(threeWorkers(), []core.Task{group("g2", 2, 2, 0), waiting("s", 2, 1)})
	if len(res.Placements) != 1 {
		t.Fatalf("placed %v, want only g2 (s fits nowhere after it)", ids(res.Placements))
	}
	p := res.Placements[0]
	want := []Member{{Worker: "a", GPUs: []int{0, 1}}, {Worker: "c", GPUs: []int{0, 1}}}
	if p.Task.ID != "g2" || p.Worker != "a" || !slices.Equal(p.GPUs, []int{0, 1}) || len(p.Members) != 2 ||
		!slices.EqualFunc(p.Members, want, func(x, y Member) bool { return x.Worker == y.Worker && slices.Equal(x.GPUs, y.GPUs) }) {
		t.Fatalf("g2 placed %+v", p)
	}
	if w := res.Waiting["s"]; w.Code != CodePriority {
		t.Fatalf("s: %+v", w)
	}
}

// Members go to different workers even when one worker has room for all
// of them; a group larger than the workers that could ever hold a member
// is no_worker, said in a sentence.
func TestGroupDistinctWorkers(t *testing.T) {
	one := Snapshot{Connected: 1, MaxGPUs: 8, Free: []Worker{
		{ID: "big", FreeGPUs: []int{0, 1, 2, 3, 4, 5, 6, 7}, GPUs: 8, FreeCPUMillis: Unlimited, FreeMemoryMB: Unlimited}}}
	res := Plan(one, []core.Task{group("g", 2, 1, 0)})
	if len(res.Placements) != 0 {
		t.Fatalf("placed %+v on one worker", res.Placements)
	}
	if w := res.Waiting["g"]; w.Code != CodeNoWorker || w.Reason != "needs 2 workers with 1 GPU each at once, only 1 connected worker could ever hold a member" {
		t.Fatalf("g: %+v", w)
	}
	// Machines say which workers could hold one: two of three have A100s.
	s := threeWorkers()
	s.Machines = []Machine{{GPUs: []core.GPU{{Name: "A100"}, {Index: 1, Name: "A100"}}}, {GPUs: []core.GPU{{Name: "T4"}, {Index: 1, Name: "T4"}}},
		{GPUs: []core.GPU{{Name: "A100"}, {Index: 1, Name: "A100"}}}}
	g := group("g", 3, 1, 0)
	g.GPUType = []string{"A100"}
	if w := Plan(s, []core.Task{g}).Waiting["g"]; w.Code != CodeNoWorker ||
		w.Reason != "needs 3 workers with 1 GPU each at once, only 2 connected workers could ever hold a member" {
		t.Fatalf("typed g: %+v", w)
	}
	// A CPU group takes a slot on each of two workers.
	cpu := Snapshot{Connected: 2, MaxSlots: 2, Free: []Worker{
		{ID: "x", FreeSlots: 2, FreeCPUMillis: Unlimited, FreeMemoryMB: Unlimited},
		{ID: "y", FreeSlots: 1, FreeCPUMillis: Unlimited, FreeMemoryMB: Unlimited}}}
	ps := Place(cpu, []core.Task{group("c", 2, 0, 0)})
	if len(ps) != 1 || len(ps[0].Members) != 2 || ps[0].Members[0].Worker != "x" || ps[0].Members[1].Worker != "y" {
		t.Fatalf("cpu group placed %+v", ps)
	}
}

// A group that has waited past the reservation holds the free GPUs of the
// workers its members fit best, so the younger small runs behind it do not
// take them; before then, backfill lets them.
func TestGroupReservation(t *testing.T) {
	s := threeWorkers()
	s.Free[0].FreeGPUs = []int{1} // a, b and c: 1, 1, 2 free of 2
	q := []core.Task{group("g", 3, 2, 0), waiting("s1", 1, 10), waiting("s2", 1, 11), waiting("s3", 1, 12)}
	s.ReserveBefore = t0
	if got := ids(Place(s, q)); !slices.Equal(got, []string{"s1", "s2", "s3"}) {
		t.Fatalf("without a reservation placed %v", got)
	}
	s.ReserveBefore = t0.Add(5 * time.Second)
	res := Plan(s, q)
	if len(res.Placements) != 0 {
		t.Fatalf("with g reserving placed %v, want none (every free GPU is held)", ids(res.Placements))
	}
	if w := res.Waiting["g"]; w.Code != CodeResources ||
		w.Reason != "needs 3 workers with 2 GPUs each at once and has waited long: the GPUs of c, a, b are held for it as they free" {
		t.Fatalf("g: %+v", w)
	}
	if w := res.Waiting["s1"]; w.Code != CodePriority {
		t.Fatalf("s1: %+v", w)
	}
	// Once every member fits, the group starts whole.
	s.Free[0].FreeGPUs, s.Free[1].FreeGPUs = []int{0, 1}, []int{0, 1}
	if ps := Place(s, q); len(ps) != 1 || ps[0].Task.ID != "g" || len(ps[0].Members) != 3 {
		t.Fatalf("all free: placed %+v", ps)
	}
}

// A caller that cannot run groups (NoGroups) keeps them waiting, saying so;
// a quota counts a group's GPUs on every member.
func TestGroupNoGroupsAndQuota(t *testing.T) {
	s := threeWorkers()
	s.NoGroups = true
	res := Plan(s, []core.Task{group("g", 2, 1, 0)})
	if len(res.Placements) != 0 || res.Waiting["g"].Code != CodeNoWorker {
		t.Fatalf("NoGroups: placed %v, g %+v", ids(res.Placements), res.Waiting["g"])
	}
	s.NoGroups = false
	s.Users = map[int64]User{0: {MaxGPUs: 3, MaxRuns: -1}}
	res = Plan(s, []core.Task{group("g", 2, 2, 0)})
	if len(res.Placements) != 0 || res.Waiting["g"].Code != CodeQuota {
		t.Fatalf("4 GPUs over a quota of 3: placed %v, g %+v", ids(res.Placements), res.Waiting["g"])
	}
}

// A group's reservation holds only workers whose cores and memory could
// ever hold a member, and holds a member's cores there too: a CPU run
// behind it cannot take them (issue 26, as a single run's reservation).
func TestGroupReservationHoldsCores(t *testing.T) {
	w := func(id string, cores int64) Worker {
		return Worker{ID: id, FreeGPUs: []int{1}, GPUs: 2, FreeSlots: 1, CPUMillis: cores, FreeCPUMillis: cores,
			MemoryMB: Unlimited, FreeMemoryMB: Unlimited}
	}
	s := Snapshot{Connected: 4, MaxGPUs: 2, MaxSlots: 1, ReserveBefore: t0.Add(5 * time.Second),
		Free: []Worker{w("a", 8000), w("b", 2000), w("c", 8000), w("d", 8000)}}
	g := group("g", 2, 2, 0)
	g.CPUs = 4
	cpu := waiting("cpu", 0, 10)
	cpu.CPUs = 6
	res := Plan(s, []core.Task{g, cpu})
	if w := res.Waiting["g"]; w.Code != CodeResources ||
		w.Reason != "needs 2 workers with 2 GPUs each at once and has waited long: the GPUs of a, c are held for it as they free" {
		t.Fatalf("g: %+v", w)
	}
	if len(res.Placements) != 1 || res.Placements[0].Task.ID != "cpu" || res.Placements[0].Worker != "d" {
		t.Fatalf("placed %+v, want cpu on d (a's and c's cores are held for g, b has too few)", res.Placements)
	}
}
