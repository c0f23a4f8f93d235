package plan

import (
	"fmt"

	"github.com/rlsched/rlsched/core"
)

// CodeQuota is the code of a run waiting because its owner's quota of
// active GPUs or runs would be exceeded (API.md "Scheduling policy").
const CodeQuota = "quota"

// quotaGate is the quota rule: a run starts only while its owner's active
// GPUs and runs, with it, stay within their quota. Active counts the
// store's DISPATCHED and RUNNING runs (Snapshot.Users), the owner's runs of
// the queue in flight, and those this plan places. (The lease backend
// checks the same caps again as it claims, atomically across masters.)
type quotaGate struct {
	users  map[int64]User
	active map[int64]*use
}

// use is what an owner has active: GPUs in hundredths (a fractional run
// counts its fraction: issue 28), and runs.
type use struct{ gpus, runs int }

func newQuotaGate(s Snapshot, queue []core.Task) quotaGate {
	g := quotaGate{users: s.Users}
	for id, u := range s.Users {
		if u.MaxGPUs >= 0 || u.MaxRuns >= 0 {
			if g.active == nil {
				g.active = map[int64]*use{}
			}
			g.active[id] = &use{u.ActiveGPUs * 100, u.ActiveRuns}
		}
	}
	if g.active == nil {
		return g
	}
	for i := range queue {
		if _, ok := s.InFlight[queue[i].ID]; ok {
			g.take(&queue[i])
		}
	}
	return g
}

// full reports whether t must wait for its owner's quota.
func (g quotaGate) full(t *core.Task) bool {
	a := g.active[t.UserID]
	if a == nil {
		return false
	}
	u := g.users[t.UserID]
	return (u.MaxGPUs >= 0 && a.gpus+t.GPUHundredths()*t.Group() > u.MaxGPUs*100) || (u.MaxRuns >= 0 && a.runs+1 > u.MaxRuns)
}

// take counts t, placed, among its owner's active runs.
func (g quotaGate) take(t *core.Task) {
	if a := g.active[t.UserID]; a != nil {
		a.gpus += t.GPUHundredths() * t.Group()
		a.runs++
	}
}

// reason explains a run that waits for its owner's quota: the quota, what
// is active and what the run needs; a run over the quota by itself says it
// waits until the quota is raised.
func (g quotaGate) reason(t *core.Task) string {
	u, a := g.users[t.UserID], g.active[t.UserID]
	who := u.Name
	if who == "" {
		who = t.User
	}
	switch {
	case u.MaxGPUs >= 0 && t.GPUHundredths()*t.Group() > u.MaxGPUs*100:
		return fmt.Sprintf("needs %s, more than the quota of %s (%d GPU%s): it starts only once an admin raises the quota",
			core.FormatGPUs(t.GPUCount()*float64(t.Group())), who, u.MaxGPUs, plural(u.MaxGPUs))
	case u.MaxRuns == 0:
		return fmt.Sprintf("the quota of %s allows no active runs: it starts only once an admin raises the quota", who)
	case u.MaxGPUs >= 0 && a.gpus+t.GPUHundredths()*t.Group() > u.MaxGPUs*100:
		return fmt.Sprintf("needs %s; %s has %g of a quota of %d GPUs active", core.FormatGPUs(t.GPUCount()*float64(t.Group())), who, float64(a.gpus)/100, u.MaxGPUs)
	}
	return fmt.Sprintf("%s has %d of a quota of %d active runs", who, a.runs, u.MaxRuns)
}
