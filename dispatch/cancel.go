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
			now := m.now().UTC()
			t.Status, t.FinishedAt, t.Error = core.StatusCancelled, &now, "cancelled"
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
			m.reg.mu.Lock()
			m.reg.cancels[id] = m.now()
			rr := m.reg.runs[id]
			m.reg.mu.Unlock()
			if rr != nil {
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

// CancelNotified delivers a cancel that another master recorded: when this
// master holds the run's worker, the worker is told at once. A run it does
// not hold is left to the master that does (or to the store check when the
// worker re-adopts the run here).
func (m *Master) CancelNotified(id string) {
	m.reg.mu.Lock()
	rr := m.reg.runs[id]
	if rr != nil {
		m.reg.cancels[id] = m.now()
	}
	m.reg.mu.Unlock()
	if rr != nil {
		m.resendCancel(rr)
	}
}

// loadCancels marks the runs among ids whose cancel the store records, so a
// run re-adopted here (after a restart, or from another master) is
// stopped, and ends CANCELLED.
func (m *Master) loadCancels(ctx context.Context, ids []string) {
	if len(ids) == 0 {
		return
	}
	req, err := m.st.CancelRequested(ctx, ids)
	if err != nil {
		m.log.Warn().Err(err).Msg("cannot read cancel requests")
		return
	}
	if len(req) == 0 {
		return
	}
	now := m.now()
	m.reg.mu.Lock()
	for id := range req {
		if m.reg.runs[id] != nil {
			m.reg.cancels[id] = now
		}
	}
	m.reg.mu.Unlock()
}

// helloFromStore prepares the registry for a worker's Hello (hello.go calls
// it first): a run the worker lists that this master did not place — a
// master that died placed it, after this one started — is taken over when
// the store has it active on this worker with the same attempt and fence;
// and the persisted cancel requests of the listed runs are loaded, so the
// adoption that follows tells the worker to stop them.
func (m *Master) helloFromStore(ctx context.Context, h *pb.Hello) {
	ids := make([]string, 0, len(h.Runs))
	for _, ref := range h.Runs {
		ids = append(ids, ref.TaskId)
		m.reg.mu.Lock()
		known := m.reg.runs[ref.TaskId] != nil
		m.reg.mu.Unlock()
		if known || ref.Fence == 0 {
			continue
		}
		t, err := m.st.Task(ctx, ref.TaskId)
		if err != nil || !t.Status.Active() || t.Worker != h.WorkerId || t.Fence != ref.Fence || t.Attempt != int(ref.Attempt) {
			continue // not the run the store knows: the Hello handling kills it
		}
		m.reg.mu.Lock()
		if m.reg.runs[t.ID] == nil {
			m.reg.addRunLocked(&runRec{taskID: t.ID, attempt: t.Attempt, fence: t.Fence, traceID: t.TraceID,
				workerID: t.Worker, gpus: t.GPUIndices, started: t.Status == core.StatusRunning})
		}
		m.reg.mu.Unlock()
	}
	m.loadCancels(ctx, ids)
}

// sweepCancels looks up, in the store, cancel requests of the runs on this
// master's connected workers that it has not seen, and delivers them: the
// cross-master notification is best effort (pub/sub keeps nothing for a
// master that was briefly disconnected), the store is not.
func (m *Master) sweepCancels(ctx context.Context) {
	var ids []string
	m.reg.mu.Lock()
	for id, rr := range m.reg.runs {
		if _, ok := m.reg.cancels[id]; ok || rr.fence == 0 {
			continue
		}
		if w := m.reg.workers[rr.workerID]; w != nil && w.sess != nil {
			ids = append(ids, id)
		}
	}
	m.reg.mu.Unlock()
	if len(ids) == 0 {
		return
	}
	req, err := m.st.CancelRequested(ctx, ids)
	if err != nil {
		if ctx.Err() == nil {
			m.log.Warn().Err(err).Msg("cannot read cancel requests")
		}
		return
	}
	for id := range req {
		m.CancelNotified(id)
	}
}

// RemoteTaskChanged takes a run change another master made (several
// masters): a queued run wakes the scheduler, and a run this master keeps
// only from recovery — its worker is not connected here — is forgotten once
// it ended or moved on, so this master's view of that worker does not
// list it for ever. A run whose worker is connected here is left alone:
// this master hears of it from the worker itself.
func (m *Master) RemoteTaskChanged(t core.Task) {
	if t.Status == core.StatusQueued {
		m.Notify()
	}
	m.reg.mu.Lock()
	rr := m.reg.runs[t.ID]
	gone := rr != nil && rr.fence != 0 && (!t.Status.Active() || t.Fence != rr.fence || t.Worker != rr.workerID)
	if gone {
		if w := m.reg.workers[rr.workerID]; w != nil && w.sess != nil {
			gone = false
		}
	}
	if gone {
		m.reg.removeRunLocked(t.ID)
	}
	m.reg.mu.Unlock()
	if gone {
		m.workerChanged(rr.workerID)
	}
}
