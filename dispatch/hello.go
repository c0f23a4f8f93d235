package dispatch

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/rlsched/rlsched/codec"
	"github.com/rlsched/rlsched/codec/pb"
	"github.com/rlsched/rlsched/core"
	"github.com/rlsched/rlsched/lease"
)

// maxClockSkew is how far a worker's clock may be from the master's before
// the master warns and stops using the worker's timestamps.
const maxClockSkew = 5 * time.Second

// workerKey is the key of a worker id this master admits (codec.AcceptHello's
// keyFor): derived from the join token, so the master keeps no table of
// keys, and refused for an id outside WORKER_IDS when that is set.
func (m *Dispatcher) workerKey(id string) ([]byte, error) {
	if !core.ValidWorkerID(id) {
		return nil, fmt.Errorf("invalid worker id %q", id)
	}
	if m.cfg.allowed != nil && !m.cfg.allowed[id] {
		return nil, fmt.Errorf("worker id %q is not in this master's WORKER_IDS: add it there to admit it", id)
	}
	return codec.WorkerKey(m.cfg.JoinToken, id), nil
}

// checkSkew compares the send time of a Hello, read at now, with the
// master's clock. A worker whose clock is off by more than maxClockSkew is
// logged, and its timestamps (TaskStarted.started_unix_ms) are not used:
// the master's own time of the report is. An older worker sends no time.
// On the event loop, before the session is shared.
func (m *Dispatcher) checkSkew(sess *session, h *pb.Hello, now time.Time) {
	if h.SentUnixMs == 0 {
		return
	}
	skew := time.UnixMilli(h.SentUnixMs).Sub(now)
	if skew > -maxClockSkew && skew < maxClockSkew {
		return
	}
	sess.skewed = true
	m.log.Warn().Str("worker", h.WorkerId).Str("remote", sess.remote).Dur("skew", skew).
		Msgf("the clock of worker %s is off by %v from this master's; its timestamps are not used: synchronise its clock (NTP)",
			h.WorkerId, skew.Round(time.Millisecond))
}

// onHello registers a verified session and reconciles the runs the worker
// says it holds with the runs the master placed on it (registry.join).
// Runs on shard.
func (m *Dispatcher) onHello(sess *session, h *pb.Hello) {
	ctx, cancel := context.WithTimeout(m.ctx, 10*time.Second)
	defer cancel()
	now := m.now()
	foreign := m.peers.helloFromStore(ctx, h) // multimaster.go: runs another master placed, persisted cancels
	j := m.reg.join(sess, h, foreign, now)
	if j.refused != "" {
		m.log.Warn().Str("worker", h.WorkerId).Str("remote", sess.remote).Str("instance", h.Instance).Msg("refusing worker: " + j.refused)
		_ = sess.send(&pb.Goodbye{Reason: j.refused}) // before the close: gnet writes first
		sess.closed.Store(true)
		_ = sess.c.Close()
		return
	}
	if j.old != nil {
		_ = j.old.c.Close()
	}
	if len(j.why) > 0 {
		m.log.Warn().Str("worker", h.WorkerId).Strs("runs", j.why).Msg("Hello lists runs that are not the worker's to run; telling it to kill them")
	}

	kill := j.kill
	kept := j.adopt[:0]
	for _, rr := range j.adopt {
		if err := m.keepLease(ctx, rr); err != nil {
			m.log.Warn().Str("worker", h.WorkerId).Str("task", rr.taskID).Err(err).Msg("cannot re-adopt run; telling the worker to kill it")
			kill = append(kill, rr.taskID)
			continue
		}
		kept = append(kept, rr)
	}
	m.touchPresence(ctx, sess, now)
	err := sess.send(&pb.HelloAck{Session: sess.id, HeartbeatIntervalMs: m.cfg.HeartbeatInterval.Milliseconds(),
		LeaseTtlMs: m.cfg.LeaseTTL.Milliseconds(), MasterId: m.cfg.MasterID, KillTaskIds: kill, LogWindow: m.logs.HelloWindow(), ArtifactWindow: m.outputWindow()})
	m.log.Info().Str("worker", h.WorkerId).Str("host", h.Host).Int("gpus", len(h.Gpus)).Int32("slots", h.Slots).
		Int("adopted", len(kept)).Int("killed", len(kill)).Int("lost", len(j.gone)).AnErr("sendErr", err).Msg("worker joined")
	for _, rr := range j.gone {
		m.runGone(ctx, rr, "the worker reconnected without the run")
	}
	for _, rr := range kept {
		m.resendCancel(rr)
	}
	m.workerChanged(h.WorkerId)
	m.wakeScheduler()
}

// keepLease renews an adopted run's lease, re-creating it from the store
// when the lease backend lost it (a restarted master on memory leases).
func (m *Dispatcher) keepLease(ctx context.Context, rr *runRec) error {
	fence := rr.fence.Load()
	errs := m.ls.Renew(ctx, []lease.Renewal{{TaskID: rr.taskID, Fence: fence}}, m.leaseHold())
	if errs[0] == nil {
		return nil
	}
	if !errors.Is(errs[0], core.ErrLeaseLost) {
		return errs[0]
	}
	t, err := m.st.Task(ctx, rr.taskID)
	if err != nil {
		return err
	}
	if !t.Status.Active() || t.Fence != fence || t.Worker != rr.workerID {
		return fmt.Errorf("the store has the run %s with fence %d on %q", t.Status, t.Fence, t.Worker)
	}
	return m.ls.Restore(ctx, rr.taskID, rr.workerID, fence, m.leaseHold())
}

// sessionClosed unregisters a closed session. Runs on shard.
func (m *Dispatcher) sessionClosed(sess *session, err error) {
	if !m.reg.leave(sess) {
		return
	}
	_ = m.ls.Forget(m.ctx, sess.workerID)
	m.workerChanged(sess.workerID)
	ev := m.log.Info().Str("worker", sess.workerID).AnErr("reason", err)
	if why := sess.closeReason.Load(); why != nil {
		ev = ev.Str("why", *why)
	}
	ev.Msg("worker disconnected")
}
