package plan

import (
	"fmt"

	"github.com/rlsched/rlsched/core"
)

// The backfill reservation (API.md "Scheduling policy"): backfill lets
// smaller runs start past a run that fits nowhere now, which could starve
// it while small runs keep taking every GPU that frees. So a GPU run that
// has waited since before Snapshot.ReserveBefore and does not fit reserves
// the worker where it fits best (of the workers with GPUs free now and
// enough GPUs in all, the one with the most free, then the smallest): that
// worker's free GPUs are held for it, and no run behind it in the plan
// takes them, until enough have freed and it starts there. The cores and
// memory it asks for are held there the same way (as much of them as is
// free), and a run asking for cores or memory and no GPU reserves the
// worker with enough of both in all where most cores are free, one
// without GPUs first (issue 26).

// reserver holds workers' free GPUs for long-waiting runs.
type reserver struct {
	before bool // reservations are on (Snapshot.ReserveBefore set)
	s      *Snapshot
	// by is the worker each reserving run holds, by task id, and held the
	// run holding each worker with its free GPUs at the time.
	by   map[string]string
	held map[string]hold
	// blocked: runs that would have fitted in GPUs held for another, by
	// task id → the holder's id.
	blocked map[string]string
}

type hold struct {
	task       *core.Task
	free, size int
	// For a run without GPUs: the worker's free and offered cores
	// (thousandths) when it was held.
	cpuFree, cpuSize int64
}

func newReserver(s *Snapshot) *reserver {
	return &reserver{before: !s.ReserveBefore.IsZero(), s: s}
}

// due reports whether t, which does not fit now, reserves a worker.
func (r *reserver) due(t *core.Task) bool {
	cpu, mem := need(t)
	asks := t.GPUs > 0 || !t.IsGroup() && (cpu > 0 || mem > 0)
	return r.before && asks && t.UpdatedAt.Before(r.s.ReserveBefore) && r.by[t.ID] == ""
}

// reserve holds for t the free GPUs of the worker where it fits best, if
// one of free has enough GPUs in all; free is changed in place (the held
// worker's free GPUs are taken out of the plan, and out of ix).
func (r *reserver) reserve(t *core.Task, free []Worker, ix *freeIndex) {
	cpu, mem := need(t)
	if t.GPUs == 0 {
		r.reserveCores(t, cpu, mem, free)
		return
	}
	if !ix.anyGPUFree() {
		return
	}
	best := -1
	for i, w := range free {
		if !r.mayReserve(t, &w, cpu, mem) {
			continue
		}
		if best < 0 || len(w.FreeGPUs) > len(free[best].FreeGPUs) ||
			(len(w.FreeGPUs) == len(free[best].FreeGPUs) && w.GPUs < free[best].GPUs) {
			best = i
		}
	}
	if best < 0 {
		return
	}
	if r.by == nil {
		r.by, r.held, r.blocked = map[string]string{}, map[string]hold{}, map[string]string{}
	}
	r.by[t.ID] = free[best].ID
	r.holdGPUs(t, free, best, ix, cpu, mem)
}

// mayReserve reports whether a reservation for t, which asks each worker
// for cpu and mem, may hold w: w could ever hold it (or one member of a
// group), has a GPU free to hold, and is held for no other run.
func (r *reserver) mayReserve(t *core.Task, w *Worker, cpu, mem int64) bool {
	return w.GPUs >= t.GPUs && len(w.FreeGPUs) > 0 && w.CPUMillis >= cpu && w.MemoryMB >= mem && r.held[w.ID].task == nil && mayHold(t, w)
}

// holdGPUs holds free[i] for t: every GPU it has free, and as much of its
// free cores and memory as t asks of it, so the runs behind t cannot take
// them while its GPUs free.
func (r *reserver) holdGPUs(t *core.Task, free []Worker, i int, ix *freeIndex, cpu, mem int64) {
	w := &free[i]
	r.held[w.ID] = hold{task: t, free: len(w.FreeGPUs), size: w.GPUs}
	ix.moved(i, len(w.FreeGPUs), 0)
	w.FreeGPUs = w.FreeGPUs[len(w.FreeGPUs):]
	w.FreeCPUMillis -= min(max(w.FreeCPUMillis, 0), cpu)
	w.FreeMemoryMB -= min(max(w.FreeMemoryMB, 0), mem)
}

