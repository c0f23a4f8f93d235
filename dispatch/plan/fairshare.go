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
	if len(s.Users) == 0 && !s.SessionsFirst {
		return // the store's order is priority, then age, already
	}
	// The three keys as ranks packed into one integer, sorted as integers
	// (a third of the comparison sort's time over 100,000 runs, which was
	// most of the scheduler's pass), unless the ranks do not fit the bits.
	prios := make([]int, 0, 8)
	usages := make([]float64, 0, len(s.Users))
	for _, t := range live {
		prios = append(prios, t.Priority)
	}
	for _, u := range s.Users {
		usages = append(usages, u.Usage)
	}
	usages = append(usages, 0) // owners Users lacks
	slices.Sort(prios)
	prios = slices.Compact(prios)
	slices.Sort(usages)
	usages = slices.Compact(usages)
	const posBits, usageBits, prioBits = 32, 20, 12
	if len(live) >= 1<<posBits || len(usages) >= 1<<usageBits || 2*len(prios) >= 1<<prioBits {
		fairOrderSlow(s, live)
		return
	}
	rank := make(map[int64]uint64, len(s.Users)) // owner → usage rank
	keys := make([]uint64, len(live))
	for i, t := range live {
		ur, ok := rank[t.UserID]
		if !ok {
			u, _ := slices.BinarySearch(usages, s.Users[t.UserID].Usage)
			ur = uint64(u)
			rank[t.UserID] = ur
		}
		p, _ := slices.BinarySearch(prios, t.Priority)
		pr := uint64(len(prios)-1-p) << 1 // higher priority first
		if s.SessionsFirst && t.Kind != core.KindInteractive {
			pr |= 1 // then sessions before batch runs
		}
		keys[i] = pr<<(posBits+usageBits) | ur<<posBits | uint64(i)
	}
	slices.Sort(keys)
	orig := slices.Clone(live)
	for i, k := range keys {
		live[i] = orig[k&(1<<posBits-1)]
	}
}

// fairOrderSlow is fairOrder by comparisons, for queues too large for its
// packed keys.
func fairOrderSlow(s Snapshot, live []*core.Task) {
	type key struct {
		prio  int
		batch int // 1: a batch run behind sessions (SessionsFirst)
		usage float64
		pos   int
		t     *core.Task
	}
	keys := make([]key, len(live))
	for i, t := range live {
		batch := 0
		if s.SessionsFirst && t.Kind != core.KindInteractive {
			batch = 1
		}
		keys[i] = key{t.Priority, batch, s.Users[t.UserID].Usage, i, t}
	}
	slices.SortFunc(keys, func(a, b key) int {
		if a.prio != b.prio {
			return cmp.Compare(b.prio, a.prio)
		}
		if a.batch != b.batch {
			return cmp.Compare(a.batch, b.batch)
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
