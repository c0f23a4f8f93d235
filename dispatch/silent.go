package dispatch

import (
	"context"
	"fmt"
	"time"

	"github.com/rlsched/rlsched/core"
)

// A worker that lost its session while it still holds runs (PENDING) is
// silent: its runs are neither running for sure nor requeued until their
// leases expire. Each of them gets the warning worker_silent once per
// absence, naming how long the worker has been silent and when the run is
// requeued unless it returns, so the run page and `rlsched show` say what
// `rlsched workers` says. A worker that returns without a run frees it at
// once instead (registry.join's gone runs).

// silentWorker is a PENDING worker whose runs are not told yet.
type silentWorker struct {
	id    string
	heard time.Time // its last frame
	runs  []*runRec
}

// silentUntold lists the workers without a session that hold claimed runs
// and whose runs have no worker_silent warning for this absence.
func (r *registry) silentUntold() []silentWorker {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []silentWorker
	for _, w := range r.workers {
		if w.silentTold || w.sess != nil || len(w.runs) == 0 {
			continue
		}
		sw := silentWorker{id: w.id, heard: w.lastHeard}
		for _, rr := range w.runs {
			if rr.fence.Load() != 0 {
				sw.runs = append(sw.runs, rr)
			}
		}
		if len(sw.runs) > 0 {
			out = append(out, sw)
		}
	}
	return out
}

// toldSilent marks worker id's runs as told for this absence, unless it
// joined again meanwhile.
func (r *registry) toldSilent(id string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if w := r.workers[id]; w != nil && w.sess == nil {
		w.silentTold = true
	}
}

// SilentMessage is the worker_silent warning's sentence.
func SilentMessage(worker string, silent time.Duration, requeueAt time.Time) string {
	return fmt.Sprintf("worker %s silent for %d s; the run is requeued at %s unless it returns",
		worker, int(silent.Round(time.Second)/time.Second), requeueAt.UTC().Format("15:04:05 UTC"))
}

// noteSilent warns the runs of the workers that went silent. On the
// reaper.
func (d *Dispatcher) noteSilent(ctx context.Context) {
	for _, sw := range d.reg.silentUntold() {
		// Present: it joined another master, where its runs go on (or its
		// presence is not forgotten yet: asked again next time).
		if live, err := d.ls.Present(ctx, sw.id); err != nil || live {
			continue
		}
		now := d.now()
		for _, rr := range sw.runs {
			l, ok, err := d.ls.Get(ctx, rr.taskID)
			if err != nil || !ok || l.Fence != rr.fence.Load() {
				continue // reaped, or another claim's: the reaper decides
			}
			// The reaper finds it expired within a reap interval.
			d.warn(rr.taskID, core.WarnWorkerSilent, SilentMessage(sw.id, now.Sub(sw.heard), l.Expires.Add(d.cfg.ReapInterval)))
		}
		d.reg.toldSilent(sw.id)
	}
}
