package dispatch

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/rlsched/rlsched/codec/pb"
	"github.com/rlsched/rlsched/core"
	"github.com/rlsched/rlsched/internal/backoff"
	"github.com/rlsched/rlsched/lease"
	"github.com/rlsched/rlsched/logpipe"
	"github.com/rlsched/rlsched/store"
)

// The handlers of a worker's reports: Heartbeat, TaskStarted, LogData and
// TaskFinished. Each checks the report against the run placed on the
// worker (runRec.reports) before it changes anything.

// onHeartbeat runs on the session's shard goroutine (pushed free of the
// shard's async work). It allocates little and takes no lock when every
// listed run is the worker's, since at 100,000 workers it is the master's
// most frequent work: the runs come from the session's own table, the
// context, the renewal list and the ack are the shard's or the session's,
// reused (they are only touched on that goroutine), and the worker's
// presence is refreshed only every half presence TTL (see touchPresence).
func (d *Dispatcher) onHeartbeat(sess *session, hb *pb.Heartbeat) {
	if sess.closed.Load() {
		return // replaced, refused or gone
	}
	d.cfg.Metrics.Heartbeat()
	ctx := sess.shard.callCtx(d.ctx)
	now := d.now()
	sess.lastHeartbeat.Store(now.UnixNano())
	renew := sess.renew[:0]
	var lost, other []string
	for _, ref := range hb.Runs {
		if sess.run(ref.TaskId).reports(sess.workerID, ref.Attempt, ref.Fence) {
			renew = append(renew, lease.Renewal{TaskID: ref.TaskId, Fence: ref.Fence})
		} else {
			other = append(other, ref.TaskId)
		}
	}
	if len(other) > 0 {
		// A run whose end is recorded is not lost: the worker had not seen
		// the TaskFinishedAck when it sent the heartbeat.
		ended := d.reg.endedLately(other)
		for _, id := range other {
			if !ended[id] {
				lost = append(lost, id)
			}
		}
	}
	if len(renew) > 0 {
		for i, err := range d.ls.Renew(ctx, renew, d.leaseHold()) {
			switch {
			case err == nil:
			case errors.Is(err, core.ErrLeaseLost):
				lost = append(lost, renew[i].TaskID)
			default:
				// A slow or restarting lease backend is not a lost lease:
				// the next heartbeat renews it. Killing the run here would
				// throw away work and its pending report.
				d.log.Warn().Str("worker", sess.workerID).Str("task", renew[i].TaskID).Err(err).Msg("cannot renew a run's lease now; retrying at the next heartbeat")
			}
		}
	}
	clear(renew) // no task ids kept alive by the scratch slice
	sess.renew = renew[:0]
	d.touchPresence(ctx, sess, now)
	d.gpus.observe(sess)
	if len(lost) > 0 {
		d.log.Warn().Str("worker", sess.workerID).Strs("tasks", lost).Msg("heartbeat names runs whose lease is gone; worker told to stop them")
	}
	ack := &sess.ack
	ack.Seq, ack.LostTaskIds = hb.Seq, lost
	_ = sess.send(ack) // encoded before send returns, so the ack is free again
	ack.LostTaskIds = nil
}

// presenceTTL is the TTL of a worker's presence: the heartbeat TTL plus
// the half of it during which touchPresence skips refreshing, so presence
// never ends sooner after a worker's last heartbeat than with a refresh at
// every heartbeat.
func (d *Dispatcher) presenceTTL() time.Duration {
	return d.cfg.HeartbeatTTL + d.cfg.HeartbeatTTL/2
}

// touchPresence refreshes the worker's presence when its last refresh is
// half a heartbeat TTL old: with the default TTL of three intervals that
// is every other heartbeat, and one lease-backend call (a Redis round trip)
// saved in two. Only on the session's shard goroutine.
func (d *Dispatcher) touchPresence(ctx context.Context, sess *session, now time.Time) {
	if sess.touched != 0 && now.UnixNano()-sess.touched < int64(d.cfg.HeartbeatTTL/2) {
		return
	}
	if err := d.ls.Touch(ctx, sess.workerID, d.cfg.MasterID, d.presenceTTL()); err == nil {
		sess.touched = now.UnixNano()
	}
}

// startGate is a TaskStarted in flight: done is closed once it is recorded
// or dropped.
//
// While the start's write still waits for a group commit, the run's
// TaskFinished supersedes it (supersede): the waiting write is dropped (a
// Batcher never writes the rows of a caller whose context ended before
// their batch) and the end is written from DISPATCHED with the start's
// time, one row for both. That is how a short run costs two writes instead
// of three; the store still records when it started, and the publisher
// still tells of its RUNNING (store.Publishing). A start already in a
// committing batch is written, and the end follows it as before.
type startGate struct {
	done       chan struct{}
	at         time.Time // the start, as the report gives it
	ctx        context.Context
	cancel     context.CancelFunc
	superseded atomic.Bool
}

