package worker

import (
	"os/exec"
	"sync"
	"syscall"
	"time"

	"github.com/rs/zerolog"
	"google.golang.org/protobuf/proto"

	"github.com/rlsched/rlsched/codec/pb"
	"github.com/rlsched/rlsched/worker/cgroup"
	"github.com/rlsched/rlsched/worker/leaseguard"
	"github.com/rlsched/rlsched/worker/nvsmi"
	"github.com/rlsched/rlsched/worker/outputs"
)

// runTable owns the worker's run state: the runs it holds by task id, the
// joined session and what its master granted (lease TTL, log credit
// window, the send time of the last renewal it acked), the processes
// started and not yet reaped, and whether the worker is stopping. Every
// change of a run's state between ExecuteTask and its end is one of its
// methods.
//
// Its mutex is taken in this file only. The fields of run and session
// marked "guarded by runTable.mu" are touched only by its methods, and the
// ...Locked functions of other files that they call expect it held. Lock
// order: runTable.mu, then the guard's, a spool's or the outputs'
// (outputs.Link.mu); nothing that holds one of those takes runTable.mu.
//
// Its methods are safe to call from any goroutine.
type runTable struct {
	grace time.Duration // Config.Grace
	log   zerolog.Logger
	guard *leaseguard.Guard
	out   *outputs.Link
	kick  func() // wakes the writer; takes no lock
	procs sync.WaitGroup

	mu          sync.Mutex
	runs        map[string]*run // by task id
	sess        *session        // the joined session, nil while disconnected
	leaseTTL    time.Duration   // from the last HelloAck
	logWindow   int             // credit window of the session; from HelloAck and LogAcks (windowFrom)
	lastRenewal sentAt          // send time of the last renewal the master acked
	stopping    bool
	// exitedOK: the joined master takes TaskExited (HelloAck.task_exited);
	// an older one closes the connection on a frame type it does not know.
	exitedOK bool
}

func newRunTable(grace time.Duration, log zerolog.Logger, g *leaseguard.Guard, out *outputs.Link, kick func()) *runTable {
	return &runTable{grace: grace, log: log, guard: g, out: out, kick: kick, runs: map[string]*run{}}
}

// shutdown stops every run and waits until all processes are reaped.
func (t *runTable) shutdown() {
	t.mu.Lock()
	t.stopping = true
	for _, r := range t.runs {
		t.stopLocked(r, pb.Outcome_OUTCOME_CANCELLED, t.grace)
		r.out.Discard() // nobody will send it; unblock the pump
		r.outs.Stop()
	}
	if n := len(t.runs); n > 0 {
		t.log.Info().Int("runs", n).Msg("stopping runs")
	}
	t.mu.Unlock()
	t.procs.Wait()
}

// forgetLocked kills r and drops it without a report: for runs whose lease
// the master says is gone (kill_task_ids, lost_task_ids, a fenced LogAck),
// which get SIGTERM, the grace and SIGKILL, and for self-fencing (now), which
// gets SIGKILL at once since the run may already be running elsewhere.
func (t *runTable) forgetLocked(r *run, now bool) {
	if t.runs[r.id] == r {
		delete(t.runs, r.id)
	}
	r.forgotten = true
	r.out.Discard()
	r.outs.Stop() // no last sync: the run may run elsewhere by now
	if now {
		r.signalLocked(syscall.SIGKILL)
	} else {
		t.stopLocked(r, pb.Outcome_OUTCOME_LOST, t.grace)
	}
}

// stopLocked asks the run to stop: SIGTERM to the group now, SIGKILL after
// grace. The first outcome asked for wins; later calls do not restart the
// grace.
func (t *runTable) stopLocked(r *run, outcome pb.Outcome, grace time.Duration) {
	if r.stopOutcome == pb.Outcome_OUTCOME_UNSPECIFIED && r.outs.Restoring() {
		// Not started yet: the restore ends, and the run with it.
		r.stopOutcome = outcome
		r.outs.Stop()
		return
	}
	if r.cmd == nil || r.reaped {
		return
	}
	if r.stopOutcome == pb.Outcome_OUTCOME_UNSPECIFIED {
		r.stopOutcome = outcome
	}
	if r.termSent {
		return
	}
	r.termSent = true
	r.log.Info().Str("outcome", outcome.String()).Dur("grace", grace).Msg("stopping run: SIGTERM to its process group")
	r.signalLocked(syscall.SIGTERM)
	r.killTimer = time.AfterFunc(grace, func() {
		t.mu.Lock()
		defer t.mu.Unlock()
		if !r.reaped {
			r.log.Warn().Dur("grace", grace).Msg("run outlived its grace: SIGKILL to its process group")
			r.signalLocked(syscall.SIGKILL)
		}
	})
}

