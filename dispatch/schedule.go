package dispatch

import (
	"context"
	"time"

	"github.com/rlsched/rlsched/codec/pb"
	"github.com/rlsched/rlsched/core"
	"github.com/rlsched/rlsched/core/store"
)

const scheduleBatch = 256

// scheduleLoop places queued runs whenever woken (a submission, a worker
// joining, a run ending) and once a second as a safety net.
func (m *Master) scheduleLoop(ctx context.Context) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-m.wake:
		case <-tick.C:
		}
		for m.schedule(ctx) {
		}
	}
}

// schedule runs one pass and reports whether another may place more.
func (m *Master) schedule(ctx context.Context) bool {
	m.reg.mu.Lock()
	caps := m.reg.capacitiesLocked()
	m.reg.mu.Unlock()
	if len(caps) == 0 {
		return false
	}
	tasks, err := m.st.QueuedTasks(ctx, scheduleBatch)
	if err != nil {
		if ctx.Err() == nil {
			m.log.Error().Err(err).Msg("cannot read the queue")
		}
		return false
	}
	placed := 0
	for i := range tasks {
		t := &tasks[i]
		w, gpus := place(t.GPUs, caps)
		if w < 0 {
			continue // does not fit now; smaller runs behind it may (backfill)
		}
		take(caps, w, gpus)
		if m.dispatch(ctx, t, caps[w].workerID, gpus) {
			placed++
		}
	}
	return placed > 0 && len(tasks) == scheduleBatch
}

// dispatch claims a lease for t on workerID, records the placement in the
// store (QUEUED → DISPATCHED, fenced) and sends ExecuteTask.
func (m *Master) dispatch(ctx context.Context, t *core.Task, workerID string, gpus []int) bool {
	rr := &runRec{taskID: t.ID, attempt: t.Attempt, traceID: t.TraceID, workerID: workerID, gpus: gpus}
	m.reg.mu.Lock()
	w := m.reg.workers[workerID]
	if w == nil || w.sess == nil || m.reg.runs[t.ID] != nil {
		m.reg.mu.Unlock()
		return false
	}
	m.reg.addRunLocked(rr)
	m.reg.mu.Unlock()

	undo := func() {
		m.reg.mu.Lock()
		if m.reg.runs[t.ID] == rr {
			m.reg.removeRunLocked(t.ID)
		}
		m.reg.mu.Unlock()
	}
	fence, err := m.ls.Claim(ctx, t.ID, workerID, m.cfg.LeaseTTL)
	if err != nil {
		m.log.Warn().Str("task", t.ID).Err(err).Msg("cannot claim run")
		undo()
		return false
	}
	exp := store.Expect{Fence: t.Fence, Status: core.StatusQueued}
	t.Status, t.Fence, t.Worker, t.GPUIndices, t.Error = core.StatusDispatched, fence, workerID, gpus, ""
	if err := m.st.UpdateTask(ctx, t, exp); err != nil {
		// Cancelled or taken meanwhile: give the lease back.
		_ = m.ls.Release(ctx, t.ID, fence)
		undo()
		return false
	}
	m.reg.mu.Lock()
	rr.fence = fence
	sess := m.reg.workers[workerID].sess
	_, cancelRequested := m.reg.cancels[t.ID]
	m.reg.mu.Unlock()

	msg := &pb.ExecuteTask{TaskId: t.ID, Attempt: int32(t.Attempt), Fence: fence, Argv: t.Command, Env: t.Env,
		Workdir: t.Workdir, TraceId: t.TraceID, TimeoutSeconds: int64(t.TimeoutSeconds), ParamsJson: string(t.Params)}
	for _, g := range gpus {
		msg.GpuIndices = append(msg.GpuIndices, int32(g))
	}
	if sess == nil {
		err = errNoSession
	} else {
		err = sess.send(msg)
	}
	if err != nil {
		// The lease expires and the reaper requeues the run.
		m.log.Warn().Str("task", t.ID).Str("worker", workerID).Err(err).Msg("cannot send ExecuteTask")
		return true
	}
	m.workerChanged(workerID)
	m.log.Info().Str("task", t.ID).Str("worker", workerID).Ints("gpus", gpus).Int("attempt", t.Attempt).Uint64("fence", fence).Msg("run dispatched")
	if cancelRequested {
		m.resendCancel(rr)
	}
	return true
}
