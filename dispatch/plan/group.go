package plan

import (
	"fmt"
	"slices"
	"strings"

	"github.com/rlsched/rlsched/core"
)

// Multi-node groups (issue 29, core.Task.Nodes): a run of N members, each
// with the run's GPUs, cores and memory, on N different workers. A group
// is placed all at once or not at all: a pass either finds N distinct
// workers that each fit one member now and takes them all, or takes
// nothing (so no half-placed group ever holds GPUs while it waits for the
// rest). A group that has waited past Snapshot.ReserveBefore holds the
// free GPUs of the N workers where its members fit best, as a large run
// holds one (reserve.go), so small runs cannot starve it.

// Member is one member of a group's placement: its rank is its index in
// Placement.Members.
type Member struct {
	Worker string
	GPUs   []int
}

// groupFits reports whether one member of t fits w now (place's rules for
// one worker: its GPUs of t's type, its cores, memory and labels; a CPU
// group a slot).
func groupFits(t *core.Task, w *Worker) bool {
	cpu, mem := need(t)
	if !w.admits(t, cpu, mem) {
		return false
	}
	if t.GPUs == 0 {
		return w.FreeSlots > 0
	}
	return len(w.usable(t, t.GPUs)) == t.GPUs
}

// placeGroup places every member of group t on a worker of its own: among
// the workers where a member fits now, best fit (the fewest free GPUs, a
// CPU group the most free slots), ties to the first. It returns the
// indices into free in rank order and each member's GPUs, or nil when
// fewer than t.Group() workers fit one. free is not changed.
func placeGroup(t *core.Task, free []Worker) ([]int, [][]int) {
	var fit []int
	for i := range free {
		if groupFits(t, &free[i]) {
			fit = append(fit, i)
		}
	}
	n := t.Group()
	if len(fit) < n {
		return nil, nil
	}
	slices.SortStableFunc(fit, func(a, b int) int {
		if t.GPUs == 0 {
			return free[b].FreeSlots - free[a].FreeSlots
		}
		return len(free[a].FreeGPUs) - len(free[b].FreeGPUs)
	})
	fit = fit[:n]
	gpus := make([][]int, n)
	for k, i := range fit {
		if t.GPUs > 0 {
			gpus[k] = append([]int(nil), free[i].usable(t, t.GPUs)...)
		}
	}
	return fit, gpus
}

// reserveGroup holds for group t, which does not fit now, the free GPUs
// (and a member's cores and memory) of the t.Group() workers that could
// ever hold a member and have the most free (fewer when fewer have any
// free: the others are held as they join); free is changed in place as
// reserve does.
func (r *reserver) reserveGroup(t *core.Task, free []Worker, ix *freeIndex) {
	if !ix.anyGPUFree() {
		return
	}
	cpu, mem := need(t)
	var cand []int
	for i := range free {
		if r.mayReserve(t, &free[i], cpu, mem) {
			cand = append(cand, i)
		}
	}
	if len(cand) == 0 {
		return
	}
	slices.SortStableFunc(cand, func(a, b int) int { return len(free[b].FreeGPUs) - len(free[a].FreeGPUs) })
	cand = cand[:min(len(cand), t.Group())]
	if r.by == nil {
		r.by, r.held, r.blocked = map[string]string{}, map[string]hold{}, map[string]string{}
	}
	names := make([]string, 0, len(cand))
	for _, i := range cand {
		names = append(names, free[i].ID)
		r.holdGPUs(t, free, i, ix, cpu, mem)
	}
	r.by[t.ID] = strings.Join(names, ", ")
}

// groupReason says why group t waits: no_worker when fewer than its size
// of the connected workers could ever hold a member, else resources with
// how many fit one now (free as the plan left it).
func groupReason(t *core.Task, s Snapshot, free []Worker) (code, why string) {
	n := t.Group()
	what := fmt.Sprintf("%d workers with %d GPU%s each", n, t.GPUs, plural(t.GPUs))
	if t.GPUs == 0 {
		what = fmt.Sprintf("%d workers with a CPU slot each", n)
	}
	if could := couldHold(t, s); could < n {
		return CodeNoWorker, fmt.Sprintf("needs %s at once, only %d connected worker%s could ever hold a member", what, could, plural(could))
	}
	now := 0
	for i := range free {
		if groupFits(t, &free[i]) {
			now++
		}
	}
	return CodeResources, fmt.Sprintf("needs %s at once, %d %s them free now", what, now, map[bool]string{true: "has", false: "have"}[now == 1])
}

// couldHold counts the connected workers that could ever hold one member
// of t: enough GPUs of its type and memory, its labels (Snapshot.Machines;
// without them, all the connected workers when t's GPUs fit the largest).
func couldHold(t *core.Task, s Snapshot) int {
	if s.Machines == nil {
		if t.GPUs > s.MaxGPUs {
			return 0
		}
		return s.Connected
	}
	n := 0
	for _, m := range s.Machines {
		if !core.MatchConstraints(m.Labels, t.Constraints) {
			continue
		}
		k := 0
		for _, g := range m.GPUs {
			if gpuOK(t, g.Name, g.MemoryMB) {
				k++
			}
		}
		if k >= t.GPUs {
			n++
		}
	}
	return n
}
