package core

import (
	"fmt"
	"math"
)

// Bounds of a run's cores and memory (API.md "Resources"). A request
// outside them is a mistake (a unit typed wrong), not a run that waits: a
// cgroup cannot limit a run to under a hundredth of a core (cpu.max's
// quota is at least 1 ms of a 100 ms period), and no process starts in a
// few MiB.
const (
	MinCPUs     = 0.01
	MaxCPUs     = 4096
	MinMemoryMB = 16
	MaxMemoryMB = 64 << 20 // 64 TiB
)

// Reasons a run ended that its exit code does not tell (Task.Reason).
const (
	ReasonOutOfMemory = "out_of_memory"
	ReasonPidsLimit   = "pids_limit"
	// ReasonGPUMemory: its worker's GPU memory watchdog stopped a
	// fractional run that used more than its gpuMemoryMb past the grace
	// (issue 28); its error is the worker's sentence.
	ReasonGPUMemory = "gpu_memory"
	// ReasonDisk: its worker's disk watchdog stopped a run over the disk a
	// run may fill there (DISK_MAX_MB), or the one holding the most of a
	// disk that ran short (DISK_MIN_FREE_PERCENT); its error is the
	// worker's sentence.
	ReasonDisk = "disk"
)

// StoppedByWorker reports whether reason is a watchdog's of the worker,
// which stops the run whatever its process makes of the SIGTERM, and
// whose error is the worker's sentence.
func StoppedByWorker(reason string) bool { return reason == ReasonGPUMemory || reason == ReasonDisk }

// WarnUnenforced is the warning of a run started on a worker that could
// not enforce its limits (RESOURCE_ENFORCEMENT=best-effort).
const WarnUnenforced = "unenforced"

// ResourceDefaults are what a run that does not ask for cores or memory
// gets (DEFAULT_CPUS_PER_GPU, DEFAULT_MEMORY_MB_PER_GPU for GPU runs, per
// GPU; DEFAULT_CPUS, DEFAULT_MEMORY_MB for CPU-only runs). A zero default
// leaves the run without a request of that kind: it is placed as taking
// none and gets no limit.
type ResourceDefaults struct {
	CPUsPerGPU     float64
	MemoryMBPerGPU int64
	CPUs           float64
	MemoryMB       int64
}

// DefaultResources are the defaults' defaults: none. A default that limits
// or places runs by cores and memory they never asked for queues (a 4-GPU
// machine with 2 cores held 2 one-GPU runs) or kills (a replay buffer past
// 4 GiB) runs that ran before; a lab sets DEFAULT_* to its machines' shape
// (docs/deploy.md).
var DefaultResources = ResourceDefaults{}

// Check reports a default outside the bounds a submission is held to.
func (d ResourceDefaults) Check() error {
	for _, c := range []struct {
		name string
		v    float64
	}{{"DEFAULT_CPUS_PER_GPU", d.CPUsPerGPU}, {"DEFAULT_CPUS", d.CPUs}} {
		if c.v != 0 {
			if err := CheckCPUs(c.v); err != nil {
				return fmt.Errorf("%s: %w (0: no default)", c.name, err)
			}
		}
	}
	for _, c := range []struct {
		name string
		v    int64
	}{{"DEFAULT_MEMORY_MB_PER_GPU", d.MemoryMBPerGPU}, {"DEFAULT_MEMORY_MB", d.MemoryMB}} {
		if c.v != 0 {
			if err := CheckMemoryMB(c.v); err != nil {
				return fmt.Errorf("%s: %w (0: no default)", c.name, err)
			}
		}
	}
	return nil
}

// Fill gives t the defaults for what it did not ask for (0), scaled by
// its GPUs for a GPU run (a fraction of one: that fraction of the per-GPU
// default) and kept within the bounds.
func (d ResourceDefaults) Fill(t *Task) {
	if t.CPUs == 0 {
		if t.UsesGPU() {
			t.CPUs = RoundCPUs(min(d.CPUsPerGPU*t.GPUCount(), MaxCPUs))
		} else {
			t.CPUs = d.CPUs
		}
	}
	if t.MemoryMB == 0 {
		if t.UsesGPU() {
			t.MemoryMB = min(int64(float64(d.MemoryMBPerGPU)*t.GPUCount()), MaxMemoryMB)
		} else {
			t.MemoryMB = d.MemoryMB
		}
	}
}