// reserveCores holds for t, which asks for cores or memory and no GPU, as
// much of them as is free on the worker with enough of both in all where
// most cores are free, a worker without GPUs first (GPU machines' cores
// are kept for GPU runs, as placement does). A worker held for another run
// is not taken.
func (r *reserver) reserveCores(t *core.Task, cpu, mem int64, free []Worker) {
	best := -1
	for i := range free {
		w := &free[i]
		if w.CPUMillis < cpu || w.MemoryMB < mem || w.FreeCPUMillis <= 0 && cpu > 0 || r.held[w.ID].task != nil || !mayHold(t, w) {
			continue
		}
		if best < 0 {
			best = i
			continue
		}
		b := &free[best]
		if (w.GPUs == 0) != (b.GPUs == 0) {
			if w.GPUs == 0 {
				best = i
			}
			continue
		}
		if w.FreeCPUMillis > b.FreeCPUMillis {
			best = i
		}
	}
	if best < 0 {
		return
	}
	if r.by == nil {
		r.by, r.held, r.blocked = map[string]string{}, map[string]hold{}, map[string]string{}
	}
	w := &free[best]
	r.by[t.ID] = w.ID
	r.held[w.ID] = hold{task: t, cpuFree: w.FreeCPUMillis, cpuSize: w.CPUMillis}
	w.FreeCPUMillis -= min(w.FreeCPUMillis, cpu)
	w.FreeMemoryMB -= min(max(w.FreeMemoryMB, 0), mem)
}

// mayHold reports whether w could ever hold t: its labels hold t's
// constraints and it has t.GPUs GPUs of t's type and memory (share.go).
func mayHold(t *core.Task, w *Worker) bool {
	if !picky(t) {
		return true
	}
	if !core.MatchConstraints(w.Labels, t.Constraints) || !runsImage(t, w.Containers) {
		return false
	}
	n := 0
	for _, g := range w.Models {
		if gpuOK(t, g.Name, g.MemoryMB) {
			n++
		}
	}
	return n >= t.GPUs
}

// missed records that t, which did not fit, would have fitted in GPUs (or,
// asking for no GPU, in cores) held for another run.
func (r *reserver) missed(t *core.Task) {
	if len(r.held) == 0 || r.blocked[t.ID] != "" {
		return
	}
	cpu, _ := need(t)
	for _, h := range r.held {
		if h.task == t {
			continue
		}
		if t.GPUs > 0 && h.free >= t.GPUs || t.GPUs == 0 && h.task.GPUs == 0 && cpu > 0 && h.cpuFree >= cpu {
			r.blocked[t.ID] = h.task.ID
			return
		}
	}
}

// reason explains t when it holds a worker or waits for one held for
// another; ok is false otherwise.
func (r *reserver) reason(t *core.Task) (code, why string, ok bool) {
	if w := r.by[t.ID]; w != "" && t.IsGroup() {
		return CodeResources, fmt.Sprintf("needs %d workers with %d GPUs each at once and has waited long: the GPUs of %s are held for it as they free",
			t.Group(), t.GPUs, w), true
	}
	if w := r.by[t.ID]; w != "" && t.GPUs == 0 {
		h := r.held[w]
		return CodeCPU, fmt.Sprintf("needs %s and has waited long: the cores and memory of %s are held for it as they free (%s of %s free)",
			cores(core.CPUMillis(t.CPUs)), w, cores(h.cpuFree), cores(h.cpuSize)), true
	}
	if w := r.by[t.ID]; w != "" {
		h := r.held[w]
		return CodeResources, fmt.Sprintf("needs %d GPUs and has waited long: the GPUs of %s are held for it as they free (%d of %d free)",
			t.GPUs, w, h.free, h.size), true
	}
	if id := r.blocked[t.ID]; id != "" && t.GPUs == 0 {
		return CodePriority, fmt.Sprintf("the free cores it would fit in are held for %s, which has waited longer than the backfill allows", id), true
	}
	if id := r.blocked[t.ID]; id != "" {
		return CodePriority, fmt.Sprintf("the free GPUs it would fit in are held for %s, which has waited longer than the backfill allows", id), true
	}
	return "", "", false
}
