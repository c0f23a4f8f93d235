package worker

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/rs/zerolog"

	"github.com/rlsched/rlsched/codec/pb"
	"github.com/rlsched/rlsched/internal/backoff"
	"github.com/rlsched/rlsched/worker/cgroup"
	"github.com/rlsched/rlsched/worker/isolation"
	"github.com/rlsched/rlsched/worker/outputs"
	"github.com/rlsched/rlsched/worker/spool"
)

// run is one attempt of one task held by this worker, from ExecuteTask until
// the master acks its TaskFinished (or the worker kills and forgets it).
type run struct {
	// Set before the run is published in the run table, then read-only.
	id      string
	attempt int32
	fence   uint64
	token   []byte // ExecuteTask.run_token: what has the run adopted after a reconnect (Hello)
	gpus    []int  // ExecuteTask.gpu_indices
	// fraction is its share of its one GPU (0: whole GPUs), gpuMemMB the
	// GPU memory it may use (0: no limit); gpushare.go.
	fraction float64
	gpuMemMB int64
	out      *spool.Buffer
	log      zerolog.Logger
	pipe     *os.File            // read end of the merged stdout/stderr; nil when the start failed
	ident    *isolation.Identity // whose uid the run has; nil: the worker's own (RunAsNone)
	dirs     isolation.RunDirs   // its output and private dirs, once created
	outs     *outputs.Files      // its upload and restore, once the dir is open
	cg       *cgroup.Group       // its control group; nil when unenforced
	// cacheDir is its user's cache dir ("": none); cacheDone gives it back.
	cacheDir  string
	cacheDone func()
	// mpsDone gives back its place on its GPU's MPS daemon (mps.go); nil:
	// none.
	mpsDone func()
	// py is its Python environment (pyenv.go; nil: none); envDone gives
	// back its hold of a built one.
	py      *pyEnv
	envDone func()
	// hostEnv counts the worker's inherited entries at the head of its
	// command's env (the rest are the run's: runVars); image: it runs in
	// a container image (image.go).
	hostEnv int
	image   bool
	// scriptArgs are the built-in scripts its argv names (resolve checks
	// that its uid can read them).
	scriptArgs []string
	pumped     chan struct{} // closed when the pump has read the pipe to its end
	// last is its last line of output, the pump's until pumped is closed;
	// hint, set by reap, is what it says of a failure (lastoutput.go).
	last   lastOutput
	hint   string
	term   *term       // the terminal of an interactive run (terminal.go); nil for a batch run
	exited atomic.Bool // the leader was reaped; the pump stops waiting for stray writers

	// Guarded by runTable.mu.
	cmd         *exec.Cmd
	pgid        int
	startedAt   time.Time
	startedMsg  *pb.TaskStarted  // its TaskStarted, once the process started
	startedSent bool             // startedMsg written in the current session
	sent        uint64           // next offset to send in the current session
	finSent     bool             // TaskFinished written in the current session
	fin         *pb.TaskFinished // the report, once the process is reaped and its output read
	// gone: every process of the run is gone (runTable.exited), before its
	// outputs' last sync; exitedMsg is its TaskExited, not yet collected.
	gone         bool
	exitedMsg    *pb.TaskExited
	stopOutcome  pb.Outcome // CANCELLED or TIMEOUT once a stop was asked for
	termSent     bool
	retry        backoff.Backoff // output refused (the master cannot store it): resend with backoff
	busyRetry    backoff.Backoff // output refused "busy" (the master's queue was full)
	retryAt      time.Time       // no output is sent before then
	reaped       bool
	forgotten    bool
	killTimer    *time.Timer
	timeoutTimer *time.Timer
	// The GPU memory watchdog's (gpuwatch.go): since when the run is over
	// its share (zero: it is not).
	overSince time.Time
	// Why a watchdog of the worker stopped the run (gpuwatch.go,
	// diskwatch.go): its Task's reason and error; "": none did.
	stopReason, stopErr string
	// Its group's CPU time at its last usage sample and that sample's time
	// (gpusample.go); zero: none yet.
	usedAt    time.Time
	usedNanos int64
}

