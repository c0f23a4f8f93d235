package dispatch

import (
	"context"
	"errors"

	"github.com/rlsched/rlsched/codec/pb"
	"github.com/rlsched/rlsched/core"
	"github.com/rlsched/rlsched/core/store"
)

// Cancel implements httpapi.Control.
func (m *Master) Cancel(ctx context.Context, id string) (core.Task, error) {
	for try := 0; try < 5; try++ {
		t, err := m.st.Task(ctx, id)
		if err != nil {
			return t, err
		}
		switch {
		case t.Status.Terminal():
			return t, core.ErrConflict
		case t.Status == core.StatusQueued || t.Status == core.StatusLost:
			exp := store.Expect{Fence: t.Fence, Status: t.Status}
			if err := t.Cancel("cancelled", m.now()); err != nil {
				return t, err
			}
			err := m.st.UpdateTask(ctx, &t, exp)
			if errors.Is(err, core.ErrFenced) {
				continue // dispatched meanwhile: cancel it on its worker
			}
			return t, err
		default:
			// Recorded in the store first: the master that holds (or later
			// re-adopts) the run's worker may be another one, or this one
			// after a restart.
			if err := m.st.RequestCancel(ctx, id); err != nil {
				return t, err
			}
			if rr := m.reg.requestCancel(id); rr != nil {
				m.resendCancel(rr)
			}
			if m.cfg.OnCancel != nil {
				m.cfg.OnCancel(id)
			}
			return t, nil
		}
	}
	return core.Task{}, core.ErrConflict
}

// resendCancel tells a run's worker to stop it if its cancel was requested.
func (m *Master) resendCancel(rr *runRec) {
	sess := m.reg.cancelTarget(rr)
	if sess == nil {
		return
	}
	_ = sess.send(&pb.CancelTask{TaskId: rr.taskID, Attempt: int32(rr.attempt), Fence: rr.fence.Load(),
		Reason: "cancelled by a user", GraceMs: m.cfg.CancelGrace.Milliseconds()})
}