// refs lists every run held, for a Hello.
func (t *runTable) refs() []*pb.RunRef {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.refsLocked(true)
}

func (t *runTable) refsLocked(hello bool) []*pb.RunRef {
	refs := make([]*pb.RunRef, 0, len(t.runs))
	for _, r := range t.runs {
		refs = append(refs, r.refLocked(hello))
	}
	return refs
}

// adopt makes s the joined session after its HelloAck: it applies the lease
// TTL, counts the Hello as a renewal, kills the runs the master disowns and
// rewinds every other run's output to its acked offset.
func (t *runTable) adopt(s *session, ack *pb.HelloAck, helloSent sentAt) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.leaseTTL = time.Duration(ack.GetLeaseTtlMs()) * time.Millisecond
	t.logWindow = windowFrom(ack.GetLogWindow(), logWindow)
	if t.leaseTTL <= 0 {
		t.leaseTTL = defaultLeaseTTL
	}
	for _, id := range ack.GetKillTaskIds() {
		if r := t.runs[id]; r != nil {
			r.log.Warn().Msg("master disowns the run (kill_task_ids): killing it")
			t.forgetLocked(r, false)
		}
	}
	t.renewedLocked(helloSent) // the runs the master kept
	s.renewed = helloSent
	t.exitedOK = ack.GetTaskExited()
	for _, r := range t.runs {
		r.sent = r.out.Acked()
		r.finSent = false
		// A TaskStarted written into the connection that died may never
		// have been read: the master would keep the run DISPATCHED, with
		// no startedAt (and no usage accruing), until its end. Sent again
		// while the run runs; the master ignores one it has.
		r.startedSent = r.startedSent && r.fin != nil
		if !t.exitedOK {
			r.exitedMsg = nil // the Hello's RunRef.finished told it what it can know
		}
	}
	t.sess = s
	t.out.Join(ack.GetArtifactWindow(), t.outputsLocked())
}

// outputsLocked lists the outputs of every run that has them.
func (t *runTable) outputsLocked() []*outputs.Files {
	outs := make([]*outputs.Files, 0, len(t.runs))
	for _, r := range t.runs {
		if r.outs != nil {
			outs = append(outs, r.outs)
		}
	}
	return outs
}

// detach forgets s once its goroutines are done.
func (t *runTable) detach(s *session) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.sess == s {
		t.sess = nil
		t.out.Leave()
	}
}

// cancel handles CancelTask.
func (t *runTable) cancel(m *pb.CancelTask) {
	t.mu.Lock()
	defer t.mu.Unlock()
	r := t.runs[m.GetTaskId()]
	if r == nil || r.attempt != m.GetAttempt() || (m.GetFence() != 0 && m.GetFence() != r.fence) {
		t.log.Info().Str("task", m.GetTaskId()).Int32("attempt", m.GetAttempt()).Msg("CancelTask for a run not held here; ignored")
		return
	}
	grace := time.Duration(m.GetGraceMs()) * time.Millisecond
	if grace <= 0 {
		grace = t.grace
	}
	r.log.Info().Str("reason", m.GetReason()).Msg("cancel requested")
	t.stopLocked(r, pb.Outcome_OUTCOME_CANCELLED, grace)
}

