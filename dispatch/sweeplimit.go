package dispatch

import (
	"context"

	"github.com/rlsched/rlsched/core"
)

// sweepLimits reads the caps and active members of the sweeps that runs of
// queue are members of (plan.Snapshot.Sweeps); nil, without a store read,
// when none is. Read after the queue: a member that becomes DISPATCHED in
// between is then counted twice (held back one pass), never missed.
//
// With several masters, each reads the store's count; two masters placing
// members of one sweep in the same instant can exceed its cap by what they
// place then.
func (in *planInputs) sweepLimits(ctx context.Context, queue []core.Task) (map[string]core.SweepLimit, error) {
	var ids []string
	seen := map[string]bool{}
	for i := range queue {
		if id := queue[i].SweepID; id != "" && !seen[id] {
			seen[id] = true
			ids = append(ids, id)
		}
	}
	if len(ids) == 0 {
		return nil, nil
	}
	return in.st.SweepLimits(ctx, ids)
}
