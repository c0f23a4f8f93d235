package plan

import (
	"fmt"
	"slices"
)

// CodeGPUForeign is the code of a run waiting because the GPUs it would fit
// on hold a process rlsched did not start (API.md "GPUs").
const CodeGPUForeign = "gpu_foreign"

// foreignRule is the gpu_foreign rule: a GPU with a foreign process
// (Worker.ForeignGPUs) is given to no new run. The planner places on the
// free lists without those GPUs; the rule remembers how many each worker
// had, to tell a run that waits only because of them.
type foreignRule struct {
	// foreign counts, per worker id, its free GPUs that hold a foreign
	// process; total sums them.
	foreign map[string]int
	total   int
}

// withoutForeign returns free with each worker's foreign GPUs taken out of
// its free list (copies; free is not changed), and the rule's memory.
// UsableGPUs counts w's free GPUs a new run may get: those no foreign
// process holds (preemption's free count: a foreign-held GPU is no room).
func UsableGPUs(w Worker) int {
	n := 0
	for _, g := range w.FreeGPUs {
		if !slices.Contains(w.ForeignGPUs, g) {
			n++
		}
	}
	return n
}

func withoutForeign(free []Worker) ([]Worker, foreignRule) {
	var r foreignRule
	out := make([]Worker, len(free))
	for i, w := range free {
		out[i] = w
		if len(w.ForeignGPUs) == 0 {
			continue
		}
		kept := make([]int, 0, len(w.FreeGPUs))
		for _, g := range w.FreeGPUs {
			if slices.Contains(w.ForeignGPUs, g) {
				if r.foreign == nil {
					r.foreign = map[string]int{}
				}
				r.foreign[w.ID]++
				r.total++
			} else {
				kept = append(kept, g)
			}
		}
		out[i].FreeGPUs = kept
		// A shared GPU with a foreign process takes no more shares.
		out[i].Shares = slices.DeleteFunc(slices.Clone(w.Shares), func(s Share) bool { return slices.Contains(w.ForeignGPUs, s.Index) })
	}
	return out, r
}

// blocks reports whether a run of gpus GPUs left queued fits on none of
// left (what the plan left free) but would on one of them with its foreign
// GPUs, and why it waits then.
func (r foreignRule) blocks(gpus int, left []Worker) (string, bool) {
	if r.total == 0 || gpus == 0 {
		return "", false
	}
	would := false
	for _, w := range left {
		if len(w.FreeGPUs) >= gpus {
			return "", false // it fits now: something else holds it back
		}
		would = would || len(w.FreeGPUs)+r.foreign[w.ID] >= gpus
	}
	if !would {
		return "", false
	}
	held := "1 GPU no run holds has a process rlsched did not start"
	if r.total != 1 {
		held = fmt.Sprintf("%d GPUs no run holds have processes rlsched did not start", r.total)
	}
	return fmt.Sprintf("needs %d GPU%s; %s", gpus, plural(gpus), held), true
}
