package dispatch

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/rlsched/rlsched/codec/pb"
	"github.com/rlsched/rlsched/core"
	"github.com/rlsched/rlsched/core/lease"
	"github.com/rlsched/rlsched/core/store"
	"github.com/rlsched/rlsched/logpipe"
)

// runFor returns the run placed on sess's worker matching a report, or nil
// when the report is stale (another attempt, another fence, another worker).
func (m *Master) runFor(sess *session, taskID string, attempt int32, fence uint64) *runRec {
	m.reg.mu.Lock()
	defer m.reg.mu.Unlock()
	rr := m.reg.runs[taskID]
	if rr == nil || rr.workerID != sess.workerID || rr.attempt != int(attempt) || rr.fence != fence {
		return nil
	}
	return rr
}

func (m *Master) onHeartbeat(sess *session, hb *pb.Heartbeat) {
	ctx, cancel := context.WithTimeout(m.ctx, 10*time.Second)
	defer cancel()
	now := time.Now()
	var renew []lease.Renewal
	var lost []string
	m.reg.mu.Lock()
	w := m.reg.workers[sess.workerID]
	if w == nil || w.sess != sess {
		m.reg.mu.Unlock()
		return // a replaced session
	}
	w.lastHeartbeat = now
	for _, ref := range hb.Runs {
		rr := m.reg.runs[ref.TaskId]
		if rr != nil && rr.workerID == sess.workerID && rr.fence == ref.Fence && rr.attempt == int(ref.Attempt) {
			renew = append(renew, lease.Renewal{TaskID: ref.TaskId, Fence: ref.Fence})
		} else {
			lost = append(lost, ref.TaskId)
		}
	}
	m.reg.mu.Unlock()
	if len(renew) > 0 {
		for i, err := range m.ls.Renew(ctx, renew, m.cfg.LeaseTTL) {
			if err != nil {
				lost = append(lost, renew[i].TaskID)
			}
		}
	}
	_ = m.ls.Touch(ctx, sess.workerID, m.cfg.MasterID, m.cfg.HeartbeatTTL)
	if len(lost) > 0 {
		m.log.Warn().Str("worker", sess.workerID).Strs("tasks", lost).Msg("heartbeat names runs whose lease is gone; worker told to stop them")
	}
	_ = sess.send(&pb.HeartbeatAck{Seq: hb.Seq, LostTaskIds: lost})
}

func (m *Master) onStarted(sess *session, ts *pb.TaskStarted) {
	rr := m.runFor(sess, ts.TaskId, ts.Attempt, ts.Fence)
	if rr == nil {
		m.log.Warn().Str("worker", sess.workerID).Str("task", ts.TaskId).Uint64("fence", ts.Fence).Msg("ignoring TaskStarted with a stale fence")
		return
	}
	ctx, cancel := context.WithTimeout(m.ctx, 10*time.Second)
	defer cancel()
	err := m.updateTask(ctx, ts.TaskId, ts.Fence, func(t *core.Task) bool {
		if t.Status != core.StatusDispatched {
			return false
		}
		t.Status = core.StatusRunning
		at := time.UnixMilli(ts.StartedUnixMs).UTC()
		if ts.StartedUnixMs == 0 {
			at = time.Now().UTC()
		}
		t.StartedAt = &at
		return true
	})
	if err != nil {
		m.log.Warn().Str("task", ts.TaskId).Err(err).Msg("cannot mark run RUNNING")
	}
	m.reg.mu.Lock()
	rr.started = true
	m.reg.mu.Unlock()
}

// onLogData runs on the connection's event loop and never blocks there: it
// checks the frame against the run placed on this worker (task, attempt,
// fence) and hands it to the log writer, which acks it once the bytes are in
// the file. A stale frame is answered "fenced"; when the writer's queue is
// full, "busy" with the frame's offset, and the worker resends from there
// after a pause (package logpipe, "Back-pressure").
func (m *Master) onLogData(sess *session, ld *pb.LogData) {
	traceID, ok := m.logTarget(sess, ld)
	if !ok {
		// Logged at the 1st, 2nd, 4th, 8th... refusal of the session: a
		// worker that keeps sending cannot flood the log from the loop.
		if n := sess.fenced.Add(1); n&(n-1) == 0 {
			m.log.Warn().Str("worker", sess.workerID).Str("task", ld.TaskId).Int32("attempt", ld.Attempt).
				Uint64("fence", ld.Fence).Int64("refused", n).Msg("refusing LogData with a stale fence")
		}
		_ = sess.send(&pb.LogAck{TaskId: ld.TaskId, Attempt: ld.Attempt, Error: "fenced"})
		return
	}
	f := logpipe.Frame{TaskID: ld.TaskId, TraceID: traceID, Attempt: int(ld.Attempt), Offset: ld.Offset, Data: ld.Data, Ack: sess}
	if !m.logs.Submit(f) {
		_ = sess.send(&pb.LogAck{TaskId: ld.TaskId, Attempt: ld.Attempt, Offset: ld.Offset, Error: logpipe.AckBusy})
	}
}

// logTarget returns the trace id of the run a LogData belongs to, or false
// when the frame is stale (another attempt, another fence, another worker).
func (m *Master) logTarget(sess *session, ld *pb.LogData) (string, bool) {
	m.reg.mu.Lock()
	defer m.reg.mu.Unlock()
	rr := m.reg.runs[ld.TaskId]
	if rr == nil || rr.workerID != sess.workerID || rr.attempt != int(ld.Attempt) || rr.fence != ld.Fence || ld.Fence == 0 {
		return "", false
	}
	return rr.traceID, true
}

