package dispatch

import (
	"context"
	"errors"

	"github.com/rlsched/rlsched/core"
	"github.com/rlsched/rlsched/store"
)

// The task-view cache: runRec.view is the run as this master last wrote it
// while holding the run, so a fenced update can skip reading the run first.
//
// The fenced swap on (fence, status) succeeds only if nobody changed the
// status since, and every write of a run but the final reward changes its
// status (a fence's statuses never repeat: core.Transitions), so when the
// swap succeeds the other fields are as the view has them. A final reward
// drops the view (dropView, from LogAcked), as does a new session of the
// run's worker (registry.join: another master may have held the run).

// updateTask applies change to the stored run id if it still carries fence,
// retrying when a concurrent writer with the same fence moved the status.
// change returns false to leave the run alone. rr, when not nil, is the run
// as placed here: its view is tried first, without reading the run; when
// the swap fails, or change declines the view, the run is read.
func (d *Dispatcher) updateTask(ctx context.Context, rr *runRec, id string, fence uint64, change func(*core.Task) bool) error {
	if v, ok := rr.viewAt(fence); ok {
		exp := store.Expect{Fence: v.Fence, Status: v.Status}
		if change(&v) {
			err := d.st.UpdateTask(ctx, &v, exp)
			if err == nil {
				rr.setView(fence, &v)
				return nil
			}
			if !errors.Is(err, core.ErrFenced) {
				return err
			}
		}
	}
	for try := 0; try < 5; try++ {
		t, err := d.st.Task(ctx, id)
		if err != nil {
			return err
		}
		if t.Fence != fence {
			return core.ErrFenced
		}
		exp := store.Expect{Fence: t.Fence, Status: t.Status}
		if !change(&t) {
			return nil
		}
		err = d.st.UpdateTask(ctx, &t, exp)
		if err == nil {
			rr.setView(fence, &t)
		}
		if !errors.Is(err, core.ErrFenced) {
			return err
		}
	}
	return core.ErrFenced
}

// viewAt returns a copy of rr's view when it is of fence.
func (rr *runRec) viewAt(fence uint64) (core.Task, bool) {
	if rr == nil {
		return core.Task{}, false
	}
	v := rr.view.Load()
	if v == nil || v.Fence != fence {
		return core.Task{}, false
	}
	return *v, true
}

// setView records t, just written under fence, as rr's view.
func (rr *runRec) setView(fence uint64, t *core.Task) {
	if rr != nil && t.Fence == fence {
		rr.view.Store(t)
	}
}

// dropView forgets the view of the run id: the next update reads the run.
func (d *Dispatcher) dropView(id string) {
	if rr := d.reg.run(id); rr != nil {
		rr.view.Store(nil)
	}
}
