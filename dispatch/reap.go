package dispatch

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/rlsched/rlsched/core"
)

var errNoSession = errors.New("worker not connected")

const helloTimeout = 10 * time.Second

// forgetEvery is how often DOWN workers past Config.ForgetAfter are dropped.
const forgetEvery = time.Minute

// reapLoop turns expired leases into LOST runs and closes sessions that
// stopped heartbeating.
func (m *Master) reapLoop(ctx context.Context) {
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
		// Only with several masters (OnCancel set) can a request be in the
		// store and not in this master's memory while it runs.
		if m.cfg.OnCancel != nil && m.now().Sub(lastSweep) >= m.cfg.HeartbeatInterval {
			lastSweep = m.now()
			m.sweepCancels(ctx)
		}
		if m.now().Sub(lastForget) >= forgetEvery { // a pass over every worker: not each reap
			lastForget = m.now()
			m.forgetDown()
		}
	}
}

func (m *Master) reapOnce(ctx context.Context) {
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
	m.pending.Range(func(k, v any) bool {
		if cc := k.(*conn); now.Sub(cc.opened) > helloTimeout {
			m.pending.Delete(k)
			m.log.Warn().Str("remote", addrString(cc.c.RemoteAddr())).Msg("closing connection: no Hello within 10 s")
			_ = cc.c.Close()
		}
		return true
	})
}

// runGone ends a placed run that its worker no longer has.
func (m *Master) runGone(ctx context.Context, rr *runRec, reason string) {
	m.release(ctx, rr)
	m.lost(ctx, rr.taskID, rr.fence.Load(), reason)
}

// lost marks an active run LOST, then requeues it with attempt + 1 while
// retries last, else FAILED; a run whose cancel was requested ends CANCELLED.
func (m *Master) lost(ctx context.Context, id string, fence uint64, reason string) {
	cancelled := m.reg.takeCancel(id)
	if !cancelled {
		// The request may have gone to another master, or before a restart.
		req, err := m.st.CancelRequested(ctx, []string{id})
		cancelled = err == nil && req[id]
	}
	var wasLost bool
	err := m.updateTask(ctx, nil, id, fence, func(t *core.Task) bool {
		if cancelled {
			return t.Status.Active() && t.Cancel("cancelled; "+reason, m.now()) == nil
		}
		wasLost = t.Status.Active() && t.Lose(reason) == nil
		return wasLost
	})
	if err != nil || !wasLost {
		if err != nil && !errors.Is(err, core.ErrNotFound) {
			m.log.Warn().Str("task", id).Err(err).Msg("cannot mark run LOST")
		}
		return
	}
	var requeued bool
	err = m.updateTask(ctx, nil, id, fence, func(t *core.Task) bool {
		var err error
		requeued, err = t.Requeue(reason, m.now())
		return err == nil
	})
	if err != nil {
		m.log.Warn().Str("task", id).Err(err).Msg("cannot requeue a lost run")
		return
	}
	m.log.Warn().Str("task", id).Str("reason", reason).Bool("requeued", requeued).Msg("run lost")
	m.Notify()
}
