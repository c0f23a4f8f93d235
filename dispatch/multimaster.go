package dispatch

import (
	"context"
	"maps"
	"slices"

	"github.com/rs/zerolog"

	"github.com/rlsched/rlsched/codec/pb"
	"github.com/rlsched/rlsched/core"
)

// peers is what several masters sharing one store need of this one
// (docs/decisions.md, "Several masters"): cancels another master recorded,
// runs another master placed or moved on, and the store lookups that stand
// in for a notification that pub/sub lost. It keeps no state: what it
// learns goes into the registry (a cancel request, an adopted or forgotten
// run), and the cancel path tells the worker. It never takes a run whose
// live lease another master holds (it adopts only what the store has
// active on the worker that lists it). Safe from any goroutine.
type peers struct {
	st  peerStore
	reg *registry
	// resendCancel tells a run's worker to stop it if its cancel was
	// requested (cancel.go); notify wakes the scheduler for a changed
	// queue; changed reports a worker's new view. None blocks.
	resendCancel func(rr *runRec)
	notify       func()
	changed      func(workerID string)
	log          zerolog.Logger
}

// peerStore is what peers reads of the store.
type peerStore interface {
	Task(ctx context.Context, id string) (core.Task, error)
	CancelRequested(ctx context.Context, ids []string) (map[string]bool, error)
}

// CancelNotified delivers a cancel that another master recorded: when this
// master holds the run's worker, the worker is told at once. A run it does
// not hold is left to the master that does (or to the store check when the
// worker re-adopts the run here).
func (d *Dispatcher) CancelNotified(id string) { d.peers.cancelNotified(id) }

func (p *peers) cancelNotified(id string) {
	for _, rr := range p.reg.cancelPlaced(id) {
		p.resendCancel(rr)
	}
}

// loadCancels marks the runs among ids whose cancel the store records, so a
// run re-adopted here (after a restart, or from another master) is
// stopped, and ends CANCELLED.
func (p *peers) loadCancels(ctx context.Context, ids []string) {
	if len(ids) == 0 {
		return
	}
	req, err := p.st.CancelRequested(ctx, ids)
	if err != nil {
		p.log.Warn().Err(err).Msg("cannot read cancel requests")
		return
	}
	if len(req) == 0 {
		return
	}
	p.reg.cancelPlaced(slices.Collect(maps.Keys(req))...)
}

// helloFromStore prepares the registry for a worker's Hello (hello.go calls
// it first): a run the worker lists that this master did not place — a
// master that died placed it, after this one started — is taken over when
// the store has it active on this worker with the same attempt and fence;
// and the persisted cancel requests of the listed runs are loaded, so the
// adoption that follows tells the worker to stop them. It returns the
// listed runs the store has active on another worker (task id → that
// worker): they are the other worker's, and the Hello handling kills them
// here.
func (p *peers) helloFromStore(ctx context.Context, h *pb.Hello) map[string]string {
	var foreign map[string]string
	ids := make([]string, 0, len(h.Runs))
	for _, ref := range h.Runs {
		ids = append(ids, ref.TaskId)
		if ref.Fence == 0 || p.reg.run(ref.TaskId) != nil {
			continue
		}
		t, err := p.st.Task(ctx, ref.TaskId)
		if err != nil || !t.Status.Active() {
			continue
		}
		if t.Worker != h.WorkerId {
			if foreign == nil {
				foreign = map[string]string{}
			}
			foreign[t.ID] = t.Worker
			continue
		}
		if t.Fence != ref.Fence || t.Attempt != int(ref.Attempt) {
			continue // not the run the store knows: the Hello handling kills it
		}
		p.reg.adopt(recordOf(t))
	}
	p.loadCancels(ctx, ids)
	return foreign
}

// recordOf is the registry record of an active run t from the store.
func recordOf(t core.Task) *runRec {
	rr := &runRec{taskID: t.ID, attempt: t.Attempt, traceID: t.TraceID, workerID: t.Worker, gpus: t.GPUIndices,
		userID: t.UserID, cpuMillis: core.CPUMillis(t.CPUs), memoryMB: t.MemoryMB}
	if t.Fractional() {
		// The share a defaulted run got of its GPU's memory is not stored:
		// what it asked for counts (0: only its fraction).
		rr.share, rr.shareMB = t.GPUHundredths(), t.GPUMemoryMB
	}
	rr.fence.Store(t.Fence)
	rr.orphan = t.IsGroup()
	return rr
}

// sweepCancels looks up, in the store, cancel requests of the runs on this
// master's connected workers that it has not seen, and delivers them: the
// cross-master notification is best effort (pub/sub keeps nothing for a
// master that was briefly disconnected), the store is not.
func (p *peers) sweepCancels(ctx context.Context) {
	ids := p.reg.uncancelledHeld()
	if len(ids) == 0 {
		return
	}
	req, err := p.st.CancelRequested(ctx, ids)
	if err != nil {
		if ctx.Err() == nil {
			p.log.Warn().Err(err).Msg("cannot read cancel requests")
		}
		return
	}
	for id := range req {
		p.cancelNotified(id)
	}
}

// RemoteTaskChanged takes a run change another master made (several
// masters): a queued run wakes the scheduler, and a run this master holds
// is forgotten once it moved on from this master's claim (requeued or
// claimed anew), or ended while its worker is not connected here, so this
// master's view of that worker does not list it for ever. A run that ended
// at this master's claim while its worker is connected here is left to the
// worker's own report.
func (d *Dispatcher) RemoteTaskChanged(t core.Task) { d.peers.remoteTaskChanged(t) }

func (p *peers) remoteTaskChanged(t core.Task) {
	if t.Status == core.StatusQueued {
		p.notify()
	}
	if w := p.reg.movedOn(t); w != "" {
		p.changed(w)
	}
}
