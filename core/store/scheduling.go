package store

import (
	"context"

	"github.com/rlsched/rlsched/core"
)

// Scheduling is the part of Store behind the scheduling policy (API.md
// "Scheduling policy": priority rights, fair share, quotas). It is
// embedded in Store; every backend implements it.
type Scheduling interface {
	// SetPriority changes the priority of a QUEUED run and returns the run
	// as written. core.ErrNotFound for an unknown run, core.ErrConflict
	// when it is no longer QUEUED.
	SetPriority(ctx context.Context, id string, priority int) (core.Task, error)
}

// SetPriority changes a queued run's priority and publishes it. Priority is
// the one field remembered with the fixed ones that changes (only while
// QUEUED), so the memory of the run is dropped and rebuilt from the write.
func (ts *publisher) SetPriority(ctx context.Context, id string, priority int) (core.Task, error) {
	defer ts.locks.lock(id)()
	t, err := ts.Store.SetPriority(ctx, id, priority)
	if err != nil {
		return t, err
	}
	ts.forget(id)
	ts.remember(&t)
	ts.sink.TaskChanged(t)
	return t, nil
}
