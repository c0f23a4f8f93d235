package dispatch

import (
	"context"
	"errors"
	"time"

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
			now := time.Now().UTC()
			t.Status, t.FinishedAt, t.Error = core.StatusCancelled, &now, "cancelled"
			err := m.st.UpdateTask(ctx, &t, exp)
			if errors.Is(err, core.ErrFenced) {
				continue // dispatched meanwhile: cancel it on its worker
			}
			return t, err
		default:
			m.reg.mu.Lock()
			m.reg.cancels[id] = time.Now()
			rr := m.reg.runs[id]
			m.reg.mu.Unlock()
			if rr != nil {
				m.resendCancel(rr)
			}
			return t, nil
		}
	}
	return core.Task{}, core.ErrConflict
}

// resendCancel tells a run's worker to stop it if its cancel was requested.
func (m *Master) resendCancel(rr *runRec) {
	m.reg.mu.Lock()
	_, requested := m.reg.cancels[rr.taskID]
	var sess *session
	if w := m.reg.workers[rr.workerID]; w != nil {
		sess = w.sess
	}
	fence := rr.fence
	m.reg.mu.Unlock()
	if !requested || sess == nil || fence == 0 {
		return
	}
	_ = sess.send(&pb.CancelTask{TaskId: rr.taskID, Attempt: int32(rr.attempt), Fence: fence,
		Reason: "cancelled by a user", GraceMs: m.cfg.CancelGrace.Milliseconds()})
}