// logAck handles LogAck.
func (t *runTable) logAck(m *pb.LogAck) {
	t.mu.Lock()
	defer t.mu.Unlock()
	w := windowFrom(m.GetLogWindow(), t.logWindow)
	if w > t.logWindow {
		defer t.kick() // more room: send now
	}
	t.logWindow = w
	r := t.runs[m.GetTaskId()]
	if r == nil || r.attempt != m.GetAttempt() {
		return
	}
	switch m.GetError() {
	case "":
		r.sent = max(r.sent, r.out.Ack(m.GetOffset()))
		r.retry.Reset()
		r.busyRetry.Reset()
	case "busy":
		// The master's log queue was full: nothing from Offset on was
		// taken. Resend from there after a pause; what was sent behind it
		// the master drops unanswered (an older one answers it as gaps).
		r.sent = max(r.out.Acked(), min(r.sent, m.GetOffset()))
		if d, ok := r.busyBackoffLocked(); ok {
			r.log.Debug().Dur("retry_in", d).Msg("master log queue busy; pausing output")
		}
		return // the writer resends once the pause is over
	case "gap":
		// The master has bytes up to Offset and wants the rest from there.
		acked := r.out.Ack(m.GetOffset())
		r.sent = acked
		if m.GetOffset() < acked {
			// The resend from acked meets the same answer: without a pause
			// this was a hot loop of frames and error lines (the soak saw
			// 600,000 of them in 90 s, issue 11). Back off like a master
			// that cannot store output.
			if d, ok := r.backoffLocked(); ok {
				r.log.Error().Uint64("master_has", m.GetOffset()).Uint64("acked", acked).Dur("retry_in", d).
					Msg("master lost output it had acked; those bytes cannot be resent; resending the rest with backoff")
			}
			return
		}
	case "fenced":
		r.log.Warn().Msg("master refused the run's output as fenced: the run is no longer ours; killing it")
		t.forgetLocked(r, false)
		return
	default:
		// The master cannot store output (disk full, LOG_DIR unwritable):
		// keep it in the spool and resend from the acked offset with backoff.
		r.sent = r.out.Acked()
		if d, ok := r.backoffLocked(); ok {
			r.log.Warn().Str("error", m.GetError()).Uint64("acked", r.sent).Dur("retry_in", d).
				Msg("master could not store output; keeping it and resending with backoff")
		}
		return
	}
	t.kick()
}

// finishedAck handles TaskFinishedAck: the run is done with.
func (t *runTable) finishedAck(m *pb.TaskFinishedAck) {
	t.mu.Lock()
	defer t.mu.Unlock()
	r := t.runs[m.GetTaskId()]
	if r == nil || r.attempt != m.GetAttempt() || r.fin == nil {
		return
	}
	delete(t.runs, r.id)
	r.out.Discard() // every byte was acked: this only removes spill files
	r.log.Debug().Msg("TaskFinished acked; run forgotten")
	if r.outs != nil && r.outs.Held() {
		go removeRunDir(r)
	} else if r.dirs.Out != "" {
		r.log.Info().Str("dir", r.dirs.Out).Msg("keeping the run's output dir: the master does not hold all of it")
	}
}

// heartbeat builds the next Heartbeat of s, without its GPU sample, and
// remembers its send time.
func (t *runTable) heartbeat(s *session) *pb.Heartbeat {
	t.mu.Lock()
	defer t.mu.Unlock()
	s.seq++
	now := sentNow()
	s.hbSent[s.seq] = now
	if s.seq > 1024 {
		delete(s.hbSent, s.seq-1024) // never acked: stop remembering it
	}
	return &pb.Heartbeat{Seq: s.seq, Runs: t.refsLocked(false), SentUnixMs: now.at.UnixMilli()}
}

// heartbeatAck handles HeartbeatAck: the renewal sent at the heartbeat's
// send time is acked, and lost runs are killed.
func (t *runTable) heartbeatAck(s *session, m *pb.HeartbeatAck) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, id := range m.GetLostTaskIds() {
		if r := t.runs[id]; r != nil {
			r.log.Warn().Msg("master reports the run's lease lost: killing it")
			t.forgetLocked(r, false)
		}
	}
	if sent, ok := s.hbSent[m.GetSeq()]; ok {
		t.renewedLocked(sent) // the runs not lost
		if sent.boot > s.renewed.boot {
			s.renewed = sent
		}
		for seq := range s.hbSent {
			if seq <= m.GetSeq() {
				delete(s.hbSent, seq)
			}
		}
	}
}

