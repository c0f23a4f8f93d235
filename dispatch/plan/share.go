package plan

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/rlsched/rlsched/core"
)

// The placement rule of issue 28 (API.md "Placement"): a run may ask for a
// fraction of one GPU (Task.GPUFraction), for GPUs of a type or with
// enough memory (GPUType, GPUMemoryMB), and for workers whose labels hold
// (Constraints).
//
// A fractional run shares a GPU only with other fractional runs: a GPU
// with a share on it is out of its worker's free list (Worker.Shares holds
// it) until its last share ends, and a whole-GPU run never gets it. The
// shares of one GPU sum to at most one GPU (100 hundredths), and their
// memory to at most the GPU's memory. Where a fractional run goes is best
// fit by the fragmentation it leaves (after FGD, Weng et al., ATC'23): the
// GPU already shared whose room after it is smallest, and only when none
// has room a free whole GPU, on the worker with the fewest free GPUs, so
// whole GPUs and whole machines stay free for whole-GPU runs.

// Share is a worker's GPU that fractional runs hold part of.
type Share struct {
	Index int
	// Used is the hundredths of the GPU its runs hold (at most 100), and
	// MemoryMB the MiB of its memory they hold; TotalMB is the GPU's
	// memory (0: not known, only fractions count).
	Used              int
	MemoryMB, TotalMB int64
	// User owns its runs (core.Task.UserID); -1: runs of several users. On
	// a worker labelled core.SharingMPSPerUser only its owner's runs join.
	User int64
}

// Machine is what a connected worker has, free or not, for the reasons of
// runs that ask for GPU types, memory or labels (no_worker).
type Machine struct {
	Labels     map[string]string
	GPUs       []core.GPU // names and memory; any order
	Containers bool       // it has a container runtime (Worker.Containers)
}

// picky reports whether t asks for a GPU type, GPU memory, labels or a
// worker that runs images.
func picky(t *core.Task) bool {
	return len(t.GPUType) > 0 || t.GPUMemoryMB > 0 || len(t.Constraints) > 0 || t.Image != ""
}

// runsImage reports whether a worker with a container runtime or not
// (containers) may run t: a run with an image needs one (issue 27).
func runsImage(t *core.Task, containers bool) bool { return t.Image == "" || containers }

// gpuOK reports whether a GPU named name with memoryMB MiB (0: unknown)
// is one t may have: of its type, with its memory (unknown memory never
// has enough).
func gpuOK(t *core.Task, name string, memoryMB int64) bool {
	return core.MatchGPUType(name, t.GPUType) && (t.GPUMemoryMB == 0 || memoryMB >= t.GPUMemoryMB)
}

// model is w's GPU of index i (zero: not known).
func (w *Worker) model(i int) core.GPU {
	if i < len(w.Models) && w.Models[i].Index == i {
		return w.Models[i]
	}
	for _, g := range w.Models {
		if g.Index == i {
			return g
		}
	}
	return core.GPU{Index: i}
}

// usable is the free GPUs of w that t may have, at most n of them; all of
// them (no copy) when t asks for no type or memory.
func (w *Worker) usable(t *core.Task, n int) []int {
	if len(t.GPUType) == 0 && t.GPUMemoryMB == 0 {
		return w.FreeGPUs[:min(n, len(w.FreeGPUs))]
	}
	var out []int
	for _, g := range w.FreeGPUs {
		if m := w.model(g); gpuOK(t, m.Name, m.MemoryMB) {
			out = append(out, g)
			if len(out) == n {
				break
			}
		}
	}
	return out
}

// admits reports whether w's labels hold t's constraints and its cores and
// memory fit.
func (w *Worker) admits(t *core.Task, cpu, mem int64) bool {
	return w.fits(cpu, mem) && core.MatchConstraints(w.Labels, t.Constraints) && runsImage(t, w.Containers)
}

