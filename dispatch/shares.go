package dispatch

import (
	"slices"

	"github.com/rlsched/rlsched/core"
	"github.com/rlsched/rlsched/dispatch/plan"
)

// sharesLocked is w's GPUs that fractional runs hold part of, as the
// planner sees them (plan.Share: issue 28); nil when none. A run adopted
// from the store without the memory it was given counts none.
func (w *workerRec) sharesLocked() []plan.Share {
	var out []plan.Share
	for _, rr := range w.runs {
		if rr.share <= 0 || len(rr.gpus) != 1 || !rr.holds() {
			continue
		}
		g := rr.gpus[0]
		j := slices.IndexFunc(out, func(s plan.Share) bool { return s.Index == g })
		if j < 0 {
			var total int64
			if k := slices.IndexFunc(w.gpus, func(x core.GPU) bool { return x.Index == g }); k >= 0 {
				total = w.gpus[k].MemoryMB
			}
			out = append(out, plan.Share{Index: g, TotalMB: total, User: rr.userID})
			j = len(out) - 1
		} else if out[j].User != rr.userID {
			out[j].User = -1
		}
		out[j].Used += rr.share
		out[j].MemoryMB += rr.shareMB
	}
	return out
}
