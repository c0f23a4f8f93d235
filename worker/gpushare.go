package worker

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
)

// The worker's side of shared GPUs (issue 28; docs/gpus.md "Sharing a
// GPU"): an ExecuteTask with gpu_fraction 0 < f < 1 names one GPU, which
// it shares with other fractional runs only, never with a whole-GPU run.
// The master's placement keeps to this; the worker checks it again,
// because a run on a GPU it does not expect to share would fail in ways
// nobody could explain.

// checkShare validates a run's fraction and GPU memory (ExecuteTask
// gpu_fraction, gpu_memory_mb).
func checkShare(fraction float64, memMB int64, gpus []int) error {
	switch {
	case math.IsNaN(fraction) || fraction < 0 || fraction >= 1:
		return fmt.Errorf("invalid gpu_fraction %v: want 0 (whole GPUs) or a share above 0 and below 1", fraction)
	case fraction > 0 && len(gpus) != 1:
		return fmt.Errorf("gpu_fraction %v names %d GPUs: a fractional run has exactly one", fraction, len(gpus))
	case memMB < 0:
		return fmt.Errorf("invalid gpu_memory_mb %d: want 0 (no limit) or more", memMB)
	}
	return nil
}

// fractional: the run has a share of one GPU, not whole GPUs.
func (r *run) fractional() bool { return r.fraction > 0 }

// holdsGPUsLocked: r counts as on its GPUs until its processes are gone
// (runTable.exited; the last sync of its outputs may still run, and needs
// no GPU) or its report is made, or it is forgotten (then it left t.runs).
// Caller holds runTable.mu.
func (r *run) holdsGPUsLocked() bool { return r.fin == nil && !r.gone }

// gpuConflictLocked says why r may not have its GPUs, "" when it may: a
// whole-GPU run shares a GPU with no run, a fractional run only with other
// fractional runs, and under MPS only with runs of the uid its GPU's MPS
// server serves. Caller holds runTable.mu.
func (t *runTable) gpuConflictLocked(r *run) string {
	for _, g := range r.gpus {
		for _, o := range t.runs {
			if o == r || o.id == r.id || !o.holdsGPUsLocked() || !slices.Contains(o.gpus, g) {
				continue // the older attempt of the same task is killed for this one (admit)
			}
			switch {
			case !r.fractional():
				return fmt.Sprintf("GPU %d is held by run %s; a whole-GPU run shares its GPU with no other run", g, o.id)
			case !o.fractional():
				return fmt.Sprintf("GPU %d is held whole by run %s; a fractional run shares a GPU only with other fractional runs", g, o.id)
			}
		}
	}
	return ""
}

// checkGPUs is gpuConflictLocked for a run about to be prepared; every
// ExecuteTask is prepared on the session's reader goroutine one at a time,
// and a run is in the table before the next is read, so the check cannot
// race another start.
func (t *runTable) checkGPUs(r *run) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if why := t.gpuConflictLocked(r); why != "" {
		r.log.Warn().Ints("gpus", r.gpus).Float64("gpu_fraction", r.fraction).Msg("refusing the run: " + why)
		return fmt.Errorf("refused by the worker: %s", why)
	}
	return nil
}

// shareEnv is what a fractional run sees of its share besides
// CUDA_VISIBLE_DEVICES: RLSCHED_GPU_FRACTION ("0.25") and, when it has a
// memory share, RLSCHED_GPU_MEMORY_MB.
func shareEnv(fraction float64, memMB int64) []string {
	if fraction <= 0 {
		return nil
	}
	env := []string{"RLSCHED_GPU_FRACTION=" + strconv.FormatFloat(fraction, 'f', -1, 64)}
	if memMB > 0 {
		env = append(env, "RLSCHED_GPU_MEMORY_MB="+strconv.FormatInt(memMB, 10))
	}
	return env
}

// mibComma writes n MiB with thousands separators, as the watchdog's
// sentence does: "9,210 MiB".
func mibComma(n int64) string {
	s := strconv.FormatInt(n, 10)
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 && s[i-1] != '-' {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String() + " MiB"
}
