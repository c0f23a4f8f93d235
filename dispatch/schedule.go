package dispatch

import (
	"context"
	"errors"
	"time"

	"github.com/rlsched/rlsched/codec/pb"
	"github.com/rlsched/rlsched/core"
	"github.com/rlsched/rlsched/core/store"
)

// scheduleBatch is how many queued runs a pass reads. When none of them
// fits what is free, the pass looks scheduleDeep runs deep instead, so a
// head of the queue that fits nowhere now (say 256 runs wanting 8 GPUs on
// 4-GPU machines) cannot starve a run further back that would fit.
const (
	scheduleBatch = 256
	scheduleDeep  = 4096
)

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
//
// The capacities of all workers are built only when there is both a free
// resource somewhere and a queued run: every joining worker wakes the
// scheduler, and building them for 15,000 workers at each of those wakes,
// under the registry lock that every Hello also takes, was what made a
// reconnect storm slow.
func (m *Master) schedule(ctx context.Context) bool {
	m.reg.mu.Lock()
	free := m.reg.anyFreeLocked()
	m.reg.mu.Unlock()
	if !free {
		return false
	}
	tasks, err := m.st.QueuedTasks(ctx, scheduleBatch)
	if err != nil {
		if ctx.Err() == nil {
			m.log.Error().Err(err).Msg("cannot read the queue")
		}
		return false
	}
	if len(tasks) == 0 {
		return false
	}
	m.reg.mu.Lock()
	caps := m.reg.capacitiesLocked()
	m.reg.mu.Unlock()
	if len(caps) == 0 {
		return false
	}
	batch := m.placeAll(ctx, tasks, caps)
	if len(batch) == 0 && len(tasks) == scheduleBatch {
		// Nothing placed, so caps is untouched and still has room.
		deep, err := m.st.QueuedTasks(ctx, scheduleDeep)
		if err != nil {
			if ctx.Err() == nil {
				m.log.Error().Err(err).Msg("cannot read the queue")
			}
			return false
		}
		if len(deep) > scheduleBatch {
			batch = m.placeAll(ctx, deep[scheduleBatch:], caps)
		}
	}
	return m.dispatch(ctx, batch) > 0 && len(tasks) == scheduleBatch
}

// placeAll places the runs of tasks that fit caps, in order, taking what
// each uses from caps, and claims their leases.
func (m *Master) placeAll(ctx context.Context, tasks []core.Task, caps []capacity) []*placement {
	var batch []*placement
	for i := range tasks {
		t := &tasks[i]
		w, gpus := place(t.GPUs, caps)
		if w < 0 {
			continue // does not fit now; smaller runs behind it may (backfill)
		}
		take(caps, w, gpus)
		if p := m.claim(ctx, t, caps[w].workerID, gpus); p != nil {
			batch = append(batch, p)
		}
	}
	return batch
}

// placement is a run the scheduler placed and claimed a lease for, not yet
// recorded in the store.
type placement struct {
	t     *core.Task
	rr    *runRec
	gpus  []int
	fence uint64
	exp   store.Expect
}

// claim registers t as placed on workerID and claims its lease; nil when
// the worker is gone, the run is already placed or the claim failed.
func (m *Master) claim(ctx context.Context, t *core.Task, workerID string, gpus []int) *placement {
	rr := &runRec{taskID: t.ID, attempt: t.Attempt, traceID: t.TraceID, workerID: workerID, gpus: gpus}
	m.reg.mu.Lock()
	w := m.reg.workers[workerID]
	if w == nil || w.sess == nil || m.reg.runs[t.ID] != nil {
		m.reg.mu.Unlock()
		return nil
	}
	m.reg.addRunLocked(rr)
	m.reg.mu.Unlock()

	fence, err := m.ls.Claim(ctx, t.ID, workerID, m.cfg.LeaseTTL)
	if err != nil {
		ev := m.log.Warn()
		if errors.Is(err, core.ErrLeaseHeld) { // another master took it first: a normal race
			ev = m.log.Debug()
		}
		ev.Str("task", t.ID).Err(err).Msg("cannot claim run")
		m.unplace(rr)
		return nil
	}
	return &placement{t: t, rr: rr, gpus: gpus, fence: fence, exp: store.Expect{Fence: t.Fence, Status: core.StatusQueued}}
}

// unplace forgets a placement that did not happen.
func (m *Master) unplace(rr *runRec) {
	m.reg.mu.Lock()
	if m.reg.runs[rr.taskID] == rr {
		m.reg.removeRunLocked(rr.taskID)
	}
	m.reg.mu.Unlock()
}

// dispatch records every placement in the store at once (QUEUED →
// DISPATCHED, fenced, one UpdateTasks: one commit for the whole pass), then
// sends each recorded run's ExecuteTask. It returns how many were recorded.
func (m *Master) dispatch(ctx context.Context, batch []*placement) int {
	if len(batch) == 0 {
		return 0
	}
	us := make([]store.Update, len(batch))
	for i, p := range batch {
		t := p.t
		t.Status, t.Fence, t.Worker, t.GPUIndices, t.Error = core.StatusDispatched, p.fence, p.rr.workerID, p.gpus, ""
		us[i] = store.Update{Task: t, Expect: p.exp}
	}
	errs := m.st.UpdateTasks(ctx, us)
	placed := 0
	for i, p := range batch {
		if errs[i] != nil {
			// Cancelled or taken meanwhile: give the lease back.
			_ = m.ls.Release(ctx, p.t.ID, p.fence)
			m.unplace(p.rr)
			continue
		}
		placed++
		m.send(p)
	}
	return placed
}

// send tells a recorded placement's worker to start it.
func (m *Master) send(p *placement) {
	t, rr, fence, workerID, gpus := p.t, p.rr, p.fence, p.rr.workerID, p.gpus
	m.reg.mu.Lock()
	rr.fence, rr.view = fence, t
	var sess *session
	if w := m.reg.workers[workerID]; w != nil {
		sess = w.sess
	}
	_, cancelRequested := m.reg.cancels[t.ID]
	m.reg.mu.Unlock()

	msg := &pb.ExecuteTask{TaskId: t.ID, Attempt: int32(t.Attempt), Fence: fence, Argv: t.Command, Env: t.Env,
		Workdir: t.Workdir, TraceId: t.TraceID, TimeoutSeconds: int64(t.TimeoutSeconds), ParamsJson: string(t.Params), User: t.User}
	for _, g := range gpus {
		msg.GpuIndices = append(msg.GpuIndices, int32(g))
	}
	var err error
	if sess == nil {
		err = errNoSession
	} else {
		err = sess.send(msg)
	}
	if err != nil {
		// The lease expires and the reaper requeues the run.
		m.log.Warn().Str("task", t.ID).Str("worker", workerID).Err(err).Msg("cannot send ExecuteTask")
		return
	}
	m.workerChanged(workerID)
	m.log.Info().Str("task", t.ID).Str("worker", workerID).Ints("gpus", gpus).Int("attempt", t.Attempt).Uint64("fence", fence).Msg("run dispatched")
	if cancelRequested {
		m.resendCancel(rr)
	}
}
