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
	// One map lookup per run, not per comparison, and an unstable sort
	// with the store's position as the last key: a stable sort's merges
	// were a third of a plan of 100,000 runs.
	type key struct {
		prio  int
		usage float64
		pos   int
		t     *core.Task
	}
	keys := make([]key, len(live))
	for i, t := range live {
		keys[i] = key{t.Priority, s.Users[t.UserID].Usage, i, t}
	}
	slices.SortFunc(keys, func(a, b key) int {
		if a.prio != b.prio {
			return cmp.Compare(b.prio, a.prio)
		}
		if c := cmp.Compare(a.usage, b.usage); c != 0 {
			return c
		}
		return cmp.Compare(a.pos, b.pos)
	})
	for i, k := range keys {
		live[i] = k.t
	}
}
