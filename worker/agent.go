package worker

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/rs/zerolog"

	"github.com/rlsched/rlsched/codec/pb"
	"github.com/rlsched/rlsched/worker/nvsmi"
)

// agent is one running worker. Its fields after mu, and every run's fields
// marked "guarded by agent.mu", are only touched with mu held; methods named
// ...Locked expect it held. Lock order: agent.mu, then a spool's lock or the
// guard's; nothing that holds those takes agent.mu.
type agent struct {
	cfg        Config
	instance   string // Hello.instance, kept in the data dir
	log        zerolog.Logger
	scriptsDir string
	iso        *isolation // whose uid each run gets, and its private dir
	guard      *guard     // nil when the guard could not start
	spawner    *spawner
	procs      sync.WaitGroup // one per started process, done once it is reaped

	mu          sync.Mutex
	runs        map[string]*run // by task id
	sess        *session        // the joined session, nil while disconnected
	leaseTTL    time.Duration   // from the last HelloAck
	logWindow   int             // credit window of the session; from HelloAck and LogAcks (windowFrom)
	lastRenewal sentAt          // send time of the last renewal the master acked
	stopping    bool
	// Outputs (outputs.go): artWindow is the session's artifact window
	// (HelloAck, ArtifactAck); outGen counts sessions, so uploads and
	// restores know to start again from what was acked; outCond (on mu)
	// wakes uploaders on an ack, a chunk taken, a new session, a stop.
	artWindow  int
	outGen     uint64
	outCond    *sync.Cond
	restoreSem chan struct{} // one run restores at a time (restore.go)
	// sampler samples the GPUs (gpusample.go); nil without GPUs. Set
	// before the first session, then read-only.
	sampler *nvsmi.Sampler
}

// Run runs a worker until ctx is cancelled: it joins a master (failing over
// along cfg.Masters), runs what it is given, and on cancellation stops its
// runs (SIGTERM, cfg.Grace, SIGKILL), waits for them, and returns nil. It
// returns an error only when it cannot start (bad config, unwritable DataDir,
// DataDir in use by another worker).
func Run(ctx context.Context, cfg Config) error {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return err
	}
	// Before anything touches the dir: it may be another live worker's.
	dir, err := lockDataDir(cfg.DataDir)
	if err != nil {
		return err
	}
	defer dir.close()
	if cfg.ID == "" {
		cfg.ID = defaultID(cfg.Host, dir.suffix)
	}
	a := &agent{
		cfg:      cfg,
		instance: dir.instance,
		log:      cfg.Logger.With().Str("worker", cfg.ID).Logger(),
		runs:     map[string]*run{},
	}
	a.outCond = sync.NewCond(&a.mu)
	a.restoreSem = make(chan struct{}, 1)
	if a.iso, err = newIsolation(cfg, a.log); err != nil {
		return err
	}
	// Spilled output of an earlier worker process: its runs died with it.
	if err := os.RemoveAll(filepath.Join(cfg.DataDir, "spool")); err != nil {
		a.log.Warn().Err(err).Msg("cannot remove the old output spool")
	}
	if a.scriptsDir, err = materialiseScripts(filepath.Join(cfg.DataDir, "scripts")); err != nil {
		return err
	}
	var uidLocks string
	if a.iso.uids != nil {
		uidLocks = a.iso.uids.dir
	}
	if a.guard, err = startGuard(a.log, uidLocks); err != nil {
		a.log.Error().Err(err).Msg("no guard process: runs may outlive a crashed or frozen worker")
	}
	a.log.Info().Strs("masters", cfg.Masters).Int("gpus", len(cfg.GPUs)).Int("slots", cfg.Slots).
		Str("data_dir", cfg.DataDir).Msg("worker starting")

	a.spawner = startSpawner()
	a.sampler = a.startSampler(ctx)
	var bg sync.WaitGroup
	bg.Go(func() { a.fenceLoop(ctx) })
	a.connectLoop(ctx)
	bg.Wait()
	a.shutdown()
	a.spawner.stop()
	a.guard.close()
	a.log.Info().Msg("worker stopped")
	return nil
}