// collect gathers, from every run, its TaskStarted if not yet written, its
// output from the send offset (while the connection's logWindow has room and
// the run is not paused by a refusal), then every run's outputs (restore
// requests, TensorBoard points, file chunks: outputs.Link.Collect), and its
// TaskFinished once every byte is acked and its last sync of outputs is
// over.
func (t *runTable) collect(budget int) (msgs []proto.Message, started []*run) {
	t.mu.Lock()
	defer t.mu.Unlock()
	inflight := 0
	for _, r := range t.runs {
		acked := r.out.Acked()
		r.sent = max(r.sent, acked)
		inflight += int(r.sent - acked)
	}
	window := t.logWindow
	if window <= 0 {
		window = logWindow
	}
	now := time.Now()
	used := 0
	for _, r := range t.runs {
		if r.startedMsg != nil && !r.startedSent {
			msgs = append(msgs, r.startedMsg)
			started = append(started, r)
		}
		for used < budget && inflight < window && !now.Before(r.retryAt) {
			if r.sent >= r.out.End() {
				break
			}
			data := r.out.ReadAt(r.sent, min(logChunk, window-inflight))
			if len(data) == 0 {
				break
			}
			msgs = append(msgs, &pb.LogData{TaskId: r.id, Attempt: r.attempt, Fence: r.fence, Offset: r.sent, Data: data})
			r.sent += uint64(len(data))
			used += len(data)
			inflight += len(data)
		}
	}
	// Terminal output of interactive runs is never held by the log's
	// window: it is bounded by its own buffer (terminal.go).
	for _, r := range t.runs {
		if r.term != nil {
			msgs = r.term.collectLocked(r, msgs)
		}
	}
	// A TaskExited before the outputs' chunks: it frees the run's GPUs on
	// the master while they are sent.
	for _, r := range t.runs {
		if r.exitedMsg != nil {
			msgs = append(msgs, r.exitedMsg)
			r.exitedMsg = nil // lost with its connection: the next Hello's RunRef.finished says it
		}
	}
	// Outputs after every run's logs, in a window of their own.
	msgs = t.out.Collect(msgs, t.outputsLocked())
	for _, r := range t.runs {
		if r.fin != nil && !r.finSent && r.outs.Done() {
			r.out.Close() // after the outputs' last notes (reap leaves it open)
			if r.out.Done() {
				r.fin.LogBytes = r.out.End()
				msgs = append(msgs, r.fin)
				r.finSent = true
			}
		}
	}
	return msgs, started
}

// markStarted notes that the TaskStarted of each run reached the socket of
// session s, unless another session joined meanwhile (which sends it
// again).
func (t *runTable) markStarted(s *session, started []*run) {
	if len(started) == 0 {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.sess != s {
		return
	}
	for _, r := range started {
		r.startedSent = true
	}
}

// admit decides whether the run an ExecuteTask read on s names may be
// prepared: not while the worker stops, nor past its lease deadline, nor
// twice; a newer attempt kills the older one.
func (t *runTable) admit(s *session, r *run) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.stopping {
		return false
	}
	if late, ok := t.leaseLeftLocked(s); !ok {
		// Not started, not reported: the master reaps the lease (it may
		// have done so already, and started the next attempt elsewhere).
		r.log.Warn().Dur("past_deadline", late).Dur("lease_ttl", t.leaseTTL).
			Msg("refusing an ExecuteTask that arrived after its lease deadline (no renewal acked on this connection for a lease TTL); not starting it")
		return false
	}
	if old := t.runs[r.id]; old != nil {
		if old.attempt == r.attempt && old.fence == r.fence {
			r.log.Debug().Msg("duplicate ExecuteTask ignored")
			return false
		}
		r.log.Warn().Int32("old_attempt", old.attempt).Msg("ExecuteTask for a newer attempt: killing the older one")
		t.forgetLocked(old, false)
	}
	return true
}

// holdRestoring holds r, prepared, while its files are restored:
// heartbeats renew it, a Hello lists it. False when the worker stops.
func (t *runTable) holdRestoring(r *run) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.stopping {
		return false
	}
	r.outs.BeginRestore()
	t.runs[r.id] = r
	return true
}