// placeWhole places a whole-GPU run that asks for a type, memory or
// labels: best fit among the workers with enough GPUs it may have.
func placeWhole(t *core.Task, free []Worker, ix *freeIndex) (int, []int) {
	cpu, mem := need(t)
	best := ix.bestFit(t.GPUs, func(i int) bool {
		return free[i].admits(t, cpu, mem) && len(free[i].usable(t, t.GPUs)) == t.GPUs
	})
	if best < 0 {
		return -1, nil
	}
	return best, append([]int(nil), free[best].usable(t, t.GPUs)...)
}

// placeShare places fractional t: on the shared GPU it leaves the least
// room on, else on a free GPU of the worker with the fewest (best fit).
// It returns the worker's index, the GPU and the MiB of its memory t
// gets, or -1.
func placeShare(t *core.Task, free []Worker, ix *freeIndex) (int, int, int64) {
	h := t.GPUHundredths()
	if ix.shareRoom < h && !ix.anyGPUFree() {
		return -1, 0, 0
	}
	cpu, mem := need(t)
	bw, bg, left, room := -1, 0, 101, 0
	for _, i := range ix.shared {
		w := &free[i]
		ok := w.admits(t, cpu, mem)
		perUser := w.Labels[core.LabelGPUSharing] == core.SharingMPSPerUser
		for j, s := range w.Shares {
			r := 100 - s.Used
			room = max(room, r)
			if !ok || r < h || r-h >= left || (perUser && s.User != t.UserID) {
				continue
			}
			m := w.model(s.Index)
			if m.MemoryMB == 0 {
				m.MemoryMB = s.TotalMB
			}
			if !gpuOK(t, m.Name, m.MemoryMB) || (s.TotalMB > 0 && s.MemoryMB+t.GPUShareMB(s.TotalMB) > s.TotalMB) {
				continue
			}
			bw, bg, left = i, j, r-h
		}
	}
	ix.shareRoom = room // exact: every shared GPU was looked at
	if bw >= 0 {
		s := free[bw].Shares[bg]
		return bw, s.Index, t.GPUShareMB(s.TotalMB)
	}
	best := ix.bestFit(1, func(i int) bool {
		return free[i].admits(t, cpu, mem) && len(free[i].usable(t, 1)) == 1 && shareFits(t, &free[i], free[i].usable(t, 1)[0])
	})
	if best < 0 {
		return -1, 0, 0
	}
	g := free[best].usable(t, 1)[0]
	return best, g, t.GPUShareMB(free[best].model(g).MemoryMB)
}

// shareFits reports whether t's memory share fits GPU g of w, free.
func shareFits(t *core.Task, w *Worker, g int) bool {
	total := w.model(g).MemoryMB
	return total == 0 || t.GPUShareMB(total) <= total
}

// takeShare records fractional t placed on GPU g of free[i] with memMB of
// its memory. The worker's share list is copied before it is changed: the
// snapshot's is read-only.
func takeShare(free []Worker, i int, t *core.Task, g int, memMB int64, ix *freeIndex) {
	w := &free[i]
	h := t.GPUHundredths()
	j := slices.IndexFunc(w.Shares, func(s Share) bool { return s.Index == g })
	w.Shares = slices.Clone(w.Shares)
	if j < 0 {
		// A free GPU becomes shared: out of the free list.
		n := len(w.FreeGPUs)
		k := slices.Index(w.FreeGPUs, g)
		w.FreeGPUs = slices.Delete(slices.Clone(w.FreeGPUs), k, k+1)
		ix.moved(i, n, n-1)
		ix.addShared(i)
		w.Shares = append(w.Shares, Share{Index: g, TotalMB: w.model(g).MemoryMB, User: t.UserID})
		j = len(w.Shares) - 1
		ix.shareRoom = max(ix.shareRoom, 100-h)
	} else if w.Shares[j].User != t.UserID {
		w.Shares[j].User = -1
	}
	w.Shares[j].Used += h
	w.Shares[j].MemoryMB += memMB
	cpu, mem := need(t)
	w.FreeCPUMillis -= cpu
	w.FreeMemoryMB -= mem
}

