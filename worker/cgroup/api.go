package cgroup

import (
	"fmt"
	"os"

	"github.com/rs/zerolog"
)

// RESOURCE_ENFORCEMENT: what the worker does when it cannot give runs
// groups of their own.
const (
	// Required refuses to start the worker, naming what is missing.
	Required = "required"
	// BestEffort runs unenforced and says so (Hello.enforcement_warning).
	BestEffort = "best-effort"
	// Off never creates groups.
	Off = "off"
)

// Hello.enforcement values.
const (
	KindV1   = "cgroup-v1"
	KindV2   = "cgroup-v2"
	KindNone = "none"
)

// TaskFinished.reason values.
const (
	ReasonOOM  = "out_of_memory"
	ReasonPids = "pids_limit"
)

// ResolveMode picks RESOURCE_ENFORCEMENT's default, Required for a worker
// run as root and BestEffort otherwise, and refuses an unknown value.
func ResolveMode(mode string) (string, error) {
	switch mode {
	case "":
		if os.Geteuid() == 0 {
			return Required, nil
		}
		return BestEffort, nil
	case Required, BestEffort, Off:
		return mode, nil
	}
	return "", fmt.Errorf("cannot start worker: RESOURCE_ENFORCEMENT=%q: want required, best-effort or off", mode)
}

// GPU is one GPU of the machine as its device node: /dev/nvidia<Minor>.
type GPU struct {
	Index int
	Minor int
}

// Options of a Manager.
type Options struct {
	// Mode is Required, BestEffort or Off (ResolveMode).
	Mode string
	// Name names the worker's parent group, "rlsched-<Name>": one per data
	// dir, so that a worker sweeps what a crashed predecessor of the same
	// dir left and never another live worker's runs.
	Name string
	// Cores are the cores runs may use (the worker's affinity less
	// RESERVED_CPUS), ascending.
	Cores []int
	// Self are the cores the worker itself may run on (its affinity at its
	// start); it keeps to those of them no run holds alone. nil: Cores.
	Self []int
	// MemoryMB caps every run together (the machine less
	// RESERVED_MEMORY_MB); 0: no cap of the parent.
	MemoryMB int64
	// GPUs of the machine: a run may open the device nodes of its own only.
	GPUs []GPU
	// PidsMax is each run's process (and thread) limit.
	PidsMax int64
	// Hierarchy: nil detects this process's (Detect); tests give a fake tree.
	Hierarchy *Hierarchy
	Log       zerolog.Logger
}

// Limits of one run.
type Limits struct {
	// CPUMillis is its CPU quota in thousandths of a core; 0: none. A whole
	// number of cores also gets them exclusively (cpuset) where free.
	CPUMillis int64
	// MemoryMB is its memory limit (and no swap past it); 0: none.
	MemoryMB int64
	// GPUs are the indices of the run's GPUs.
	GPUs []int
	// Near are the cores near its GPUs (nvidia-smi topo -m), preferred for
	// exclusive cores.
	Near []int
}

// Usage is what a run's group counted, read after its processes are gone.
type Usage struct {
	CPUSeconds   float64
	PeakMemoryMB int64 // -1 when the kernel does not count it
	// OOMKills counts the processes the kernel killed for the group's
	// memory limit; PidsRefused the forks its process limit refused.
	OOMKills    int64
	PidsRefused int64
	// Limits as set, for the verdict's sentence.
	MemoryLimitMB int64
	PidsMax       int64
}

// Now is what a run's group holds at one moment (Group.Now), for its
// series sys/cpu_cores and sys/memory_mb.
type Now struct {
	// CPUNanos is its CPU time so far; MemoryBytes the memory it holds
	// (page cache included, as the kernel charges it). -1: not counted.
	CPUNanos    int64
	MemoryBytes int64
}

// Reason is TaskFinished.reason for a run that failed with usage u: the
// kernel's out-of-memory kill first (it explains a SIGKILL), then the
// process limit.
func (u Usage) Reason() string {
	switch {
	case u.OOMKills > 0:
		return ReasonOOM
	case u.PidsRefused > 0:
		return ReasonPids
	}
	return ""
}

// Message is the sentence for the run's error and its log's last line;
// "" when Reason is "".
func (u Usage) Message() string {
	switch u.Reason() {
	case ReasonOOM:
		if u.PeakMemoryMB > 0 {
			return fmt.Sprintf("out of memory: used %s of its %s limit; ask for more with --memory", mib(u.PeakMemoryMB), mib(u.MemoryLimitMB))
		}
		return fmt.Sprintf("out of memory: killed at its %s limit; ask for more with --memory", mib(u.MemoryLimitMB))
	case ReasonPids:
		return fmt.Sprintf("process limit: the run reached its limit of %d processes and threads, and a fork failed", u.PidsMax)
	}
	return ""
}

// mib writes n MiB as a person reads it: 512 MiB, 4 GiB, 4.1 GiB.
func mib(n int64) string {
	if n < 1024 {
		return fmt.Sprintf("%d MiB", n)
	}
	g := float64(n) / 1024
	if n%1024 == 0 {
		return fmt.Sprintf("%.0f GiB", g)
	}
	return fmt.Sprintf("%.1f GiB", g)
}
