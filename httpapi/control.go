package httpapi

import (
	"context"

	"github.com/rlsched/rlsched/core"
)

// Control is what the REST layer needs from the master's dispatcher. The
// dispatcher implements it; every method is safe to call from any goroutine.
type Control interface {
	// Notify wakes the scheduler after runs were queued (or the queue
	// changed otherwise): its next pass reads the queue again.
	Notify()
	// Queued tells the scheduler of one run just stored QUEUED here, and
	// wakes it: it may place the run without reading the queue again.
	Queued(t core.Task)
	// Cancel stops a run: a QUEUED run becomes CANCELLED at once; an active
	// run gets CancelTask sent to its worker and ends CANCELLED when the
	// worker reports. It returns the run as it stands after the request.
	// core.ErrNotFound for an unknown run, core.ErrConflict when it already
	// finished. Permission (owner or admin) is checked by the caller.
	Cancel(ctx context.Context, taskID string) (core.Task, error)
	// Workers lists every worker the master knows, connected or not.
	Workers() []core.WorkerInfo
	// MasterID names this master.
	MasterID() string
}