// CheckCPUs says what is wrong with a request of cpus cores.
func CheckCPUs(cpus float64) error {
	if math.IsNaN(cpus) || math.IsInf(cpus, 0) || cpus < MinCPUs || cpus > MaxCPUs {
		return fmt.Errorf("must be a number of cores from %g to %d (fractions allowed, e.g. 0.5)", MinCPUs, MaxCPUs)
	}
	return nil
}

// CheckMemoryMB says what is wrong with a request of mb MiB.
func CheckMemoryMB(mb int64) error {
	if mb < MinMemoryMB || mb > MaxMemoryMB {
		return fmt.Errorf("must be MiB from %d to %d (64 TiB)", MinMemoryMB, int64(MaxMemoryMB))
	}
	return nil
}

// RoundCPUs is cpus to the thousandth of a core the wire carries
// (ExecuteTask.cpu_millis).
func RoundCPUs(cpus float64) float64 { return float64(CPUMillis(cpus)) / 1000 }

// CPUMillis is cpus in thousandths of a core.
func CPUMillis(cpus float64) int64 { return int64(math.Round(cpus * 1000)) }

// UsageOf is what t used, as its worker measured (cpuSeconds, peakMB) and
// as the master computes its GPU-seconds: GPUs × the time from StartedAt
// to FinishedAt. Nil for a run that never started.
func UsageOf(t *Task, cpuSeconds float64, peakMB int64) *Usage {
	if t.StartedAt == nil || t.FinishedAt == nil {
		return nil
	}
	d := max(t.FinishedAt.Sub(*t.StartedAt).Seconds(), 0)
	return &Usage{CPUSeconds: max(cpuSeconds, 0), PeakMemoryMB: max(peakMB, 0), GPUSeconds: t.GPUCount() * d}
}

// OutOfMemoryError is the error of a run its memory limit killed.
func OutOfMemoryError(peakMB, limitMB int64) string {
	if limitMB <= 0 {
		return "out of memory: ask for more with --memory"
	}
	used := peakMB
	if used < limitMB {
		used = limitMB // the kernel kills at the limit; a peak read late may be lower
	}
	return fmt.Sprintf("out of memory: used %s of its %s limit; ask for more with --memory", FormatMB(used), FormatMB(limitMB))
}

// FormatMB writes mb MiB for a person: "512 MiB", "4 GiB", "4.1 GiB".
func FormatMB(mb int64) string {
	switch {
	case mb >= 1<<20:
		return trimUnit(float64(mb)/(1<<20), "TiB")
	case mb >= 1<<10:
		return trimUnit(float64(mb)/(1<<10), "GiB")
	}
	return fmt.Sprintf("%d MiB", mb)
}

func trimUnit(v float64, unit string) string {
	s := fmt.Sprintf("%.1f", v)
	if len(s) > 2 && s[len(s)-2:] == ".0" {
		s = s[:len(s)-2]
	}
	return s + " " + unit
}

// FormatCPUs writes cores without trailing zeros: "2", "0.5".
func FormatCPUs(cpus float64) string { return fmt.Sprintf("%g", RoundCPUs(cpus)) }

// UsageWeight is what one second of t adds to its owner's fair-share
// usage, in GPU-seconds: its GPUs (a fraction of one counts as that
// fraction: Task.GPUCount), or for a CPU-only run CPURunWeight per core it
// holds (a run from before cores were asked for counts as one).
func UsageWeight(gpus float64, cpus float64) float64 {
	if gpus > 0 {
		return gpus
	}
	if cpus > 0 {
		return CPURunWeight * cpus
	}
	return CPURunWeight
}
