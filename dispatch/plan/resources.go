package plan

import (
	"fmt"

	"github.com/rlsched/rlsched/core"
)

// The cores and memory rule (API.md "Resources"): a run fits a worker only
// where its GPUs, cores and memory all fit (place); this file says why a
// run they hold back waits. The GPU reasons come first, so a run that
// waits for GPUs is told so; then what no worker could ever hold
// (no_worker), then what is not free now (cpu, memory).

// neverFits reports, as no_worker, a run that no connected worker could
// hold with all its GPUs, cores and memory at once (f.sizes; none known:
// never).
func (f *fleet) neverFits(t *core.Task) (code, why string, ok bool) {
	if len(f.sizes) == 0 {
		return "", "", false
	}
	cpu, mem := need(t)
	gpus := t.GPUs
	if t.Fractional() {
		gpus = 1
	}
	var maxCPU, maxMem int64
	for _, z := range f.sizes {
		if z.GPUs < gpus || (gpus == 0 && z.Slots == 0) {
			continue // the GPU reasons speak of these
		}
		if z.CPUMillis >= cpu && z.MemoryMB >= mem {
			return "", "", false
		}
		maxCPU, maxMem = max(maxCPU, z.CPUMillis), max(maxMem, z.MemoryMB)
	}
	with := ""
	if gpus > 0 {
		with = fmt.Sprintf(" with %d GPU%s", gpus, plural(gpus))
	}
	switch {
	case cpu > maxCPU:
		return CodeNoWorker, fmt.Sprintf("needs %s, no worker%s has that many (the largest offers %s)",
			cores(cpu), with, cores(maxCPU)), true
	case mem > maxMem:
		return CodeNoWorker, fmt.Sprintf("needs %s of memory, no worker%s has that much (the largest offers %s)",
			core.FormatMB(mem), with, core.FormatMB(maxMem)), true
	}
	return CodeNoWorker, fmt.Sprintf("needs %s and %s of memory, no worker%s has both", cores(cpu),
		core.FormatMB(mem), with), true
}

// short reports, as cpu or memory, a run whose GPUs (or slot) are free
// somewhere now but not with its cores, or its memory, beside them.
func (f *fleet) short(t *core.Task) (code, why string, ok bool) {
	k := t.GPUs
	if k >= len(f.freeCPU) {
		return "", "", false
	}
	cpu, mem := need(t)
	where := "on a worker with a free CPU slot"
	if k > 0 {
		where = fmt.Sprintf("on a worker with %d free GPU%s", k, plural(k))
	}
	switch {
	case cpu > f.freeCPU[k]:
		return CodeCPU, fmt.Sprintf("needs %s, the most free %s is %s", cores(cpu), where, cores(f.freeCPU[k])), true
	case mem > f.freeMem[k]:
		return CodeMemory, fmt.Sprintf("needs %s of memory, the most free %s is %s", core.FormatMB(mem), where,
			core.FormatMB(f.freeMem[k])), true
	}
	return "", "", false
}

// cores writes thousandths of a core for a person: "1 core", "2.5 cores".
func cores(millis int64) string {
	if millis == 1000 {
		return "1 core"
	}
	return fmt.Sprintf("%g cores", float64(millis)/1000)
}