// shutdown stops every run and waits until all processes are reaped.
func (a *agent) shutdown() {
	a.mu.Lock()
	a.stopping = true
	for _, r := range a.runs {
		r.stopLocked(a, pb.Outcome_OUTCOME_CANCELLED, a.cfg.Grace)
		r.out.Discard() // nobody will send it; unblock the pump
		if r.outs != nil {
			r.outs.stopLocked()
		}
	}
	if n := len(a.runs); n > 0 {
		a.log.Info().Int("runs", n).Msg("stopping runs")
	}
	a.mu.Unlock()
	a.procs.Wait()
}

// kick wakes the current session's writer. Safe from any goroutine that
// does not hold a.mu.
func (a *agent) kick() {
	a.mu.Lock()
	a.kickLocked()
	a.mu.Unlock()
}

// kickLocked is kick for callers holding a.mu.
func (a *agent) kickLocked() {
	if a.sess != nil {
		a.sess.poke()
	}
}

// forgetLocked kills r and drops it without a report: for runs whose lease
// the master says is gone (kill_task_ids, lost_task_ids, a fenced LogAck),
// which get SIGTERM, the grace and SIGKILL, and for self-fencing (now), which
// gets SIGKILL at once since the run may already be running elsewhere.
// Caller holds a.mu.
func (a *agent) forgetLocked(r *run, now bool) {
	if a.runs[r.id] == r {
		delete(a.runs, r.id)
	}
	r.forgotten = true
	r.out.Discard()
	if r.outs != nil {
		r.outs.stopLocked() // no last sync: the run may run elsewhere by now
	}
	if now {
		r.signalLocked(syscall.SIGKILL)
	} else {
		r.stopLocked(a, pb.Outcome_OUTCOME_LOST, a.cfg.Grace)
	}
}

// refsLocked lists every run held. Caller holds a.mu.
func (a *agent) refsLocked() []*pb.RunRef {
	refs := make([]*pb.RunRef, 0, len(a.runs))
	for _, r := range a.runs {
		refs = append(refs, r.refLocked())
	}
	return refs
}

// adopt makes s the joined session after its HelloAck: it applies the lease
// TTL, counts the Hello as a renewal, kills the runs the master disowns and
// rewinds every other run's output to its acked offset.
func (a *agent) adopt(s *session, ack *pb.HelloAck, helloSent sentAt) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.leaseTTL = time.Duration(ack.GetLeaseTtlMs()) * time.Millisecond
	a.logWindow = windowFrom(ack.GetLogWindow(), logWindow)
	a.artWindow = artifactWindow
	if w := ack.GetArtifactWindow(); w > 0 {
		a.artWindow = min(int(w), maxArtifactWindow)
	}
	if a.leaseTTL <= 0 {
		a.leaseTTL = defaultLeaseTTL
	}
	for _, id := range ack.GetKillTaskIds() {
		if r := a.runs[id]; r != nil {
			r.log.Warn().Msg("master disowns the run (kill_task_ids): killing it")
			a.forgetLocked(r, false)
		}
	}
	a.renewedLocked(helloSent) // the runs the master kept
	s.renewed = helloSent
	for _, r := range a.runs {
		r.sent = r.out.Acked()
		r.finSent = false
	}
	a.sess = s
	a.rewindOutputsLocked()
}

// detach forgets s once its goroutines are done.
func (a *agent) detach(s *session) {
	a.mu.Lock()
	if a.sess == s {
		a.sess = nil
	}
	a.mu.Unlock()
}

// cancel handles CancelTask. Reader goroutine.
func (a *agent) cancel(m *pb.CancelTask) {
	a.mu.Lock()
	defer a.mu.Unlock()
	r := a.runs[m.GetTaskId()]
	if r == nil || r.attempt != m.GetAttempt() || (m.GetFence() != 0 && m.GetFence() != r.fence) {
		a.log.Info().Str("task", m.GetTaskId()).Int32("attempt", m.GetAttempt()).Msg("CancelTask for a run not held here; ignored")
		return
	}
	grace := time.Duration(m.GetGraceMs()) * time.Millisecond
	if grace <= 0 {
		grace = a.cfg.Grace
	}
	r.log.Info().Str("reason", m.GetReason()).Msg("cancel requested")
	r.stopLocked(a, pb.Outcome_OUTCOME_CANCELLED, grace)
}