// supersede drops the start's write if it still waits.
func (g *startGate) supersede() {
	g.superseded.Store(true)
	g.cancel()
}

// startPending marks a run's TaskStarted as in flight, on the event loop
// that read it, so the TaskFinished after it (which runs concurrently, see
// shard) can wait for it or supersede it: both would otherwise swap from
// DISPATCHED, and the loser read the run and swap again. onStarted opens
// the gate; nil when the report is stale.
func (d *Dispatcher) startPending(sess *session, ts *pb.TaskStarted) *startGate {
	rr := sess.run(ts.TaskId)
	if !rr.reports(sess.workerID, ts.Attempt, ts.Fence) {
		return nil
	}
	g := &startGate{done: make(chan struct{}), at: d.now()}
	if ts.StartedUnixMs != 0 && !sess.skewed {
		g.at = time.UnixMilli(ts.StartedUnixMs)
	}
	g.ctx, g.cancel = context.WithTimeout(d.ctx, 10*time.Second)
	rr.starting.Store(g)
	return g
}

// startDone opens a gate from startPending.
func (d *Dispatcher) startDone(sess *session, id string, g *startGate) {
	if g == nil {
		return
	}
	if rr := sess.run(id); rr != nil {
		rr.starting.CompareAndSwap(g, nil)
	}
	g.cancel()
	close(g.done)
}

func (d *Dispatcher) onStarted(sess *session, ts *pb.TaskStarted, gate *startGate) {
	defer d.startDone(sess, ts.TaskId, gate)
	rr := d.reg.reported(sess, ts.TaskId, ts.Attempt, ts.Fence)
	if rr == nil || gate == nil {
		d.log.Warn().Str("worker", sess.workerID).Str("task", ts.TaskId).Uint64("fence", ts.Fence).Msg("ignoring TaskStarted with a stale fence")
		return
	}
	if rr.group != nil && rr.rank > 0 {
		return // the run is RUNNING from rank 0's start (group.go)
	}
	// A worker sends its TaskStarted again on every session while the run
	// runs (the first may have died with its connection): one for a run
	// already RUNNING changes nothing and warns nothing (startMembers sends
	// each member once).
	started := false
	if rr.group != nil && ts.Error == "" {
		// Before the gate opens: rank 0's end, which waits for it, then
		// finds every member sent.
		defer d.startMembers(rr, ts.MasterPort)
	}
	at := gate.at
	err := d.updateTask(gate.ctx, rr, ts.TaskId, ts.Fence, func(t *core.Task) bool {
		started = t.Start(at) == nil
		return started
	})
	switch {
	case err == nil && !started:
	case err == nil:
		if why := d.reg.unenforced(sess.workerID); why != "" {
			d.warn(ts.TaskId, core.WarnUnenforced, fmt.Sprintf("worker %s does not enforce its runs' limits (%s): this run's cores, memory and GPUs are shared on trust",
				sess.workerID, why))
		}
	case gate.superseded.Load() && errors.Is(err, context.Canceled):
		d.log.Debug().Str("task", ts.TaskId).Msg("start superseded: written with the run's end")
	default:
		d.log.Warn().Str("task", ts.TaskId).Err(err).Msg("cannot mark run RUNNING")
	}
}

// onLogData runs on the connection's event loop and never blocks there: it
// checks the frame against the run placed on this worker (task, attempt,
// fence; from the session's own table, without a lock) and hands it to the
// log writer, which acks it once the bytes are in the file. A stale frame is
// answered "fenced"; when the writer's queue is full, "busy" with the
// frame's offset, and the worker resends from there after a pause (package
// logpipe, "Back-pressure").
func (d *Dispatcher) onLogData(sess *session, ld *pb.LogData) {
	rr := sess.run(ld.TaskId)
	if !rr.reports(sess.workerID, ld.Attempt, ld.Fence) {
		// Logged at the 1st, 2nd, 4th, 8th... refusal of the session: a
		// worker that keeps sending cannot flood the log from the loop.
		if n := sess.fenced.Add(1); n&(n-1) == 0 {
			d.log.Warn().Str("worker", sess.workerID).Str("task", ld.TaskId).Int32("attempt", ld.Attempt).
				Uint64("fence", ld.Fence).Int64("refused", n).Msg("refusing LogData with a stale fence")
		}
		_ = sess.send(&pb.LogAck{TaskId: ld.TaskId, Attempt: ld.Attempt, Error: "fenced"})
		return
	}
	if !sess.logSender {
		sess.logSender = true
		d.logs.AddSender(1)
	}
	if sess.logFlow.drop(ld) {
		return // behind a frame refused "busy": the worker resends it (logpipe_flow.go)
	}
	f := logpipe.Frame{TaskID: core.LogKey(ld.TaskId, rr.rank), TraceID: rr.traceID, Attempt: int(ld.Attempt), Offset: ld.Offset, Data: ld.Data, Ack: sess}
	if !d.logs.Submit(f) {
		sess.logFlow.busy(ld)
		_ = sess.send(&pb.LogAck{TaskId: ld.TaskId, Attempt: ld.Attempt, Offset: ld.Offset, Error: logpipe.AckBusy,
			LogWindow: d.logs.LogWindow()})
	}
}

