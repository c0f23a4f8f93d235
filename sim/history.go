package sim

import (
	"fmt"

	"github.com/rlsched/rlsched/core"
)

// FromTasks is the trace of a master's own runs (rlsched sim --trace
// history: GET /api/tasks): each run that started and ended is a job
// submitted at its createdAt, running from its startedAt to its finishedAt
// (the last attempt's: what the store keeps), with its GPUs, owner,
// priority and preemptibility. A run that has not ended is listed with
// its status.
func FromTasks(ts []core.Task) *Trace {
	tr := &Trace{}
	for _, t := range ts {
		if t.StartedAt == nil || t.FinishedAt == nil {
			tr.skip(t.ID, fmt.Sprintf("it has not run to its end (%s)", t.Status))
			continue
		}
		tr.add(Job{ID: t.ID, User: t.User, Submit: t.CreatedAt, Duration: t.FinishedAt.Sub(*t.StartedAt), GPUs: t.GPUs,
			Priority: t.Priority, Preemptible: t.Preemptible})
	}
	tr.sortJobs()
	return tr
}