// restored ends r's restore and tells whether it may start: not when it
// was forgotten or the worker stops (forgotten), nor when a stop was asked
// for meanwhile (stopped, its outcome).
func (t *runTable) restored(r *run) (forgotten bool, stopped pb.Outcome) {
	t.mu.Lock()
	defer t.mu.Unlock()
	r.outs.EndRestore()
	return r.forgotten || t.stopping, r.stopOutcome
}

// unstarted records the report of a run that never started; add holds
// the run for it unless the worker stops (a run held for its restore is
// held already).
func (t *runTable) unstarted(r *run, fin *pb.TaskFinished, add bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	r.fin = fin
	if add && !t.stopping {
		t.runs[r.id] = r
	}
	t.kick()
}

// start starts the prepared run with spawn under the lock, so shutdown
// cannot slip between the start and the registration of the process; it
// does not start it when the worker stops. On success the run is
// published with its TaskStarted, its outputs and timeout begin.
func (t *runTable) start(r *run, cmd *exec.Cmd, m *pb.ExecuteTask, spawn func() error) (stopping bool, err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.stopping {
		return true, nil
	}
	if err := spawn(); err != nil {
		return false, err
	}
	r.cmd = cmd
	r.pgid = cmd.Process.Pid // Setpgid: the leader's pid names the group
	r.startedAt = time.Now()
	r.startedMsg = &pb.TaskStarted{
		TaskId:        r.id,
		Attempt:       r.attempt,
		Fence:         r.fence,
		Pid:           int32(r.pgid),
		StartedUnixMs: r.startedAt.UnixMilli(),
		MasterPort:    startedPort(m),
	}
	t.runs[r.id] = r
	t.procs.Add(1)
	if keepsOutputs(m) {
		r.outs.Start()
	}
	if secs := m.GetTimeoutSeconds(); secs > 0 {
		r.timeoutTimer = time.AfterFunc(time.Duration(secs)*time.Second, func() {
			t.mu.Lock()
			defer t.mu.Unlock()
			if r.reaped {
				return
			}
			r.log.Warn().Int64("timeout_seconds", secs).Msg("run timed out")
			t.stopLocked(r, pb.Outcome_OUTCOME_TIMEOUT, t.grace)
		})
	}
	ev := r.log.Info().Int("pid", r.pgid).Str("dir", cmd.Dir)
	if r.ident != nil {
		ev = ev.Uint32("uid", r.ident.UID())
	}
	ev.Msg("run started")
	return false, nil
}

// reaped notes that r's leader was reaped, and returns its group, its
// start and why a watchdog stopped it ("": none did; the watchdogs leave a
// reaped run alone, so this is final).
func (t *runTable) reaped(r *run) (pgid int, started time.Time, stopErr string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	r.reaped = true
	r.stopTimersLocked()
	t.reapedLocked(r) // past its lease deadline: forgotten
	return r.pgid, r.startedAt, r.stopErr
}

// exited notes that every process of r is gone (its leader reaped, its
// control group and process group killed and removed, its uid's strays
// swept) and what held its GPUs, cores and cache given back, and queues
// its TaskExited for a master that takes it: the master may then place
// another run on those GPUs while r's outputs are still synced. r keeps
// its lease and its place in the table until its TaskFinished is acked.
func (t *runTable) exited(r *run) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if r.forgotten {
		return
	}
	r.gone = true
	if t.exitedOK {
		r.exitedMsg = &pb.TaskExited{TaskId: r.id, Attempt: r.attempt, Fence: r.fence}
		t.kick()
	}
}

// ended records the report of r, whose group is gone and whose output is
// read, unless it was forgotten; the process no longer counts.
func (t *runTable) ended(r *run, waitErr error, dur time.Duration, use cgroup.Usage) {
	defer t.procs.Done()
	t.mu.Lock()
	defer t.mu.Unlock()
	if r.forgotten {
		r.log.Info().Msg("killed run ended")
		return
	}
	outcome := r.stopOutcome
	if outcome == pb.Outcome_OUTCOME_UNSPECIFIED {
		outcome = pb.Outcome_OUTCOME_EXITED
	}
	r.fin = r.finishedMsg(r.cmd.ProcessState, waitErr, dur, outcome, use)
	r.outs.End() // the last sync of outputs; TaskFinished waits for it
	r.log.Info().Str("outcome", outcome.String()).Int32("exit_code", r.fin.ExitCode).
		Str("signal", r.fin.Signal).Str("reason", r.fin.Reason).Uint64("log_bytes", r.fin.LogBytes).Msg("run ended")
	t.kick()
}

