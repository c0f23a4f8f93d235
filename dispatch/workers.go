package dispatch

import (
	"fmt"

	"github.com/rlsched/rlsched/core"
)

// workerChanged reports a worker's new view to Config.OnWorker.
func (m *Dispatcher) workerChanged(id string) {
	if m.cfg.OnWorker == nil {
		return
	}
	if info, ok := m.reg.info(id, m.cfg.MasterID); ok {
		m.cfg.OnWorker(info)
	}
}

// Workers lists every known worker, sorted by id.
func (m *Dispatcher) Workers() []core.WorkerInfo { return m.reg.infos(m.cfg.MasterID) }

// DrainWorker sets whether worker id takes new runs: a draining worker
// finishes the runs it has and is given none (state DRAINING while
// connected), also after it reconnects, until undrained. It returns the
// worker's view; core.ErrNotFound when this master does not know it.
func (m *Dispatcher) DrainWorker(id string, drain bool) (core.WorkerInfo, error) {
	if !m.reg.drain(id, drain) {
		return core.WorkerInfo{}, core.ErrNotFound
	}
	m.log.Info().Str("worker", id).Bool("drain", drain).Msg("worker drain changed")
	m.workerChanged(id)
	if !drain {
		m.wakeScheduler() // its free GPUs count again
	}
	info, _ := m.reg.info(id, m.cfg.MasterID)
	return info, nil
}

// ForgetWorker drops a DOWN worker from the list: core.ErrNotFound when
// unknown, core.ErrConflict (with its state) when it is not DOWN. A
// worker that comes back is known again.
func (m *Dispatcher) ForgetWorker(id string) error {
	st, err := m.reg.forget(id)
	if err != nil {
		return fmt.Errorf("cannot forget worker %s (%s): %w", id, st, err)
	}
	m.log.Info().Str("worker", id).Msg("worker forgotten")
	return nil
}

// forgetDown drops the workers DOWN for longer than Config.ForgetAfter.
func (m *Dispatcher) forgetDown() {
	if ids := m.reg.forgetDown(m.now().Add(-m.cfg.ForgetAfter)); len(ids) > 0 {
		m.log.Info().Strs("workers", ids).Dur("after", m.cfg.ForgetAfter).Msg("forgot workers down for long")
	}
}

// Backlog is the number of worker reports waiting on the dispatcher's
// shards (the planner's inputs, for the metrics).
func (m *Dispatcher) Backlog() int {
	n := 0
	for _, s := range m.shards {
		n += int(s.pending.Load())
	}
	return n
}

// GPUUUIDs implements httpapi.GPUNamer: the UUIDs of GPUs indices of
// worker, "" for one it does not know.
func (m *Dispatcher) GPUUUIDs(worker string, indices []int) []string {
	return m.reg.gpuUUIDs(worker, indices)
}
