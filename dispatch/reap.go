package dispatch

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/rlsched/rlsched/core"
)

var errNoSession = errors.New("worker not connected")

// forgetEvery is how often DOWN workers past Config.ForgetAfter are dropped.
const forgetEvery = time.Minute

// reapLoop turns expired leases into LOST runs, closes sessions that
// stopped heartbeating, and about once a lease TTL gives a lease back to
// the active runs that have none (reconcile.go).
func (m *Dispatcher) reapLoop(ctx context.Context, nextReconcile time.Time) {
	tick := time.NewTicker(m.cfg.ReapInterval)
	defer tick.Stop()
	lastSweep, lastForget := m.now(), m.now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		m.reapOnce(ctx)
		m.retryLost(ctx)
		// Only with several masters (OnCancel set) can a request be in the
		// store and not in this master's memory while it runs.
		if m.cfg.OnCancel != nil && m.now().Sub(lastSweep) >= m.cfg.HeartbeatInterval {
			lastSweep = m.now()
			m.peers.sweepCancels(ctx)
		}
		if !m.now().Before(nextReconcile) {
			m.reconcile(ctx)
			nextReconcile = m.now().Add(m.reconcilePeriod())
		}
		if m.now().Sub(lastForget) >= forgetEvery { // a pass over every worker: not each reap
			lastForget = m.now()
			m.forgetDown()
		}
	}
}

func (m *Dispatcher) reapOnce(ctx context.Context) {
	for {
		expired, err := m.ls.Reap(ctx, 1000)
		if err != nil {
			if ctx.Err() == nil {
				m.log.Error().Err(err).Msg("cannot reap leases")
			}
			break
		}
		for _, l := range expired {
			m.reg.expired(l.TaskID, l.Fence)
			m.logs.Forget(l.TaskID)
			m.workerChanged(l.WorkerID)
			m.lost(ctx, l.TaskID, l.Fence, fmt.Sprintf("lease of worker %s expired", l.WorkerID))
		}
		if len(expired) < 1000 {
			break
		}
	}
	now := m.now()
	for _, s := range m.reg.silent(now, m.cfg.HeartbeatTTL) {
		m.log.Warn().Str("worker", s.workerID).Msg("closing a session silent for longer than the heartbeat TTL")
		s.closeFor("silent for longer than the heartbeat TTL")
	}
	m.srv.closeLateHellos(now)
}

// runGone ends a placed run that its worker no longer has.
func (m *Dispatcher) runGone(ctx context.Context, rr *runRec, reason string) {
	m.release(ctx, rr)
	m.lost(ctx, rr.taskID, rr.fence.Load(), reason)
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
func (m *Dispatcher) lost(ctx context.Context, id string, fence uint64, reason string) {
	cancelled := m.reg.takeCancel(id)
	if err := m.recordLost(ctx, id, fence, reason, cancelled); undecided(err) {
		m.lostLater(id, fence, reason, cancelled, err)
	}
}

// recordLost is one try of lost's writes. It returns the error that left
// them unfinished, or nil once they are done or there is nothing to do.
func (m *Dispatcher) recordLost(ctx context.Context, id string, fence uint64, reason string, cancelled bool) error {
	if !cancelled {
		// The request may have gone to another master, or before a restart.
		req, err := m.st.CancelRequested(ctx, []string{id})
		cancelled = err == nil && req[id]
	}
	var wasLost bool
	err := m.updateTask(ctx, nil, id, fence, func(t *core.Task) bool {
		if t.Status != core.StatusLost && !t.Status.Active() {
			return false // ended or requeued meanwhile
		}
		if cancelled {
			return t.Cancel("cancelled; "+reason, m.now()) == nil
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
			m.log.Warn().Str("task", id).Err(err).Msg("cannot mark run LOST")
		}
		return err
	}
	var requeued, moved bool
	err = m.updateTask(ctx, nil, id, fence, func(t *core.Task) bool {
		var err error
		requeued, err = t.Requeue(reason, m.now())
		moved = err == nil
		return moved
	})
	if err != nil {
		m.log.Warn().Str("task", id).Err(err).Msg("cannot requeue a lost run")
		return err
	}
	if !moved {
		return nil // another master's requeue (or a cancel) landed first
	}
	// A lease at this fence is dead now. One can exist: reconcile on
	// another master may have restored it between the reap (or release)
	// and this write; left there, it would hold up the next attempt's
	// claim for a whole hold.
	_ = m.ls.Release(ctx, id, fence)
	m.log.Warn().Str("task", id).Str("reason", reason).Bool("requeued", requeued).Msg("run lost")
	m.Notify()
	return nil
}

// lostLater queues a run for retryLost.
func (m *Dispatcher) lostLater(id string, fence uint64, reason string, cancelled bool, err error) {
	if m.retrying.add(id, fence, reason, cancelled, m.now()) {
		m.log.Warn().Str("task", id).Uint64("fence", fence).Err(err).Msg("the store did not record a lost run; retrying until it does")
	}
}

// retryLost tries again the due writes of lost runs. On the reaper.
func (m *Dispatcher) retryLost(ctx context.Context) {
	for _, d := range m.retrying.due(m.now()) {
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := m.recordLost(rctx, d.id, d.r.fence, d.r.reason, d.r.cancelled)
		cancel()
		m.retrying.tried(d, undecided(err) && ctx.Err() == nil, m.now)
	}
}
