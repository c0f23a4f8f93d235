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

// GPU of a worker, with the run holding it (empty when free).
type GPU struct {
	Index    int    `json:"index"`
	Name     string `json:"name"`
	MemoryMB int64  `json:"memoryMB"`
	TaskID   string `json:"taskId"`
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
	// Isolation is how the worker isolates runs: "uid" (each run under a
	// uid of its own) or "none" (runs share the worker's uid and can act
	// as it).
	Isolation string `json:"isolation"`
}