// releaseMPS gives back the run's place on its GPU's MPS daemon, once;
// the last run's stops the daemon.
func (r *run) releaseMPS() {
	if r.mpsDone != nil {
		r.mpsDone()
		r.mpsDone = nil
	}
}

// releaseCache gives back the run's cache dir, once.
func (r *run) releaseCache() {
	if r.cacheDone != nil {
		r.cacheDone()
		r.cacheDone = nil
	}
}

// releaseEnv gives back the run's hold of its built Python env, once.
func (r *run) releaseEnv() {
	if r.envDone != nil {
		r.envDone()
		r.envDone = nil
	}
}

// ref describes the run for a Hello (with its run token) or a Heartbeat.
// Caller holds runTable.mu.
func (r *run) refLocked(hello bool) *pb.RunRef {
	ref := &pb.RunRef{
		TaskId:         r.id,
		Attempt:        r.attempt,
		Fence:          r.fence,
		AckedLogOffset: r.out.Acked(),
		Finished:       r.fin != nil || r.gone,
	}
	if hello {
		ref.RunToken = r.token
	}
	return ref
}

// signalLocked sends sig to the run's process group unless the leader was
// already reaped (its pgid could then name someone else's group). Caller
// holds runTable.mu.
func (r *run) signalLocked(sig syscall.Signal) {
	if r.pgid <= 1 || r.reaped {
		return
	}
	if err := syscall.Kill(-r.pgid, sig); err != nil && err != syscall.ESRCH {
		r.log.Warn().Err(err).Int("pgid", r.pgid).Str("signal", signalName(sig)).Msg("cannot signal run")
	}
}

// stopTimersLocked stops the timeout and kill timers. Caller holds runTable.mu.
func (r *run) stopTimersLocked() {
	if r.killTimer != nil {
		r.killTimer.Stop()
	}
	if r.timeoutTimer != nil {
		r.timeoutTimer.Stop()
	}
}

// finishedMsg builds the TaskFinished report of a reaped process, with
// what its control group counted (use).
func (r *run) finishedMsg(ps *os.ProcessState, waitErr error, dur time.Duration, outcome pb.Outcome, use cgroup.Usage) *pb.TaskFinished {
	m := &pb.TaskFinished{
		TaskId:     r.id,
		Attempt:    r.attempt,
		Fence:      r.fence,
		ExitCode:   -1,
		DurationMs: dur.Milliseconds(),
		Outcome:    outcome,
		LogBytes:   r.out.End(),
	}
	if r.cg != nil {
		m.CpuSeconds = use.CPUSeconds
		m.PeakMemoryMb = max(use.PeakMemoryMB, 0)
	}
	if r.stopErr != "" {
		// Stopped by a watchdog: that is why, whatever the process made
		// of its SIGTERM.
		m.Reason, m.Error = r.stopReason, r.stopErr
	} else if ps == nil || !ps.Success() {
		// The kernel's kill for its limit explains the SIGKILL (or the
		// exit status of a run whose fork failed).
		if m.Reason = use.Reason(); m.Reason != "" {
			m.Error = use.Message()
		}
	}
	if ps == nil {
		if waitErr != nil && m.Error == "" {
			m.Error = waitErr.Error()
		}
		return m
	}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		m.Signal = signalName(ws.Signal())
	} else {
		m.ExitCode = int32(ps.ExitCode())
		if m.Error == "" && r.hint != "" && m.ExitCode != 0 {
			m.Error = fmt.Sprintf("exit code %d: %s", m.ExitCode, r.hint)
		}
	}
	return m
}

// startFailedMsg is the report of a run that never started.
func startFailedMsg(m *pb.ExecuteTask, err error) *pb.TaskFinished {
	return &pb.TaskFinished{
		TaskId:   m.GetTaskId(),
		Attempt:  m.GetAttempt(),
		Fence:    m.GetFence(),
		ExitCode: -1,
		Error:    err.Error(),
		Reason:   startFailedReason(err),
		Outcome:  pb.Outcome_OUTCOME_START_FAILED,
	}
}

// startFailedReason is TaskFinished.reason of a start that failed with err:
// env_build for a Python env that could not be built.
func startFailedReason(err error) string {
	var e *envError
	if errors.As(err, &e) {
		return e.reason
	}
	return ""
}
