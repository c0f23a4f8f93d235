package plan

import (
	"cmp"
	"math"
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
	// A stable counting sort on the three keys' ranks: live is in the
	// store's order already, which a stable pass keeps among equals, so a
	// pass over the runs and one over the buckets replace sorting 100,000
	// keys (a quarter of the planner's pass, issue 28's ≤ 20 ms), unless
	// there are more buckets than runs to make that pay.
	prios := make([]int, 0, 8)
	usages := make([]float64, 0, len(s.Users))
	for _, t := range live {
		if len(prios) == 0 || prios[len(prios)-1] != t.Priority { // few, and in runs: the store orders by priority
			prios = append(prios, t.Priority)
		}
	}
	for _, u := range s.Users {
		usages = append(usages, u.Usage)
	}
	usages = append(usages, 0) // owners Users lacks
	slices.Sort(prios)
	prios = slices.Compact(prios)
	slices.Sort(usages)
	usages = slices.Compact(usages)
	nu := len(usages)
	nb := 2 * len(prios) * nu // priority (higher first), then sessions first, then usage
	if nb > len(live)+1<<16 || len(live) >= math.MaxInt32 {
		fairOrderSlow(s, live)
		return
	}
	rank := make(map[int64]int, len(s.Users)) // owner → usage rank
	bucket := make([]int32, len(live))
	start := make([]int32, nb+1)
	for i, t := range live {
		ur, ok := rank[t.UserID]
		if !ok {
			ur, _ = slices.BinarySearch(usages, s.Users[t.UserID].Usage)
			rank[t.UserID] = ur
		}
		p, _ := slices.BinarySearch(prios, t.Priority)
		pr := 2 * (len(prios) - 1 - p)
		if s.SessionsFirst && t.Kind != core.KindInteractive {
			pr++ // then sessions before batch runs
		}
		b := pr*nu + ur
		bucket[i] = int32(b)
		start[b+1]++
	}
	for b := 1; b <= nb; b++ {
		start[b] += start[b-1]
	}
	orig := slices.Clone(live)
	for i, t := range orig {
		b := bucket[i]
		live[start[b]] = t
		start[b]++
	}
}

// fairOrderSlow is fairOrder by comparisons, for snapshots with more
// (priority, usage) buckets than runs, and the tests' reference.
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
