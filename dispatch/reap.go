package dispatch

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/rlsched/rlsched/core"
)

// forgetEvery is how often DOWN workers past Config.ForgetAfter are dropped.
const forgetEvery = time.Minute

// reapLoop turns expired leases into LOST runs, closes sessions that
// stopped heartbeating, and about once a lease TTL gives a lease back to
// the active runs that have none (reconcile.go).
func (d *Dispatcher) reapLoop(ctx context.Context, nextReconcile time.Time) {
	tick := time.NewTicker(d.cfg.ReapInterval)
	defer tick.Stop()
	lastSweep, lastForget := d.now(), d.now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		d.reapOnce(ctx)
		d.retryLost(ctx)
		// Only with several masters (OnCancel set) can a request be in the
		// store and not in this master's memory while it runs.
		if d.cfg.OnCancel != nil && d.now().Sub(lastSweep) >= d.cfg.HeartbeatInterval {
			lastSweep = d.now()
			d.peers.sweepCancels(ctx)
		}
		if !d.now().Before(nextReconcile) {
			d.reconcile(ctx)
			nextReconcile = d.now().Add(d.reconcilePeriod())
		}
		if d.now().Sub(lastForget) >= forgetEvery { // a pass over every worker: not each reap
			lastForget = d.now()
			d.forgetDown()
		}
	}
}

func (d *Dispatcher) reapOnce(ctx context.Context) {
	for {
		expired, err := d.ls.Reap(ctx, 1000)
		if err != nil {
			if ctx.Err() == nil {
				d.log.Error().Err(err).Msg("cannot reap leases")
			}
			break
		}
		for _, l := range expired {
			d.reg.expired(l.TaskID, l.Fence)
			d.logs.Forget(l.TaskID)
			d.workerChanged(l.WorkerID)
			d.lost(ctx, l.TaskID, l.Fence, fmt.Sprintf("lease of worker %s expired", l.WorkerID))
		}
		if len(expired) < 1000 {
			break
		}
	}
	now := d.now()
	for _, s := range d.reg.silent(now, d.cfg.HeartbeatTTL) {
		d.log.Warn().Str("worker", s.workerID).Msg("closing a session silent for longer than the heartbeat TTL")
		s.closeFor("silent for longer than the heartbeat TTL")
	}
	d.srv.closeLateHellos(now)
}

// lost marks an active run LOST, then requeues it with attempt + 1 while
// retries last, else FAILED; a run whose cancel was requested ends CANCELLED.
//
// By the time a run is found lost its lease is gone (reaped, or released
// by runGone), so nothing would find it again: a write the store did not
// answer (MariaDB down) is retried (retryLost) until it lands or the store
// answers that the run is no longer that claim (another fence: requeued or
// ended by someone else), else the run stayed RUNNING on a worker that
// does not run it, for good (issue 11, TestChaosLostDuringStoreOutage).
func (d *Dispatcher) lost(ctx context.Context, id string, fence uint64, reason string) {
	cancelled := d.reg.takeCancel(id)
	if err := d.recordLost(ctx, id, fence, reason, cancelled); undecided(err) {
		d.lostLater(id, fence, reason, cancelled, err)
	}
}

// recordLost is one try of lost's writes. It returns the error that left
// them unfinished, or nil once they are done or there is nothing to do.
func (d *Dispatcher) recordLost(ctx context.Context, id string, fence uint64, reason string, cancelled bool) error {
	if !cancelled {
		// The request may have gone to another master, or before a restart.
		req, err := d.st.CancelRequested(ctx, []string{id})
		cancelled = err == nil && req[id]
	}
	var wasLost bool
	err := d.updateTask(ctx, nil, id, fence, func(t *core.Task) bool {
		if t.Status != core.StatusLost && !t.Status.Active() {
			return false // ended or requeued meanwhile
		}
		if cancelled {
			return t.Cancel("cancelled; "+reason, d.now()) == nil
		}
		if t.Status == core.StatusLost {
			wasLost = true // an earlier try wrote LOST, not the requeue
			return false
		}
		wasLost = t.Lose(reason) == nil
		return wasLost
	})
	if err != nil || !wasLost {
		if err != nil && !errors.Is(err, core.ErrNotFound) && !errors.Is(err, core.ErrFenced) {
			d.log.Warn().Str("task", id).Err(err).Msg("cannot mark run LOST")
		}
		return err
	}
	var requeued, moved bool
	err = d.updateTask(ctx, nil, id, fence, func(t *core.Task) bool {
		var err error
		requeued, err = t.Requeue(reason, d.now())
		moved = err == nil
		return moved
	})
	if err != nil {
		d.log.Warn().Str("task", id).Err(err).Msg("cannot requeue a lost run")
		return err
	}
	if !moved {
		return nil // another master's requeue (or a cancel) landed first
	}
	// A lease at this fence is dead now. One can exist: reconcile on
	// another master may have restored it between the reap (or release)
	// and this write; left there, it would hold up the next attempt's
	// claim for a whole hold.
	_ = d.ls.Release(ctx, id, fence)
	d.log.Warn().Str("task", id).Str("reason", reason).Bool("requeued", requeued).Msg("run lost")
	d.Notify()
	return nil
}

// lostLater queues a run for retryLost.
func (d *Dispatcher) lostLater(id string, fence uint64, reason string, cancelled bool, err error) {
	if d.retrying.add(id, fence, reason, cancelled, d.now()) {
		d.log.Warn().Str("task", id).Uint64("fence", fence).Err(err).Msg("the store did not record a lost run; retrying until it does")
	}
}

// retryLost tries again the due writes of lost runs. On the reaper.
func (d *Dispatcher) retryLost(ctx context.Context) {
	for _, due := range d.retrying.due(d.now()) {
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := d.recordLost(rctx, due.id, due.r.fence, due.r.reason, due.r.cancelled)
		cancel()
		d.retrying.tried(due, undecided(err) && ctx.Err() == nil, d.now)
	}
}
