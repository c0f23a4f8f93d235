package plan

import (
	"fmt"

	"github.com/rlsched/rlsched/core"
)

// CodeSweepLimit is the code of a member of a sweep waiting because the
// sweep has maxParallel members active already (API.md "Sweeps and seed
// groups").
const CodeSweepLimit = "sweep_limit"

// sweepGate is the sweep_limit rule: a run of a sweep with a cap starts only
// while fewer than the cap of its members are active. Active counts the
// store's DISPATCHED and RUNNING members (Snapshot.Sweeps), the members of
// the queue in flight, and those this plan places.
type sweepGate struct {
	limits map[string]core.SweepLimit
	active map[string]int
}

func newSweepGate(s Snapshot, queue []core.Task) sweepGate {
	g := sweepGate{limits: s.Sweeps}
	if len(g.limits) == 0 {
		return g
	}
	g.active = make(map[string]int, len(g.limits))
	for id, l := range g.limits {
		g.active[id] = l.Active
	}
	for i := range queue {
		t := &queue[i]
		if _, ok := s.InFlight[t.ID]; ok {
			g.take(t)
		}
	}
	return g
}

// full reports whether t must wait for its sweep.
func (g sweepGate) full(t *core.Task) bool {
	l, ok := g.limits[t.SweepID]
	return ok && t.SweepID != "" && g.active[t.SweepID] >= l.MaxParallel
}

// take counts t, placed, among its sweep's active members.
func (g sweepGate) take(t *core.Task) {
	if _, ok := g.limits[t.SweepID]; ok && t.SweepID != "" {
		g.active[t.SweepID]++
	}
}

// reason explains a run that waits for its sweep.
func (g sweepGate) reason(t *core.Task) string {
	l := g.limits[t.SweepID]
	return fmt.Sprintf("its sweep %s has %d of at most %d members running (maxParallel)",
		t.SweepID, g.active[t.SweepID], l.MaxParallel)
}