// LogAcked sends the log writer's ack to the worker. Called by writer
// goroutines; never blocks (AsyncWrite). A changed final reward is recorded
// on the worker's shard first, so it is ordered with TaskStarted and
// TaskFinished (whose read-modify-write of the run would otherwise undo it),
// and it is queued there before the worker can see the ack and finish.
func (s *session) LogAcked(a logpipe.Ack) {
	if id, _, ok := core.ParseLogKey(a.TaskID); ok {
		a.TaskID = id // a group member's log key names the run to its worker
	}
	if a.FinalReward != nil {
		id, v, m := a.TaskID, *a.FinalReward, s.d
		s.shard.push(func() {
			ctx, cancel := context.WithTimeout(m.ctx, 10*time.Second)
			defer cancel()
			// Dropped whatever the outcome: the view no longer tells the
			// stored reward.
			m.dropView(id)
			if err := m.st.SetFinalReward(ctx, id, v); err != nil {
				m.log.Warn().Str("task", id).Err(err).Msg("cannot store the final reward")
			}
		})
	}
	if a.Err == "" || a.Err == logpipe.AckGap {
		s.logFlow.acked(a.TaskID, a.Attempt, a.Offset)
	}
	// Every ack carries the window, so a worker follows the number of
	// connections sending output (logpipe.Writer.LogWindow).
	_ = s.send(&pb.LogAck{TaskId: a.TaskID, Attempt: int32(a.Attempt), Offset: a.Offset, Error: a.Err,
		LogWindow: s.d.logs.LogWindow()})
}

// onExited handles TaskExited: every process of the run is gone, its
// outputs are still being stored. Its GPUs, slot, cores and memory are
// free for the next placement now; its lease, its registry entry and its
// RUNNING stay until its TaskFinished is recorded, so a report of the run
// is still checked against its fence, and a worker lost before then
// leaves it to the reaper as before (issue 33, docs/decisions.md).
func (d *Dispatcher) onExited(sess *session, m *pb.TaskExited) {
	if sess.closed.Load() || !d.reg.exited(sess, m) {
		return
	}
	d.workerChanged(sess.workerID)
	d.wakeScheduler()
}

func (d *Dispatcher) onFinished(sess *session, tf *pb.TaskFinished) {
	ack := true // false: the worker keeps its report and sends it again after reconnecting
	defer func() {
		if ack {
			_ = sess.send(&pb.TaskFinishedAck{TaskId: tf.TaskId, Attempt: tf.Attempt})
		}
	}()
	rr := d.reg.reported(sess, tf.TaskId, tf.Attempt, tf.Fence)
	if rr == nil {
		d.log.Warn().Str("worker", sess.workerID).Str("task", tf.TaskId).Uint64("fence", tf.Fence).Msg("ignoring TaskFinished with a stale fence")
		return
	}
	if rr.group != nil {
		d.memberFinished(rr, tf) // group.go: the group's end is recorded once all members ended
		return
	}
	ctx, cancel := context.WithTimeout(d.ctx, 10*time.Second)
	defer cancel()
	if tf.Outcome == pb.Outcome_OUTCOME_LOST {
		d.runGone(ctx, rr, "the worker stopped the run: "+tf.Error)
		return
	}
	cancelled := d.reg.cancelRequested(tf.TaskId)
	ack = d.recordEnd(ctx, rr, tf, cancelled, d.errorTail(tf.TaskId, tf, cancelled))
	if ack {
		d.log.Info().Str("task", tf.TaskId).Str("worker", sess.workerID).Str("outcome", tf.Outcome.String()).
			Int32("exit", tf.ExitCode).Str("signal", tf.Signal).Msg("run finished")
	}
}

