package dispatch

import (
	"context"
	"crypto/hmac"
	"errors"
	"fmt"
	"time"

	"github.com/rlsched/rlsched/codec"
	"github.com/rlsched/rlsched/codec/pb"
	"github.com/rlsched/rlsched/core"
	"github.com/rlsched/rlsched/core/lease"
)

func (m *Master) verifyHello(nonce []byte, h *pb.Hello) error {
	if !core.ValidWorkerID(h.WorkerId) {
		return fmt.Errorf("invalid worker id %q", h.WorkerId)
	}
	if !hmac.Equal(h.Proof, codec.JoinProof(m.cfg.JoinToken, nonce, h.WorkerId)) {
		return fmt.Errorf("join token proof of worker %q does not match: check WORKER_JOIN_TOKEN", h.WorkerId)
	}
	return nil
}

// onHello registers a verified session and reconciles the runs the worker
// says it holds with the runs the master placed on it. Runs on shard.
func (m *Master) onHello(sess *session, h *pb.Hello) {
	ctx, cancel := context.WithTimeout(m.ctx, 10*time.Second)
	defer cancel()
	now := m.now()
	m.helloFromStore(ctx, h) // cancel.go: runs another master placed, persisted cancels
	listed := map[string]*pb.RunRef{}
	for _, ref := range h.Runs {
		listed[ref.TaskId] = ref
	}

	var adopt []*runRec
	var gone []*runRec
	var kill []string
	m.reg.mu.Lock()
	w := m.reg.workerLocked(h.WorkerId)
	if old := w.sess; old != nil && old != sess {
		old.closed.Store(true)
		_ = old.c.Close()
	}
	w.sess, w.host, w.version, w.slots = sess, h.Host, h.Version, int(h.Slots)
	w.gpus = w.gpus[:0]
	for _, g := range h.Gpus {
		w.gpus = append(w.gpus, core.GPU{Index: int(g.Index), Name: g.Name, MemoryMB: g.MemoryMb})
	}
	w.lastHeartbeat, w.lastSeen = now, now
	// Count silence from the HelloAck, not from when the event loop read the
	// Hello: under load the shard may get to it much later.
	sess.lastSeen.Store(now.UnixNano())
	for _, ref := range h.Runs {
		rr := m.reg.runs[ref.TaskId]
		if rr != nil && rr.workerID == h.WorkerId && rr.fence == ref.Fence && rr.attempt == int(ref.Attempt) {
			// Another master may have held the run meanwhile.
			rr.view = nil
			adopt = append(adopt, rr)
		} else {
			kill = append(kill, ref.TaskId)
		}
	}
	for id, rr := range w.runs {
		// A placed run the worker does not hold is lost: the worker restarted
		// or the ExecuteTask died with the old connection. Claims still in
		// flight (fence 0) are sent on the new session by the scheduler.
		if _, ok := listed[id]; !ok && rr.fence != 0 {
			gone = append(gone, rr)
		}
	}
	m.reg.mu.Unlock()

	kept := adopt[:0]
	for _, rr := range adopt {
		if err := m.keepLease(ctx, rr); err != nil {
			m.log.Warn().Str("worker", h.WorkerId).Str("task", rr.taskID).Err(err).Msg("cannot re-adopt run; telling the worker to kill it")
			kill = append(kill, rr.taskID)
			continue
		}
		kept = append(kept, rr)
	}
	m.touchPresence(ctx, sess, now)
	err := sess.send(&pb.HelloAck{Session: sess.id, HeartbeatIntervalMs: m.cfg.HeartbeatInterval.Milliseconds(),
		LeaseTtlMs: m.cfg.LeaseTTL.Milliseconds(), MasterId: m.cfg.MasterID, KillTaskIds: kill, LogWindow: m.logs.HelloWindow()})
	m.log.Info().Str("worker", h.WorkerId).Str("host", h.Host).Int("gpus", len(h.Gpus)).Int32("slots", h.Slots).
		Int("adopted", len(kept)).Int("killed", len(kill)).Int("lost", len(gone)).AnErr("sendErr", err).Msg("worker joined")
	for _, rr := range gone {
		m.runGone(ctx, rr, "the worker reconnected without the run")
	}
	for _, rr := range kept {
		m.resendCancel(rr)
	}
	m.workerChanged(h.WorkerId)
	m.Notify()
}

// keepLease renews an adopted run's lease, re-creating it from the store
// when the lease backend lost it (a restarted master on memory leases).
func (m *Master) keepLease(ctx context.Context, rr *runRec) error {
	errs := m.ls.Renew(ctx, []lease.Renewal{{TaskID: rr.taskID, Fence: rr.fence}}, m.leaseHold())
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
	if !t.Status.Active() || t.Fence != rr.fence || t.Worker != rr.workerID {
		return fmt.Errorf("the store has the run %s with fence %d on %q", t.Status, t.Fence, t.Worker)
	}
	return m.ls.Restore(ctx, rr.taskID, rr.workerID, rr.fence, m.leaseHold())
}

func (m *Master) sessionClosed(sess *session, err error) {
	m.reg.mu.Lock()
	w := m.reg.workers[sess.workerID]
	current := w != nil && w.sess == sess
	if current {
		w.sess = nil
	}
	m.reg.mu.Unlock()
	if !current {
		return
	}
	_ = m.ls.Forget(m.ctx, sess.workerID)
	m.workerChanged(sess.workerID)
	m.log.Info().Str("worker", sess.workerID).AnErr("reason", err).Msg("worker disconnected")
}