// LogAcked sends the log writer's ack to the worker. Called by writer
// goroutines; never blocks (AsyncWrite). A changed final reward is recorded
// on the worker's shard first, so it is ordered with TaskStarted and
// TaskFinished (whose read-modify-write of the run would otherwise undo it),
// and it is queued there before the worker can see the ack and finish.
func (s *session) LogAcked(a logpipe.Ack) {
	if a.FinalReward != nil {
		id, v, m := a.TaskID, *a.FinalReward, s.m
		s.shard.push(func() {
			ctx, cancel := context.WithTimeout(m.ctx, 10*time.Second)
			defer cancel()
			if err := m.st.SetFinalReward(ctx, id, v); err != nil {
				m.log.Warn().Str("task", id).Err(err).Msg("cannot store the final reward")
			}
		})
	}
	_ = s.send(&pb.LogAck{TaskId: a.TaskID, Attempt: int32(a.Attempt), Offset: a.Offset, Error: a.Err})
}

func (m *Master) onFinished(sess *session, tf *pb.TaskFinished) {
	defer func() { _ = sess.send(&pb.TaskFinishedAck{TaskId: tf.TaskId, Attempt: tf.Attempt}) }()
	rr := m.runFor(sess, tf.TaskId, tf.Attempt, tf.Fence)
	if rr == nil {
		m.log.Warn().Str("worker", sess.workerID).Str("task", tf.TaskId).Uint64("fence", tf.Fence).Msg("ignoring TaskFinished with a stale fence")
		return
	}
	ctx, cancel := context.WithTimeout(m.ctx, 10*time.Second)
	defer cancel()
	if tf.Outcome == pb.Outcome_OUTCOME_LOST {
		m.runGone(ctx, rr, "the worker stopped the run: "+tf.Error)
		return
	}
	m.reg.mu.Lock()
	_, cancelled := m.reg.cancels[tf.TaskId]
	m.reg.mu.Unlock()
	err := m.updateTask(ctx, tf.TaskId, tf.Fence, func(t *core.Task) bool {
		if !t.Status.Active() {
			return false
		}
		finishFromReport(t, tf, cancelled)
		return true
	})
	if err != nil {
		m.log.Warn().Str("task", tf.TaskId).Err(err).Msg("cannot record the end of a run")
	}
	m.release(ctx, rr)
	m.log.Info().Str("task", tf.TaskId).Str("worker", sess.workerID).Str("outcome", tf.Outcome.String()).
		Int32("exit", tf.ExitCode).Str("signal", tf.Signal).Msg("run finished")
	m.Notify()
}

// finishFromReport sets the terminal fields of t from a worker's report.
func finishFromReport(t *core.Task, tf *pb.TaskFinished, cancelRequested bool) {
	now := time.Now().UTC()
	t.FinishedAt = &now
	if t.StartedAt == nil {
		t.StartedAt = &now
	}
	code := int(tf.ExitCode)
	t.ExitCode = &code
	t.Error = tf.Error
	switch {
	case tf.Outcome == pb.Outcome_OUTCOME_CANCELLED || cancelRequested:
		t.Status = core.StatusCancelled
		if t.Error == "" {
			t.Error = "cancelled"
		}
	case tf.Outcome == pb.Outcome_OUTCOME_TIMEOUT:
		t.Status = core.StatusTimeout
		if t.Error == "" {
			t.Error = fmt.Sprintf("timed out after %d s", t.TimeoutSeconds)
		}
	case tf.Outcome == pb.Outcome_OUTCOME_START_FAILED:
		t.Status = core.StatusFailed
		t.ExitCode = nil
	case tf.Signal != "":
		t.Status = core.StatusFailed
		if t.Error == "" {
			t.Error = "killed by " + tf.Signal
		}
	case code == 0:
		t.Status = core.StatusSucceeded
	default:
		t.Status = core.StatusFailed
		if t.Error == "" {
			t.Error = fmt.Sprintf("exit code %d", code)
		}
	}
}

// release drops a finished run's lease and frees its resources.
func (m *Master) release(ctx context.Context, rr *runRec) {
	if err := m.ls.Release(ctx, rr.taskID, rr.fence); err != nil && !errors.Is(err, core.ErrLeaseLost) {
		m.log.Warn().Str("task", rr.taskID).Err(err).Msg("cannot release lease")
	}
	m.reg.mu.Lock()
	if cur := m.reg.runs[rr.taskID]; cur == rr {
		m.reg.removeRunLocked(rr.taskID)
	}
	m.reg.mu.Unlock()
	m.logs.Forget(rr.taskID)
	m.workerChanged(rr.workerID)
}

// updateTask applies change to the stored run if it still carries fence,
// retrying when a concurrent writer with the same fence moved the status.
// change returns false to leave the run alone.
func (m *Master) updateTask(ctx context.Context, id string, fence uint64, change func(*core.Task) bool) error {
	for try := 0; try < 5; try++ {
		t, err := m.st.Task(ctx, id)
		if err != nil {
			return err
		}
		if t.Fence != fence {
			return core.ErrFenced
		}
		exp := store.Expect{Fence: t.Fence, Status: t.Status}
		if !change(&t) {
			return nil
		}
		err = m.st.UpdateTask(ctx, &t, exp)
		if !errors.Is(err, core.ErrFenced) {
			return err
		}
	}
	return core.ErrFenced
}