// groups are the process groups of the runs this worker started and has
// not reaped, for the GPU sampler's foreign rule.
func (t *runTable) groups() []nvsmi.RunGroup {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]nvsmi.RunGroup, 0, len(t.runs))
	for _, r := range t.runs {
		if r.pgid > 1 && !r.reaped {
			out = append(out, nvsmi.RunGroup{PGID: r.pgid, GPUs: r.gpus})
		}
	}
	return out
}

// watchGPUMemory applies the GPU memory watchdog (gpuwatch.go) to a
// sample and returns the lines for the runs' logs, to be written without
// the lock (a full spool blocks its writer).
func (t *runTable) watchGPUMemory(smp *nvsmi.Sample, grace time.Duration, enforce bool) []runLine {
	t.mu.Lock()
	defer t.mu.Unlock()
	var lines []runLine
	for _, r := range t.runs {
		line, stop := r.gpuMemoryLocked(smp, grace, enforce)
		if line != "" {
			lines = append(lines, runLine{r, line})
		}
		if stop {
			t.watchStopLocked(r)
		}
	}
	return lines
}

// artifactAck hands a master's ArtifactAck to the outputs of the run it
// names.
func (t *runTable) artifactAck(m *pb.ArtifactAck) {
	t.mu.Lock()
	defer t.mu.Unlock()
	var o *outputs.Files
	if r := t.runs[m.GetTaskId()]; r != nil && r.attempt == m.GetAttempt() {
		o = r.outs
	}
	t.out.Ack(m, o)
}

// restoreChunk hands a chunk of a restored file to its run's restore.
// Never blocks.
func (t *runTable) restoreChunk(m *pb.ArtifactChunk) {
	if !m.GetRestore() {
		return
	}
	t.mu.Lock()
	var o *outputs.Files
	if r := t.runs[m.GetTaskId()]; r != nil && r.attempt == m.GetAttempt() {
		o = r.outs
	}
	t.mu.Unlock()
	if o != nil {
		o.RestoreChunk(m)
	}
}

// fenceEvery is how often selfFence looks at the deadlines: a twentieth of
// the lease TTL, within 10 ms to 500 ms.
func (t *runTable) fenceEvery() time.Duration {
	t.mu.Lock()
	defer t.mu.Unlock()
	return min(max(t.leaseTTL/20, 10*time.Millisecond), 500*time.Millisecond)
}

// selfFence kills the running runs whose lease deadline has passed; now is
// a leaseguard.Now reading.
func (t *runTable) selfFence(now time.Duration) {
	t.mu.Lock()
	defer t.mu.Unlock()
	var killed []string
	var late time.Duration
	for _, r := range t.runs {
		if r.fin != nil {
			continue
		}
		d := t.deadlineLocked(r)
		if d == 0 || now <= d {
			continue
		}
		late = max(late, now-d)
		t.forgetLocked(r, true)
		killed = append(killed, r.id)
	}
	if len(killed) > 0 {
		t.log.Error().Strs("tasks", killed).Dur("past_deadline", late).Dur("lease_ttl", t.leaseTTL).
			Msg("self-fencing: no lease renewal acked for a whole lease TTL; killed the runs (they may run elsewhere by now)")
	}
}

// renewedLocked records that the master acked the renewal sent at sent: the
// lease of every run held then now ends a lease TTL after sent, for the
// guard and for selfFence. Runs started after sent were not in that
// renewal and keep their deadline.
func (t *runTable) renewedLocked(sent sentAt) {
	if sent.boot <= t.lastRenewal.boot {
		return // an older renewal acked late
	}
	t.lastRenewal = sent
	var pgids []int
	for _, r := range t.runs {
		if r.pgid > 1 && !r.reaped && !r.startedAt.After(sent.at) {
			pgids = append(pgids, r.pgid)
		}
	}
	t.guard.Renew(sent.boot+t.leaseTTL, pgids)
}

