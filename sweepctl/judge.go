package sweepctl

import (
	"cmp"
	"slices"
	"time"

	"github.com/rlsched/rlsched/core"
	"github.com/rlsched/rlsched/sweep/earlystop"
)

// Member is what Judge reads of a member's latest run: its id, when it
// started (nil: not yet), its status and the early-stopping metric's
// series as [step, value] pairs in step order.
type Member struct {
	TaskID    string
	StartedAt *time.Time
	Status    core.Status
	Series    [][2]float64
}

// Judgement is the early-stopping verdict of a sweep's members.
type Judgement struct {
	// Stops are the members the rule stopped, by task id, each with its
	// decision (Decision.Reason says why).
	Stops map[string]earlystop.Decision
	// Unreported are the members that have started (or ended) without a
	// point of the metric: never judged, so never stopped for lacking it.
	Unreported []string
	// New are the ASHA rung decisions, continues and stops, that were not
	// kept before, in the order the replay made them: the controller keeps
	// them (store.KeepSweepDecisions), so that the next replay holds them.
	New []earlystop.Decision
}

// event is one report of a member, as the replay feeds it.
type event struct {
	step    int64
	started int64 // the member's start, in ns: earlier starters first at a step
	member  int   // index in the members given
	value   float64
}

// Judge replays every member's series through a fresh Stopper of cfg in
// one order fixed by the data: by step, then by the members' start times,
// then by their order. A step's reports of every member come before any
// later step's, so a rung's cut is taken over the members that reached it
// at an earlier step; the same store gives every master, and a restarted
// one, the same stops. The decisions kept from earlier replays (kept) hold
// at their rungs: a member that continued at a rung is not stopped there
// when a member that reached the rung at an earlier step reports later.
func Judge(cfg earlystop.Config, members []Member, kept []earlystop.Decision) (Judgement, error) {
	st, err := earlystop.New(cfg)
	if err != nil {
		return Judgement{}, err
	}
	type key struct {
		member string
		rung   int
	}
	old := make(map[key]bool, len(kept))
	for _, d := range kept {
		st.Keep(d)
		old[key{d.Member, d.Rung}] = true
	}
	var evs []event
	j := Judgement{Stops: map[string]earlystop.Decision{}}
	for i, m := range members {
		var started int64
		if m.StartedAt != nil {
			started = m.StartedAt.UnixNano()
		}
		if len(m.Series) == 0 && (m.StartedAt != nil || m.Status.Terminal()) {
			j.Unreported = append(j.Unreported, m.TaskID)
		}
		for _, p := range m.Series {
			evs = append(evs, event{step: int64(p[0]), started: started, member: i, value: p[1]})
		}
	}
	slices.SortStableFunc(evs, func(a, b event) int {
		if c := cmp.Compare(a.step, b.step); c != 0 {
			return c
		}
		if c := cmp.Compare(a.started, b.started); c != 0 {
			return c
		}
		return cmp.Compare(a.member, b.member)
	})
	for _, e := range evs {
		id := members[e.member].TaskID
		if d, judged := st.Report(id, e.step, e.value); judged && d.Stop {
			if _, ok := j.Stops[id]; !ok {
				j.Stops[id] = d
			}
		}
	}
	ended := map[string]bool{}
	for _, m := range members {
		if m.Status.Terminal() {
			ended[m.TaskID] = true
		}
	}
	for _, d := range st.Decisions() {
		// A stop first judged after the member ended (its last report
		// crossed a rung as it finished) was never made: keeping it would
		// show a member that succeeded as stopped. Its value still counts
		// towards the others' cuts in every replay.
		if d.Rung >= 0 && !old[key{d.Member, d.Rung}] && !(d.Stop && ended[d.Member]) {
			j.New = append(j.New, d)
		}
	}
	return j, nil
}
