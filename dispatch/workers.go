package dispatch

import (
	"fmt"

	"github.com/rlsched/rlsched/core"
)

// workerChanged reports a worker's new view to Config.OnWorker.
func (d *Dispatcher) workerChanged(id string) {
	if d.cfg.OnWorker == nil {
		return
	}
	if info, ok := d.reg.info(id, d.cfg.MasterID); ok {
		d.cfg.OnWorker(info)
	}
}

// Workers lists every known worker, sorted by id.
func (d *Dispatcher) Workers() []core.WorkerInfo { return d.reg.infos(d.cfg.MasterID) }

// DrainWorker sets whether worker id takes new runs: a draining worker
// finishes the runs it has and is given none (state DRAINING while
// connected), also after it reconnects, until undrained. It returns the
// worker's view; core.ErrNotFound when this master does not know it.
func (d *Dispatcher) DrainWorker(id string, drain bool) (core.WorkerInfo, error) {
	if !d.reg.drain(id, drain) {
		return core.WorkerInfo{}, core.ErrNotFound
	}
	d.log.Info().Str("worker", id).Bool("drain", drain).Msg("worker drain changed")
	d.workerChanged(id)
	if !drain {
		d.wakeScheduler() // its free GPUs count again
	}
	info, _ := d.reg.info(id, d.cfg.MasterID)
	return info, nil
}

// ForgetWorker drops a DOWN worker from the list: core.ErrNotFound when
// unknown, core.ErrConflict (with its state) when it is not DOWN. A
// worker that comes back is known again.
func (d *Dispatcher) ForgetWorker(id string) error {
	st, err := d.reg.forget(id)
	if err != nil {
		return fmt.Errorf("cannot forget worker %s (%s): %w", id, st, err)
	}
	d.log.Info().Str("worker", id).Msg("worker forgotten")
	return nil
}

// forgetDown drops the workers DOWN for longer than Config.ForgetAfter.
func (d *Dispatcher) forgetDown() {
	if ids := d.reg.forgetDown(d.now().Add(-d.cfg.ForgetAfter)); len(ids) > 0 {
		d.log.Info().Strs("workers", ids).Dur("after", d.cfg.ForgetAfter).Msg("forgot workers down for long")
	}
}

// Backlog is the number of worker reports waiting on the dispatcher's
// shards (the planner's inputs, for the metrics).
func (d *Dispatcher) Backlog() int {
	n := 0
	for _, s := range d.shards {
		n += int(s.pending.Load())
	}
	return n
}

// GPUUUIDs implements httpapi.GPUNamer: the UUIDs of GPUs indices of
// worker, "" for one it does not know.
func (d *Dispatcher) GPUUUIDs(worker string, indices []int) []string {
	return d.reg.gpuUUIDs(worker, indices)
}
