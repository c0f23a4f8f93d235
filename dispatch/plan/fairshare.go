package plan

import (
	"cmp"
	"slices"

	"github.com/rlsched/rlsched/core"
)

// User is what the planner knows of the owner of queued runs: their fair-
// share usage, what they have active in the store, and their quota (API.md
// "Scheduling policy").
type User struct {
	Name string
	// Usage is the owner's decayed GPU-seconds, running runs included
	// (store.Scheduling.Usage).
	Usage float64
	// ActiveGPUs and ActiveRuns are of the owner's DISPATCHED and RUNNING
	// runs, every master's.
	ActiveGPUs, ActiveRuns int
	// MaxGPUs and MaxRuns are the quota; < 0: no cap.
	MaxGPUs, MaxRuns int
}

// fairOrder sorts live into serving order: priority (higher first), then
// the owner's usage (lower first: fair share), then the store's order
// (oldest first), which the stable sort keeps among equals. A run whose
// owner Users lacks counts usage 0.
func fairOrder(s Snapshot, live []*core.Task) {
	if len(s.Users) == 0 {
		return // the store's order is priority, then age, already
	}
	usage := func(t *core.Task) float64 { return s.Users[t.UserID].Usage }
	slices.SortStableFunc(live, func(a, b *core.Task) int {
		if a.Priority != b.Priority {
			return cmp.Compare(b.Priority, a.Priority)
		}
		return cmp.Compare(usage(a), usage(b))
	})
}
