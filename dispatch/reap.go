package dispatch

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/rs/zerolog"

	"github.com/rlsched/rlsched/core"
	"github.com/rlsched/rlsched/lease"
)

// forgetEvery is how often DOWN workers past Config.ForgetAfter are dropped.
const forgetEvery = time.Minute

// reaper turns expired leases into LOST runs (then requeued, or FAILED),
// closes sessions that stopped heartbeating and connections that sent no
// Hello in time, and runs the periodic jobs that share its tick: the store
// sweep for cancels (several masters), reconciliation, forgetting workers
// DOWN for long. It owns its ticker and the times of those jobs; the runs
// are the registry's, the lost runs whose writes are still to land are
// lostRuns's, and the rest it asks through the func values it is given.
//
// It never requeues a run before its lease hold passed: a run is found
// lost only once the lease backend reaped its lease, or once its worker
// said it no longer has it (runGone). lost is safe from any goroutine (the
// shards, start-up recovery); run, reapOnce and retryLost run on the
// reaper's own goroutine (reconcile, which calls reapOnce, runs there too).
type reaper struct {
	ls       reapLeases
	st       lostStore
	reg      *registry
	retrying *lostRuns
	// update is the fenced write of a run (Dispatcher.updateTask).
	update func(ctx context.Context, rr *runRec, id string, fence uint64, change func(*core.Task) bool) error
	// forgetLogs drops a run's log state (logpipe.Writer.Forget); changed
	// reports a worker's new view; notify wakes the scheduler for a changed
	// queue; closeLateHellos closes the connections that sent no Hello in
	// time (server); sweepCancels looks up the store's cancel requests
	// (peers), nil with one master; reconcile and reconcilePeriod are
	// reconciliation and the pause before its next round; forgetDown drops
	// the workers DOWN for long. None blocks but on the store or the lease
	// backend.
	forgetLogs      func(taskID string)
	changed         func(workerID string)
	notify          func()
	closeLateHellos func(now time.Time)
	sweepCancels    func(ctx context.Context)
	reconcile       func(ctx context.Context)
	reconcilePeriod func() time.Duration
	forgetDown      func()
	// noteSilent warns the runs of workers gone silent (silent.go).
	noteSilent func(ctx context.Context)

	every             time.Duration // Config.ReapInterval
	heartbeatTTL      time.Duration // a session silent this long is closed
	heartbeatInterval time.Duration // between two cancel sweeps
	now               func() time.Time
	log               zerolog.Logger
}

// reapLeases is what the reaper asks of the lease backend.
type reapLeases interface {
	Reap(ctx context.Context, limit int) ([]lease.Lease, error)
	Release(ctx context.Context, taskID string, fence uint64) error
}

// lostStore is what the reaper reads of the store (its writes go through
// update).
type lostStore interface {
	CancelRequested(ctx context.Context, ids []string) (map[string]bool, error)
}

// run reaps every tick until ctx ends; the first reconciliation is due at
// nextReconcile.
func (r *reaper) run(ctx context.Context, nextReconcile time.Time) {
	tick := time.NewTicker(r.every)
	defer tick.Stop()
	lastSweep, lastForget := r.now(), r.now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		r.reapOnce(ctx)
		r.retryLost(ctx)
		// Only with several masters (sweepCancels set) can a request be in
		// the store and not in this master's memory while it runs.
		if r.sweepCancels != nil && r.now().Sub(lastSweep) >= r.heartbeatInterval {
			lastSweep = r.now()
			r.sweepCancels(ctx)
		}
		if !r.now().Before(nextReconcile) {
			r.reconcile(ctx)
			nextReconcile = r.now().Add(r.reconcilePeriod())
		}
		if r.now().Sub(lastForget) >= forgetEvery { // a pass over every worker: not each reap
			lastForget = r.now()
			r.forgetDown()
		}
	}
}