// recordEnd records the end of rr's run as tf says (tail: its error tail),
// retrying while the store does not answer, then releases it. It reports
// false when the end could not be recorded (shutting down with the store
// away): the worker keeps its report.
func (d *Dispatcher) recordEnd(ctx context.Context, rr *runRec, tf *pb.TaskFinished, cancelled bool, tail string) bool {
	why := d.reg.cancelReason(tf.TaskId)
	var startAt *time.Time // a start this end supersedes (startGate)
	if g := rr.starting.Load(); g != nil {
		g.supersede()
		select {
		case <-g.done:
		case <-ctx.Done():
		}
		startAt = &g.at
	}
	change := func(t *core.Task) bool {
		if finishFromReport(t, tf, cancelled, why, d.now()) != nil {
			return false
		}
		if t.Status == core.StatusFailed || t.Status == core.StatusTimeout {
			t.ErrorTail = tail
		}
		return true
	}
	var ran store.UsageCharge // what a preempted attempt charges its owner
	if mark := rr.preempt.Load(); mark != nil && !cancelled && tf.Outcome == pb.Outcome_OUTCOME_CANCELLED {
		// Stopped for a run of higher priority (preempt.go): queued again.
		// The write leaves no startedAt (a QUEUED run has none), so the
		// usage store.Accruing would charge is charged here.
		change = func(t *core.Task) bool {
			now := d.now()
			ran = store.UsageCharge{}
			if t.StartedAt != nil && now.After(*t.StartedAt) {
				ran = store.UsageCharge{UserID: t.UserID, GPUSeconds: core.UsageWeight(t.GPUCount(), t.CPUs) * now.Sub(*t.StartedAt).Seconds(), At: now}
			}
			return preemptFromReport(t, mark, now) == nil
		}
	}
	if startAt != nil {
		end := change
		change = func(t *core.Task) bool {
			if t.Status == core.StatusDispatched {
				_ = t.Start(*startAt)
			}
			return end(t)
		}
	}
	err := d.updateTask(ctx, rr, tf.TaskId, tf.Fence, change)
	// A store that did not answer must not lose the report: the worker
	// forgets it once acked, and nothing would ever write the run's end.
	// Retry with backoff (onFinished runs beside the shard, on its async
	// pool); the ack, the lease and the registry entry wait. A retry after
	// a write that did land finds the run ended and changes nothing.
	var bo backoff.Backoff
	for undecided(err) && d.ctx.Err() == nil {
		delay := bo.Delay()
		d.log.Warn().Str("task", tf.TaskId).Err(err).Dur("retry_in", delay).Msg("cannot record the end of a run yet; retrying")
		backoff.Sleep(d.ctx, delay)
		rctx, rcancel := context.WithTimeout(d.ctx, 10*time.Second)
		err = d.updateTask(rctx, rr, tf.TaskId, tf.Fence, change)
		rcancel()
	}
	if undecided(err) { // shutting down with the store away
		d.log.Warn().Str("task", tf.TaskId).Err(err).Msg("cannot record the end of a run; the worker keeps its report")
		return false
	}
	if err != nil {
		d.log.Warn().Str("task", tf.TaskId).Err(err).Msg("cannot record the end of a run")
	} else if ran.GPUSeconds > 0 {
		_ = d.st.AddUsage(ctx, []store.UsageCharge{ran}, d.cfg.Policy.HalfLife)
	}
	ctx, cancel := context.WithTimeout(d.ctx, 10*time.Second) // the first may be spent by the retries
	defer cancel()
	d.release(ctx, rr)
	if rr.preempt.Load() != nil {
		d.Notify() // requeued: the queue changed
	} else {
		d.wakeScheduler()
	}
	return true
}

// errorTail is the end of the log of a run whose report says it failed
// (core.Task.ErrorTail), "" for any other end; key is the log's
// (core.LogKey: a group's failing member's). Its log file holds all of
// it: the worker sends TaskFinished once every byte is acked, and the log
// pipe acks bytes once they are in the file.
func (d *Dispatcher) errorTail(key string, tf *pb.TaskFinished, cancelled bool) string {
	ok := tf.Outcome == pb.Outcome_OUTCOME_EXITED && tf.ExitCode == 0 && tf.Signal == ""
	if ok || cancelled || tf.Outcome == pb.Outcome_OUTCOME_CANCELLED || d.logs == nil {
		return ""
	}
	tail, err := logpipe.Tail(d.logs.Dir(), key, int(tf.Attempt))
	if err != nil {
		d.log.Warn().Str("task", tf.TaskId).Err(err).Msg("cannot read the end of a failed run's log")
	}
	return tail
}