// logAck handles LogAck. Reader goroutine.
func (a *agent) logAck(m *pb.LogAck) {
	a.mu.Lock()
	defer a.mu.Unlock()
	w := windowFrom(m.GetLogWindow(), a.logWindow)
	if w > a.logWindow {
		defer a.kickLocked() // more room: send now (runs before the unlock)
	}
	a.logWindow = w
	r := a.runs[m.GetTaskId()]
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
		a.forgetLocked(r, false)
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
	a.kickLocked()
}

// windowFrom is the credit window a master granted (HelloAck or LogAck
// log_window), or cur when it named none (0: an older master, or no
// change). It never exceeds the worker's own logWindow, nor goes below one
// byte, whatever the master says.
func windowFrom(granted uint32, cur int) int {
	if granted == 0 {
		return cur
	}
	return min(max(int(granted), 1), logWindow)
}

// backoffLocked pauses the run's output for the next backoff delay, unless
// a pause is already running (the refusals of frames that were in flight
// together count once). Caller holds agent.mu.
func (r *run) backoffLocked() (time.Duration, bool) {
	now := time.Now()
	if now.Before(r.retryAt) {
		return 0, false
	}
	d := r.retry.Delay()
	r.retryAt = now.Add(d)
	return d, true
}

// busyBackoffLocked is backoffLocked for a "busy" refusal: a full queue
// drains in a fraction of a second, so the pause starts shorter and stops
// growing sooner than for a master that cannot store output, and it is
// jittered so the runs refused together do not come back together.
func (r *run) busyBackoffLocked() (time.Duration, bool) {
	now := time.Now()
	if now.Before(r.retryAt) {
		return 0, false
	}
	r.busyRetry.Min, r.busyRetry.Max = busyBackoffMin, busyBackoffMax
	d := r.busyRetry.Delay()
	r.retryAt = now.Add(d)
	return d, true
}

// finishedAck handles TaskFinishedAck: the run is done with. Reader goroutine.
func (a *agent) finishedAck(m *pb.TaskFinishedAck) {
	a.mu.Lock()
	defer a.mu.Unlock()
	r := a.runs[m.GetTaskId()]
	if r == nil || r.attempt != m.GetAttempt() || r.fin == nil {
		return
	}
	delete(a.runs, r.id)
	r.out.Discard() // every byte was acked: this only removes spill files
	r.log.Debug().Msg("TaskFinished acked; run forgotten")
	if r.outs != nil && r.outs.heldLocked() {
		go removeRunDir(r)
	} else if r.outDir != "" {
		r.log.Info().Str("dir", r.outDir).Msg("keeping the run's output dir: the master does not hold all of it")
	}
}

// removeRunDir removes a finished run's output dir, whose every file the
// master stored, and its task's dir once no attempt is left in it: a
// worker would otherwise keep every output of every run it ever ran.
// os.RemoveAll follows no symbolic link the run left (it works from
// directory descriptors), and the dirs above are the worker's.
func removeRunDir(r *run) {
	if err := os.RemoveAll(r.outDir); err != nil {
		r.log.Warn().Err(err).Str("dir", r.outDir).Msg("cannot remove the run's output dir")
		return
	}
	_ = os.Remove(filepath.Dir(r.outDir)) // fails while another attempt's dir is there
}

// heartbeatAck handles HeartbeatAck: the renewal sent at the heartbeat's
// send time is acked, and lost runs are killed. Reader goroutine.
func (a *agent) heartbeatAck(s *session, m *pb.HeartbeatAck) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, id := range m.GetLostTaskIds() {
		if r := a.runs[id]; r != nil {
			r.log.Warn().Msg("master reports the run's lease lost: killing it")
			a.forgetLocked(r, false)
		}
	}
	if sent, ok := s.hbSent[m.GetSeq()]; ok {
		a.renewedLocked(sent) // the runs not lost
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
