package core

import "time"

// WorkerState as in DESIGN.md: IDLE and RUNNING have a live heartbeat;
// PENDING lost it but still holds run leases; DOWN has neither. DRAINING
// is connected and takes no new runs (an admin drained it); its runs go on.
type WorkerState string

const (
	WorkerIdle     WorkerState = "IDLE"
	WorkerRunning  WorkerState = "RUNNING"
	WorkerPending  WorkerState = "PENDING"
	WorkerDown     WorkerState = "DOWN"
	WorkerDraining WorkerState = "DRAINING"
)

// WarnWorkerSilent is the warning a run gets when its worker lost its
// session while holding it: the worker may be dead, or on its way back.
const WarnWorkerSilent = "worker_silent"

// GPU of a worker, with the run holding it (empty when free).
type GPU struct {
	Index    int    `json:"index"`
	Name     string `json:"name"`
	MemoryMB int64  `json:"memoryMB"`
	TaskID   string `json:"taskId"`
	// UUID is nvidia-smi's GPU-…; "" for a GPU given by --gpus N.
	UUID string `json:"uuid"`
	// CPUAffinity is the cores near it (nvidia-smi topo -m, a cpuset list
	// such as "0-15"); "" when unknown.
	CPUAffinity string `json:"cpuAffinity,omitempty"`
	// Utilization (percent) and MemoryUsedMB are from the worker's last
	// sample; null when it did not report them (no sample yet, nvidia-smi
	// failing, [N/A]).
	Utilization  *int   `json:"utilization"`
	MemoryUsedMB *int64 `json:"memoryUsedMB"`
	// Foreign lists the processes on it that no run of the worker started
	// (API.md "GPUs"); User and Command only for admins (View).
	Foreign []ForeignProc `json:"foreign"`
	// IdleSince is when the run holding it started an idle stretch (all its
	// GPUs under IDLE_GPU_UTIL); absent while it is busy.
	IdleSince *time.Time `json:"idleSince,omitempty"`
	// Shares are the fractional runs sharing it (issue 28; TaskID is then
	// ""), by task id; absent when none.
	Shares []GPUShare `json:"shares,omitempty"`
}

// GPUShare is a fractional run's share of a GPU: the run, its fraction
// and the MiB of the GPU's memory it was given (0: not known); the names
// are contract.md's.
type GPUShare struct {
	TaskID   string  `json:"run"`
	Fraction float64 `json:"fraction"`
	MemoryMB int64   `json:"memoryMb"`
}

// ForeignProc is a compute process on a worker's GPU that no run of the
// worker started. User and Command are "" when the worker could not read
// them (another pid namespace) or the reader is no admin; MemoryMB is
// null when not reported.
type ForeignProc struct {
	PID      int    `json:"pid"`
	User     string `json:"user"`
	Command  string `json:"command"`
	MemoryMB *int64 `json:"memoryMB"`
}

// WorkerInfo is API.md's Worker.
type WorkerInfo struct {
	ID              string      `json:"id"`
	Host            string      `json:"host"`
	State           WorkerState `json:"state"`
	GPUs            []GPU       `json:"gpus"`
	Slots           int         `json:"slots"`
	RunningTasks    []string    `json:"runningTasks"`
	LastHeartbeatAt time.Time   `json:"lastHeartbeatAt"`
	Master          string      `json:"master"`
	Version         string      `json:"version"`
	// Isolation is how the worker isolates runs: IsolationUID,
	// IsolationUser or IsolationNone (Hello.isolation).
	Isolation string `json:"isolation"`
	// GPUProblem says why its GPU samples are incomplete (nvidia-smi
	// missing, failing, hung), as its worker last reported; "" when fine.
	GPUProblem string `json:"gpuProblem,omitempty"`
	// CPUs and MemoryMB are what it offers runs (its machine less what it
	// reserves), 0 when it does not say (no limit is placed on it);
	// CPUsUsed and MemoryMBUsed what its runs hold of them. Enforcement is
	// how runs are held to their limits (EnforcementCgroupV1, ...V2, or
	// EnforcementNone), with EnforcementWarning saying why not when none.
	CPUs               float64 `json:"cpus"`
	MemoryMB           int64   `json:"memoryMb"`
	CPUsUsed           float64 `json:"cpusUsed"`
	MemoryMBUsed       int64   `json:"memoryMbUsed"`
	Enforcement        string  `json:"enforcement"`
	EnforcementWarning string  `json:"enforcementWarning,omitempty"`
	// Labels are its labels (--label k=v and the automatic gpu.type,
	// gpu.count, cpu.count, hostname: issue 28), which a run's
	// constraints match; absent when it sends none.
	Labels map[string]string `json:"labels,omitempty"`
	// Runtimes are its container runtimes ("podman"), which runs with an
	// image need (issue 27); none: it runs no image.
	Runtimes []string `json:"runtimes,omitempty"`
}

// How a worker enforces its runs' limits (WorkerInfo.Enforcement, Hello's
// enforcement).
const (
	EnforcementCgroupV1 = "cgroup-v1"
	EnforcementCgroupV2 = "cgroup-v2"
	EnforcementNone     = "none"
)

// How a worker isolates runs (Worker.Isolation, Hello.isolation).
const (
	IsolationUID = "uid" // each run under a uid of its own (RUN_AS=dynamic)
	// IsolationUser: each run as the Unix account named like its rlsched
	// user (RUN_AS=user). A master with open registration refuses such a
	// worker: anyone could register an account's name and run as it.
	IsolationUser = "user"
	IsolationNone = "none" // runs share the worker's uid and can act as it
)