// neverMatches reports, as no_worker, a run whose type, GPU memory or
// labels no connected worker has (s.Machines; none known: never): which
// of them, in a sentence.
func neverMatches(t *core.Task, machines []Machine) (code, why string, ok bool) {
	if !picky(t) || len(machines) == 0 {
		return "", "", false
	}
	n := max(t.GPUs, 1)
	if !t.UsesGPU() {
		n = 0
	}
	labelled, typed, runtimes := 0, 0, 0
	var names []string
	var most int64
	for _, m := range machines {
		if m.Containers {
			runtimes++
		}
		if !core.MatchConstraints(m.Labels, t.Constraints) || !runsImage(t, m.Containers) {
			continue
		}
		labelled++
		ofType := 0
		for _, g := range m.GPUs {
			if core.MatchGPUType(g.Name, t.GPUType) {
				ofType++
				most = max(most, g.MemoryMB)
			}
			if g.Name != "" && !slices.Contains(names, g.Name) {
				names = append(names, g.Name)
			}
		}
		if ofType >= n {
			typed++
		}
		have := 0
		for _, g := range m.GPUs {
			if gpuOK(t, g.Name, g.MemoryMB) {
				have++
			}
		}
		if have >= n {
			return "", "", false
		}
	}
	switch {
	case labelled == 0 && t.Image != "" && runtimes == 0:
		return CodeNoWorker, fmt.Sprintf("runs in image %s, and no connected worker has a container runtime (podman); install podman on a worker and restart it", t.Image), true
	case labelled == 0 && t.Image != "" && len(t.Constraints) > 0:
		return CodeNoWorker, fmt.Sprintf("runs in image %s, and no connected worker with a container runtime has the labels it asks for (%s)", t.Image, constraintText(t.Constraints)), true
	case labelled == 0:
		return CodeNoWorker, fmt.Sprintf("no connected worker has the labels it asks for (%s)", constraintText(t.Constraints)), true
	case typed == 0 && len(t.GPUType) > 0:
		sort.Strings(names)
		have := "their GPUs: " + strings.Join(names, ", ")
		if len(names) == 0 {
			have = "they report no GPU names"
		}
		return CodeNoWorker, fmt.Sprintf("needs %s of type %s, no connected worker%s has that (%s)",
			core.FormatGPUs(t.GPUCount()), strings.Join(t.GPUType, " or "), withLabels(t), have), true
	}
	return CodeNoWorker, fmt.Sprintf("needs %s with %s of GPU memory each, no connected worker%s has that (the largest has %s)",
		core.FormatGPUs(t.GPUCount()), core.FormatMB(t.GPUMemoryMB), withLabels(t), core.FormatMB(most)), true
}

func withLabels(t *core.Task) string {
	if len(t.Constraints) == 0 {
		return ""
	}
	return " with its labels"
}

// constraintText writes constraints for a person: "pool=a100, pool!=interactive".
func constraintText(c map[string]string) string {
	parts := make([]string, 0, len(c))
	for k, v := range c {
		if key, not := strings.CutPrefix(k, "!"); not {
			parts = append(parts, key+"!="+v)
		} else {
			parts = append(parts, k+"="+v)
		}
	}
	sort.Strings(parts)
	return strings.Join(parts, ", ")
}

// shareReason says why fractional t, which some worker could hold, waits.
func shareReason(t *core.Task, left []Worker) (code, why string) {
	room, whole := 0, 0
	for _, w := range left {
		for _, s := range w.Shares {
			room = max(room, 100-s.Used)
		}
		whole += len(w.FreeGPUs)
	}
	return CodeResources, fmt.Sprintf("needs %s: no GPU it may use has that much free now (the most free of a shared GPU is %s; %d whole GPU%s free)",
		core.FormatGPUs(t.GPUCount()), core.FormatGPUs(float64(room)/100), whole, plural(whole))
}