// reapOnce calls lost the runs whose lease expired, then closes the
// sessions silent for longer than the heartbeat TTL and the connections
// late with their Hello.
func (r *reaper) reapOnce(ctx context.Context) {
	for {
		expired, err := r.ls.Reap(ctx, 1000)
		if err != nil {
			if ctx.Err() == nil {
				r.log.Error().Err(err).Msg("cannot reap leases")
			}
			break
		}
		for _, l := range expired {
			r.reg.expired(l.TaskID, l.Fence)
			r.forgetLogs(l.TaskID)
			r.changed(l.WorkerID)
			r.lost(ctx, l.TaskID, l.Fence, fmt.Sprintf("lease of worker %s expired", l.WorkerID))
		}
		if len(expired) < 1000 {
			break
		}
	}
	now := r.now()
	for _, s := range r.reg.silent(now, r.heartbeatTTL) {
		r.log.Warn().Str("worker", s.workerID).Msg("closing a session silent for longer than the heartbeat TTL")
		s.closeFor("silent for longer than the heartbeat TTL")
	}
	r.closeLateHellos(now)
	if r.noteSilent != nil {
		r.noteSilent(ctx)
	}
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
func (r *reaper) lost(ctx context.Context, id string, fence uint64, reason string) {
	cancelled := r.reg.takeCancel(id)
	if err := r.recordLost(ctx, id, fence, reason, cancelled); undecided(err) {
		r.lostLater(id, fence, reason, cancelled, err)
	}
}

// recordLost is one try of lost's writes. It returns the error that left
// them unfinished, or nil once they are done or there is nothing to do.
func (r *reaper) recordLost(ctx context.Context, id string, fence uint64, reason string, cancelled bool) error {
	if !cancelled {
		// The request may have gone to another master, or before a restart.
		req, err := r.st.CancelRequested(ctx, []string{id})
		cancelled = err == nil && req[id]
	}
	var wasLost bool
	err := r.update(ctx, nil, id, fence, func(t *core.Task) bool {
		if t.Status != core.StatusLost && !t.Status.Active() {
			return false // ended or requeued meanwhile
		}
		if cancelled {
			return t.Cancel("cancelled; "+reason, r.now()) == nil
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
			r.log.Warn().Str("task", id).Err(err).Msg("cannot mark run LOST")
		}
		return err
	}
	var requeued, moved bool
	err = r.update(ctx, nil, id, fence, func(t *core.Task) bool {
		var err error
		requeued, err = t.Requeue(reason, r.now())
		moved = err == nil
		return moved
	})
	if err != nil {
		r.log.Warn().Str("task", id).Err(err).Msg("cannot requeue a lost run")
		return err
	}
	if !moved {
		return nil // another master's requeue (or a cancel) landed first
	}
	// A lease at this fence is dead now. One can exist: reconcile on
	// another master may have restored it between the reap (or release)
	// and this write; left there, it would hold up the next attempt's
	// claim for a whole hold.
	_ = r.ls.Release(ctx, id, fence)
	r.log.Warn().Str("task", id).Str("reason", reason).Bool("requeued", requeued).Msg("run lost")
	r.notify()
	return nil
}

// lostLater queues a run for retryLost.
func (r *reaper) lostLater(id string, fence uint64, reason string, cancelled bool, err error) {
	if r.retrying.add(id, fence, reason, cancelled, r.now()) {
		r.log.Warn().Str("task", id).Uint64("fence", fence).Err(err).Msg("the store did not record a lost run; retrying until it does")
	}
}

// retryLost tries again the due writes of lost runs. On the reaper.
func (r *reaper) retryLost(ctx context.Context) {
	for _, due := range r.retrying.due(r.now()) {
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := r.recordLost(rctx, due.id, due.r.fence, due.r.reason, due.r.cancelled)
		cancel()
		r.retrying.tried(due, undecided(err) && ctx.Err() == nil, r.now)
	}
}