// leaseLeftLocked tells whether a run that an ExecuteTask read on s names
// may still start: its lease deadline is the send time of the latest
// renewal s's master acked (its Hello, then a Heartbeat) plus the lease
// TTL, on leaseguard.Now, the same deadline the guard and selfFence give the
// run once it starts. The master claimed the lease while serving this
// connection, after that renewal had left, so the real lease ends no
// sooner (but for a claim racing the ack: milliseconds, inside the
// master's requeue margin). An ExecuteTask held in the network (a
// partition) for longer than the TTL must not start: its lease is gone and
// the master may have started the next attempt elsewhere. When it may not
// start, late says how far past the deadline it is.
func (t *runTable) leaseLeftLocked(s *session) (late time.Duration, ok bool) {
	if s == nil || s.renewed.boot == 0 || t.leaseTTL <= 0 {
		return 0, true // no session-scoped renewal known (tests driving execute directly)
	}
	now := leaseguard.Now()
	if d := s.renewed.boot + t.leaseTTL; now >= d {
		return now - d, false
	}
	return 0, true
}

// reapedLocked is called once r's leader was reaped. A run that ended past
// its lease deadline was killed for it by the guard, or could have been:
// the master counts it LOST either way, so it is forgotten without a report,
// like a self-fenced one.
func (t *runTable) reapedLocked(r *run) {
	if r.forgotten {
		return
	}
	if d := t.deadlineLocked(r); d != 0 && leaseguard.Now() > d {
		r.log.Error().Dur("lease_ttl", t.leaseTTL).
			Msg("self-fencing: the run ended past its lease deadline (the guard kills it then); forgotten without a report (it may run elsewhere by now)")
		t.forgetLocked(r, true)
		return
	}
	// A renewal late by a few milliseconds moves the deadline after the
	// guard, on its own clock reading, killed the group: the run then died
	// of SIGKILL with a deadline in the future, and reporting that as its
	// exit would fail a run the lease took from it (the chaos soak's one
	// run-ended-badly). Counted LOST like the others.
	if t.guard.Lapsed(r.pgid) && killedBySIGKILL(r.cmd.ProcessState) {
		r.log.Error().Dur("lease_ttl", t.leaseTTL).
			Msg("self-fencing: the run died of SIGKILL after its lease deadline had passed once (the guard's kill); forgotten without a report")
		t.forgetLocked(r, true)
	}
}

// deadlineLocked is the lease deadline of r (leaseguard.Now; 0: none yet).
func (t *runTable) deadlineLocked(r *run) time.Duration {
	if d, ok := t.guard.Deadline(r.pgid); ok {
		return d
	}
	if t.lastRenewal.boot == 0 || t.leaseTTL <= 0 {
		return 0
	}
	return t.lastRenewal.boot + t.leaseTTL // not registered yet
}

// termRunLocked is the interactive run a terminal frame names, if it is
// the current attempt under that fence and has not been reaped.
func (t *runTable) termRunLocked(id string, attempt int32, fence uint64) *run {
	r := t.runs[id]
	if r == nil || r.term == nil || r.attempt != attempt || r.fence != fence || r.reaped || r.cmd == nil {
		return nil
	}
	return r
}

// termInput queues input from the master for an interactive run's
// terminal; it never waits for the PTY.
func (t *runTable) termInput(m *pb.TermInput) {
	t.mu.Lock()
	defer t.mu.Unlock()
	r := t.termRunLocked(m.GetTaskId(), m.GetAttempt(), m.GetFence())
	if r == nil {
		return
	}
	if !r.term.input(m) {
		r.log.Warn().Int("bytes", len(m.GetData())).Msg("terminal input queue full (the master broke its input window); input dropped")
	}
}

// termResize sets an interactive run's window size (clamped).
func (t *runTable) termResize(m *pb.TermResize) {
	t.mu.Lock()
	defer t.mu.Unlock()
	r := t.termRunLocked(m.GetTaskId(), m.GetAttempt(), m.GetFence())
	if r == nil {
		return
	}
	if err := setWinsize(r.term.ptmx, m.GetCols(), m.GetRows()); err != nil {
		r.log.Warn().Err(err).Msg("cannot resize the run's terminal")
	}
}