// undecided reports whether err leaves a store write's outcome unknown:
// the store was away (core.ErrUnavailable), the connection broke in the
// middle of a statement, or the call timed out. Only a fenced, missing or
// conflicting run is an answer.
func undecided(err error) bool {
	return err != nil && !errors.Is(err, core.ErrFenced) && !errors.Is(err, core.ErrNotFound) && !errors.Is(err, core.ErrConflict)
}

// finishFromReport ends the active run t as a worker's report says, at
// now (core.Task.Finish); it fails when t is no longer active. A cancelled
// run whose report gives no error gets why's message; one the master
// cancelled for a reason (early stopping) gets why's message and reason
// whatever the report says.
func finishFromReport(t *core.Task, tf *pb.TaskFinished, cancelRequested bool, why cancelCause, now time.Time) error {
	code := int(tf.ExitCode)
	exit, msg := &code, tf.Error
	var status core.Status
	switch {
	case tf.Outcome == pb.Outcome_OUTCOME_CANCELLED || cancelRequested:
		status = core.StatusCancelled
		if msg == "" || why.reason != "" {
			msg = why.msg
		}
	case tf.Outcome == pb.Outcome_OUTCOME_TIMEOUT:
		status = core.StatusTimeout
		if msg == "" {
			msg = fmt.Sprintf("timed out after %d s", t.TimeoutSeconds)
		}
	case tf.Outcome == pb.Outcome_OUTCOME_START_FAILED:
		status, exit = core.StatusFailed, nil
	case core.StoppedByWorker(tf.Reason):
		// Stopped by its worker for its GPU memory or disk: failed,
		// whatever the process made of the SIGTERM.
		status = core.StatusFailed
	case tf.Signal != "":
		status = core.StatusFailed
		if msg == "" {
			msg = "killed by " + tf.Signal
		}
	case code == 0:
		status = core.StatusSucceeded
	default:
		status = core.StatusFailed
		if msg == "" {
			msg = fmt.Sprintf("exit code %d", code)
		}
	}
	reason := ""
	if status == core.StatusCancelled {
		reason = why.reason
	}
	if status == core.StatusFailed {
		// The worker's verdict from its control group's counters; a plain
		// SIGKILL stays one (API.md "Resources").
		switch tf.Reason {
		case core.ReasonOutOfMemory:
			reason, msg = tf.Reason, core.OutOfMemoryError(tf.PeakMemoryMb, t.MemoryMB)
		case core.ReasonPidsLimit:
			reason, msg = tf.Reason, "stopped at its process-count limit: it started more processes than a run may have at once"
		case core.ReasonGPUMemory, core.ReasonDisk:
			reason = tf.Reason // msg is the worker's sentence, naming what it used and the limit
		}
	}
	if err := t.Finish(status, exit, msg, now); err != nil {
		return err
	}
	t.Reason = reason
	t.Usage = core.UsageOf(t, tf.CpuSeconds, tf.PeakMemoryMb)
	return nil
}

// release drops a finished run's lease and frees its resources.
//
// The run leaves the registry before its lease is released: a heartbeat in
// between would otherwise find the run placed, fail to renew its lease and
// tell the worker to stop it, before the worker had its TaskFinishedAck.
func (d *Dispatcher) release(ctx context.Context, rr *runRec) {
	d.reg.end(rr, d.now())
	d.terms.End(rr.taskID, "the run ended")
	if rr.userID != 0 {
		gpus := len(rr.gpus)
		if rr.group != nil {
			gpus *= len(rr.group.members)
		}
		if rr.share > 0 {
			gpus = 0 // its dispatch moved none (a fraction; the store's count has it)
		}
		d.inputs.standingMoved([]userMove{{userID: rr.userID, gpus: gpus, runs: -1}})
	}
	if err := d.ls.Release(ctx, rr.taskID, rr.fence.Load()); err != nil && !errors.Is(err, core.ErrLeaseLost) {
		d.log.Warn().Str("task", rr.taskID).Err(err).Msg("cannot release lease")
	}
	d.logs.Forget(rr.taskID)
	if g := rr.group; g != nil {
		for _, m := range g.members[1:] {
			d.logs.Forget(core.LogKey(m.taskID, m.rank))
			d.workerChanged(m.workerID)
		}
	}
	if d.outputs != nil {
		d.outputs.Forget(rr.taskID)
	}
	d.workerChanged(rr.workerID)
}

// runGone ends a placed run that its worker no longer has.
func (d *Dispatcher) runGone(ctx context.Context, rr *runRec, reason string) {
	d.release(ctx, rr)
	d.reap.lost(ctx, rr.taskID, rr.fence.Load(), reason)
}
