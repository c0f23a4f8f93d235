package worker

import (
	"fmt"
	"time"

	"github.com/rlsched/rlsched/codec/pb"
	"github.com/rlsched/rlsched/core"
	"github.com/rlsched/rlsched/worker/nvsmi"
)

// The GPU memory watchdog (issue 28; docs/gpus.md "Sharing a GPU"). Under
// time-slicing nothing stops a fractional run from taking all of its GPU's
// memory, and its neighbours' next allocations would fail for it. Each GPU
// sample (gpusample.go) says what every run's processes hold; a run over
// its gpu_memory_mb gets a warning line in its own log at once, and is
// stopped (SIGTERM, the grace, SIGKILL, as any stop) when it is still over
// GPU_MEMORY_GRACE_SECONDS later, ending FAILED with reason gpu_memory
// (core.ReasonGPUMemory).
// Under MPS, whose per-client limit already enforces the share, it only
// warns.

// watchGPUs is the sampler's OnSample: it runs on the sampler's goroutine
// and never blocks on a run (the log lines are written off it).
func (a *agent) watchGPUs(smp *nvsmi.Sample) {
	if !smp.Apps {
		return // what runs hold is the last sample's: nothing new to judge
	}
	for _, w := range a.tab.watchGPUMemory(smp, a.cfg.GPUMemoryGrace, a.cfg.GPUSharing != SharingMPS) {
		go func() { _, _ = fmt.Fprintf(w.r.out, "\n[rlsched] warning: %s\n", w.line) }()
	}
}

// runLine is a line for a run's own log.
type runLine struct {
	r    *run
	line string
}

// gpuMemoryLocked judges r against the sample: the line for its log, and
// whether it is to be stopped (its stopErr set). Caller holds
// runTable.mu.
func (r *run) gpuMemoryLocked(smp *nvsmi.Sample, grace time.Duration, enforce bool) (line string, stop bool) {
	if !r.fractional() || r.gpuMemMB <= 0 || r.pgid <= 1 || r.reaped || r.stopErr != "" {
		return "", false
	}
	var used int64
	for _, u := range smp.Runs {
		if u.PGID == r.pgid {
			used = u.MemoryMB
		}
	}
	gpu := r.gpus[0]
	if used <= r.gpuMemMB {
		if !r.overSince.IsZero() {
			r.overSince = time.Time{}
			r.log.Info().Int64("gpu_memory_mb", used).Msg("the run is back within its GPU memory share")
		}
		return "", false
	}
	if r.overSince.IsZero() {
		r.overSince = smp.At
		r.log.Warn().Int64("gpu_memory_mb", used).Int64("share_mb", r.gpuMemMB).Int("gpu", gpu).Msg("the run is over its GPU memory share")
		if !enforce {
			return fmt.Sprintf("the run uses %s of GPU %d, over its %s share; MPS holds it to its share, so its next allocations past it fail",
				mibComma(used), gpu, mibComma(r.gpuMemMB)), false
		}
		return fmt.Sprintf("the run uses %s of GPU %d, over its %s share; it is stopped if still over in %s (ask for more with --gpu-memory)",
			mibComma(used), gpu, mibComma(r.gpuMemMB), grace), false
	}
	over := smp.At.Sub(r.overSince)
	if !enforce || over < grace {
		return "", false
	}
	r.stopReason = core.ReasonGPUMemory
	r.stopErr = fmt.Sprintf("used %s of GPU %d, over its %s share for %d s; ask for more with --gpu-memory",
		mibComma(used), gpu, mibComma(r.gpuMemMB), int(over.Round(time.Second)/time.Second))
	r.log.Warn().Int64("gpu_memory_mb", used).Int64("share_mb", r.gpuMemMB).Dur("over_for", over).Msg("stopping the run: " + r.stopErr)
	return "", true // its log's last line says why (reap), once its output is all read
}

// watchStopLocked asks r to stop for what a watchdog found (its stopErr
// set): it ends as exited, its report then carrying the watchdog's reason
// whatever its exit status. Caller holds runTable.mu.
func (t *runTable) watchStopLocked(r *run) {
	t.stopLocked(r, pb.Outcome_OUTCOME_EXITED, t.grace)
}
