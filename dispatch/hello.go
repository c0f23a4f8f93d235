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
func (d *Dispatcher) workerKey(id string) ([]byte, error) {
	if !core.ValidWorkerID(id) {
		return nil, fmt.Errorf("invalid worker id %q", id)
	}
	if d.cfg.allowed != nil && !d.cfg.allowed[id] {
		return nil, fmt.Errorf("worker id %q is not in this master's WORKER_IDS: add it there to admit it", id)
	}
	return codec.WorkerKey(d.cfg.JoinToken, id), nil
}

// checkSkew compares the send time of a Hello, read at now, with the
// master's clock. A worker whose clock is off by more than maxClockSkew is
// logged, and its timestamps (TaskStarted.started_unix_ms) are not used:
// the master's own time of the report is. An older worker sends no time.
// On the event loop, before the session is shared.
func (d *Dispatcher) checkSkew(sess *session, h *pb.Hello, now time.Time) {
	if h.SentUnixMs == 0 {
		return
	}
	skew := time.UnixMilli(h.SentUnixMs).Sub(now)
	if skew > -maxClockSkew && skew < maxClockSkew {
		return
	}
	sess.skewed = true
	d.log.Warn().Str("worker", h.WorkerId).Str("remote", sess.remote).Dur("skew", skew).
		Msgf("the clock of worker %s is off by %v from this master's; its timestamps are not used: synchronise its clock (NTP)",
			h.WorkerId, skew.Round(time.Millisecond))
}

// refuse ends a verified session whose Hello this master does not take,
// telling the worker why (its log says it).
func (d *Dispatcher) refuse(sess *session, h *pb.Hello, why string) {
	d.log.Warn().Str("worker", h.WorkerId).Str("remote", sess.remote).Str("instance", h.Instance).Msg("refusing worker: " + why)
	_ = sess.send(&pb.Goodbye{Reason: why}) // before the close: gnet writes first
	sess.closed.Store(true)
	_ = sess.c.Close()
}

// checkRunTokens takes the fence off each run the Hello lists without its
// run token (ExecuteTask.run_token, codec.RunToken): such a run is never
// adopted (registry.join tells the worker to kill it), so another holder
// of the worker's key, who cannot compute the token, cannot take the
// worker's runs over by guessing their sequential fences. The fence still
// orders attempts; the token binds one to the worker it was sent to.
func (d *Dispatcher) checkRunTokens(h *pb.Hello) {
	var bad []string
	for _, ref := range h.Runs {
		if ref.Fence != 0 && !codec.CheckRunToken(d.cfg.JoinToken, h.WorkerId, ref.TaskId, ref.Attempt, ref.Fence, ref.RunToken) {
			ref.Fence = 0
			if len(bad) < 20 {
				bad = append(bad, ref.TaskId)
			}
		}
	}
	if len(bad) > 0 {
		d.log.Warn().Str("worker", h.WorkerId).Strs("runs", bad).
			Msg("Hello lists runs without their run token (another holder of the worker's key, or a worker older than this master): not adopting them")
	}
}

// onHello registers a verified session and reconciles the runs the worker
// says it holds with the runs the master placed on it (registry.join).
// Runs on shard.
func (d *Dispatcher) onHello(sess *session, h *pb.Hello) {
	if h.Isolation == core.IsolationUser && d.cfg.OpenRegistration {
		d.refuse(sess, h, "this worker runs each run as the Unix account named like its rlsched user (RUN_AS=user), "+
			"and this master lets anyone register (REGISTRATION=open): anyone could register an existing account's name and run as it; "+
			"set REGISTRATION=closed or admin on the master, or RUN_AS=dynamic on the worker")
		return
	}
	ctx, cancel := context.WithTimeout(d.ctx, 10*time.Second)
	defer cancel()
	now := d.now()
	d.checkRunTokens(h)
	foreign := d.peers.helloFromStore(ctx, h) // multimaster.go: runs another master placed, persisted cancels
	j := d.reg.join(sess, h, foreign, now)
	if j.refused != "" {
		d.refuse(sess, h, j.refused)
		return
	}
	if j.old != nil {
		_ = j.old.c.Close()
	}
	if len(j.why) > 0 {
		d.log.Warn().Str("worker", h.WorkerId).Strs("runs", j.why).Msg("Hello lists runs that are not the worker's to run; telling it to kill them")
	}

	kill := j.kill
	kept := j.adopt[:0]
	for _, rr := range j.adopt {
		if err := d.keepLease(ctx, rr); err != nil {
			d.log.Warn().Str("worker", h.WorkerId).Str("task", rr.taskID).Err(err).Msg("cannot re-adopt run; telling the worker to kill it")
			kill = append(kill, rr.taskID)
			continue
		}
		kept = append(kept, rr)
	}
	d.touchPresence(ctx, sess, now)
	err := sess.send(&pb.HelloAck{Session: sess.id, HeartbeatIntervalMs: d.cfg.HeartbeatInterval.Milliseconds(),
		LeaseTtlMs: d.cfg.LeaseTTL.Milliseconds(), MasterId: d.cfg.MasterID, KillTaskIds: kill, LogWindow: d.logs.HelloWindow(), ArtifactWindow: d.outputWindow(),
		TaskExited: true})
	d.log.Info().Str("worker", h.WorkerId).Str("host", h.Host).Int("gpus", len(h.Gpus)).Int32("slots", h.Slots).
		Int("adopted", len(kept)).Int("killed", len(kill)).Int("lost", len(j.gone)).AnErr("sendErr", err).Msg("worker joined")
	for _, rr := range j.gone {
		d.runGone(ctx, rr, "the worker reconnected without the run")
	}
	if len(j.groupLost) > 0 {
		go d.membersLost(h.WorkerId, j.groupLost) // group.go; off the shard: it records the group's end
	}
	for _, rr := range kept {
		d.resendCancel(rr)
	}
	d.workerChanged(h.WorkerId)
	d.wakeScheduler()
}

// keepLease renews an adopted run's lease, re-creating it from the store
// when the lease backend lost it (a restarted master on memory leases).
func (d *Dispatcher) keepLease(ctx context.Context, rr *runRec) error {
	fence := rr.fence.Load()
	errs := d.ls.Renew(ctx, []lease.Renewal{{TaskID: rr.taskID, Fence: fence}}, d.leaseHold())
	if errs[0] == nil {
		return nil
	}
	if !errors.Is(errs[0], core.ErrLeaseLost) {
		return errs[0]
	}
	t, err := d.st.Task(ctx, rr.taskID)
	if err != nil {
		return err
	}
	if !t.Status.Active() || t.Fence != fence || t.Worker != rr.workerID {
		return fmt.Errorf("the store has the run %s with fence %d on %q", t.Status, t.Fence, t.Worker)
	}
	return d.ls.Restore(ctx, rr.taskID, rr.workerID, fence, d.leaseHold())
}

// sessionClosed unregisters a closed session. Runs on shard.
func (d *Dispatcher) sessionClosed(sess *session, err error) {
	if !d.reg.leave(sess) {
		return
	}
	_ = d.ls.Forget(d.ctx, sess.workerID)
	if lost := d.reg.groupMembersOn(sess.workerID); len(lost) > 0 {
		// A group cannot go on without a member: its others are stopped
		// now, not when the lease runs out (group.go).
		go d.membersLost(sess.workerID, lost)
	}
	d.workerChanged(sess.workerID)
	ev := d.log.Info().Str("worker", sess.workerID).AnErr("reason", err)
	if why := sess.closeReason.Load(); why != nil {
		ev = ev.Str("why", *why)
	}
	ev.Msg("worker disconnected")
}
