package dispatch

import (
	"context"
	"errors"
	"time"

	"github.com/rlsched/rlsched/codec/pb"
	"github.com/rlsched/rlsched/core"
	"github.com/rlsched/rlsched/store"
)

// Cancel implements httpapi.Control.
func (m *Dispatcher) Cancel(ctx context.Context, id string) (core.Task, error) {
	return m.cancelWith(ctx, id, "")
}

// cancelWith is the one cancel path: why, when not "", is the error the run
// ends with instead of "cancelled" (a cancel the master decides itself).
func (m *Dispatcher) cancelWith(ctx context.Context, id, why string) (core.Task, error) {
	msg := "cancelled"
	if why != "" {
		msg = why
	}
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
			if err := t.Cancel(msg, m.now()); err != nil {
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
			if rr := m.reg.requestCancel(id, why); rr != nil {
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
func (m *Dispatcher) resendCancel(rr *runRec) {
	sess := m.reg.cancelTarget(rr)
	if sess == nil {
		return
	}
	_ = sess.send(&pb.CancelTask{TaskId: rr.taskID, Attempt: int32(rr.attempt), Fence: rr.fence.Load(),
		Reason: "cancelled by a user", GraceMs: m.cfg.CancelGrace.Milliseconds()})
}

// cancelIdle cancels run id, idle on its GPUs, off the caller's goroutine
// (the shard's), through the normal cancel path: SIGTERM, the grace, the
// outputs uploaded; it ends CANCELLED with error why.
func (m *Dispatcher) cancelIdle(id, why string) {
	go func() {
		ctx, cancel := context.WithTimeout(m.ctx, 10*time.Second)
		defer cancel()
		if _, err := m.cancelWith(ctx, id, why); err != nil {
			m.log.Warn().Str("task", id).Err(err).Msg("cannot cancel a run idle on its GPUs")
			return
		}
		m.log.Info().Str("task", id).Msg("cancelling a run: " + why)
	}()
}
