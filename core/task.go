// Package core holds rlsched's domain types (tasks, users, workers, their
// states), id validation and typed errors. It does no I/O.
package core

import (
	"encoding/json"
	"slices"
	"strconv"
	"time"
)

// Status is a run's state. QUEUED → DISPATCHED → RUNNING → SUCCEEDED |
// FAILED | CANCELLED | TIMEOUT; LOST → QUEUED (attempt + 1) or FAILED. The
// moves allowed are the table in transition.go, made by the functions there.
type Status string

const (
	StatusQueued     Status = "QUEUED"
	StatusDispatched Status = "DISPATCHED"
	StatusRunning    Status = "RUNNING"
	StatusSucceeded  Status = "SUCCEEDED"
	StatusFailed     Status = "FAILED"
	StatusCancelled  Status = "CANCELLED"
	StatusTimeout    Status = "TIMEOUT"
	StatusLost       Status = "LOST"
)

// Terminal reports whether no further transition can leave s.
func (s Status) Terminal() bool {
	switch s {
	case StatusSucceeded, StatusFailed, StatusCancelled, StatusTimeout:
		return true
	}
	return false
}

// Active reports whether a run in state s holds (or is about to hold) a worker.
func (s Status) Active() bool { return s == StatusDispatched || s == StatusRunning }

// statuses is every status, in a run's life's order: waiting, placed,
// running, LOST (its lease lapsed: it waits again or fails), then the ends.
var statuses = [...]Status{StatusQueued, StatusDispatched, StatusRunning, StatusLost,
	StatusSucceeded, StatusFailed, StatusCancelled, StatusTimeout}

// Statuses returns every status in a run's life's order, a new slice each
// call: the columns of a sweep's CSV, the CLI's counts, the zeros of a count
// by status, the label values of the runs gauge.
func Statuses() []Status { return slices.Clone(statuses[:]) }

// Valid reports whether s is one of the known statuses.
func (s Status) Valid() bool { return slices.Contains(statuses[:], s) }

// Task is one training run. Its JSON form is API.md's Task.
type Task struct {
	ID         string          `json:"id"`
	Name       string          `json:"name"`
	Project    string          `json:"project"`
	User       string          `json:"user"`
	UserID     int64           `json:"userId"`
	Status     Status          `json:"status"`
	Attempt    int             `json:"attempt"`
	MaxRetries int             `json:"maxRetries"`
	Command    []string        `json:"command"`
	Params     json.RawMessage `json:"params"`
	// GPUs is the whole GPUs the run holds; a fractional run has 0 here
	// and its share of one GPU in GPUFraction (issue 28, gpushare.go). The
	// JSON's "gpus" is the two combined (0.25, or 2).
	GPUs       int               `json:"gpus"`
	Priority   int               `json:"priority"`
	Env        map[string]string `json:"env"`
	Tags       []string          `json:"tags"`
	Workdir    string            `json:"workdir"`
	Worker     string            `json:"worker"`
	GPUIndices []int             `json:"gpuIndices"`
	// GPUUUIDs are the UUIDs of GPUIndices on Worker, in that order ("" for
	// a GPU without one); the API fills them from the worker's GPU list
	// when answering (httpapi GPUNamer), nothing stores them.
	GPUUUIDs       []string   `json:"gpuUuids"`
	TraceID        string     `json:"traceId"`
	ExitCode       *int       `json:"exitCode"`
	Error          string     `json:"error"`
	FinalReward    *float64   `json:"finalReward"`
	Code           CodeInfo   `json:"code"`
	TimeoutSeconds int        `json:"timeoutSeconds"`
	CreatedAt      time.Time  `json:"createdAt"`
	StartedAt      *time.Time `json:"startedAt"`
	FinishedAt     *time.Time `json:"finishedAt"`
	UpdatedAt      time.Time  `json:"updatedAt"`
	// Fence is the fencing token of the lease that owns the current attempt
	// (0 while queued). Every state change is conditional on it. It is
	// internal to the masters (never in the JSON of a run; package cluster
	// carries it between masters in its own message).
	Fence uint64 `json:"-"`
	// QueuePosition (1 = next to run), PendingReason and PendingCode
	// explain a QUEUED run's wait; the API fills them when it answers,
	// nothing stores them.
	QueuePosition int    `json:"queuePosition,omitempty"`
	PendingReason string `json:"pendingReason,omitempty"`
	PendingCode   string `json:"pendingCode,omitempty"`
	// SweepID names the sweep the run is a member of ("" for none); a
	// member also carries the tag "sweep:<id>". RerunOf names the run this
	// one reruns (POST /api/tasks/{id}/rerun, a sweep's retry). Both are
	// fixed at creation.
	SweepID string `json:"sweepId,omitempty"`
	RerunOf string `json:"rerunOf,omitempty"`
	// ResumeFrom names the run whose outputs this run starts from (set at
	// submission; see Resumes). Empty for a run that starts fresh.
	ResumeFrom string `json:"resumeFrom,omitempty"`
	// Warnings are what its record says beyond its status, oldest first,
	// at most MaxWarnings (store.AddWarning appends; no update writes them).
	Warnings []Warning `json:"warnings"`
	// Preemptible runs may be stopped for a QUEUED run of higher priority
	// that fits nowhere else, PreemptGraceSeconds after SIGTERM (0: the
	// default, DefaultPreemptGrace); both fixed at submission. Preemptions
	// counts how often it was (each requeued it with attempt + 1, not
	// counted against MaxRetries); PreemptedAt is the last time.
	Preemptible         bool       `json:"preemptible"`
	PreemptGraceSeconds int        `json:"preemptGraceSeconds"`
	Preemptions         int        `json:"preemptions"`
	PreemptedAt         *time.Time `json:"preemptedAt"`
	// CPUs (cores, fractions allowed) and MemoryMB are the run's resources
	// (issue 26): what it asked for at submission, 0 for "the default",
	// and once placed what it got.
	CPUs     float64 `json:"cpus"`
	MemoryMB int64   `json:"memoryMb"`
	// Private limits the run's artifacts, and resuming from them, to its
	// owner and admins whatever ARTIFACT_VISIBILITY says (issue 25).
	// Kind is KindBatch or KindInteractive (issue 34). Both fixed at
	// submission.
	Private bool   `json:"private"`
	Kind    string `json:"kind"`
	// Reason is the machine-readable cause of the run's end beside Error
	// (API.md "Resources": out_of_memory, pids_limit, gpu_memory, disk, preempted, lost,
	// dependency, early_stopped, ...); "" when the exit code says it all.
	// Usage is what the ended run used; ErrorTail the last lines of its
	// stderr, bounded, when it failed.
	Reason    string `json:"reason"`
	Usage     *Usage `json:"usage"`
	ErrorTail string `json:"errorTail,omitempty"`
	// Note and Baseline are the run's record as its owner edits it after
	// submission (issue 30), as are Name and Tags; no fenced update writes
	// them, so an edit is never lost to a state change.
	Note     string `json:"note"`
	Baseline bool   `json:"baseline"`
	// Python is its Python environment (issue 27), fixed at submission;
	// nil: the python the worker finds on the run's PATH.
	Python *PythonEnv `json:"python"`
	// Image is the container image it runs in (issue 27, image.go), fixed
	// at submission; "": the worker's own file system. Only a worker with
	// a container runtime (Hello.runtimes) gets it.
	Image string `json:"image,omitempty"`
	// History is its state changes in order (history.go): the transitions
	// append to it and every update stores it whole; View adds what its
	// fields say when it lacks an entry.
	History []HistoryEntry `json:"history"`
	// GPUFraction (0 < f < 1, hundredths; 0: whole GPUs), GPUMemoryMB,
	// GPUType and Constraints say where the run may go (issue 28,
	// gpushare.go); all fixed at submission. GPUFraction is in the JSON
	// as "gpus" (MarshalJSON).
	GPUFraction float64           `json:"-"`
	GPUMemoryMB int64             `json:"gpuMemoryMb"`
	GPUType     []string          `json:"gpuType,omitempty"`
	Constraints map[string]string `json:"constraints,omitempty"`
	// After are the runs this one waits for (deps.go), InputsFrom the runs
	// whose outputs it starts with in RLSCHED_INPUT_DIR/<id>/; both fixed
	// at submission. Waiting is true while it is QUEUED and its conditions
	// are undecided: such a run is kept out of the planner's window (the
	// store's queue leaves it out) until released or cancelled.
	After      []Dep    `json:"after,omitempty"`
	InputsFrom []string `json:"inputsFrom,omitempty"`
	Waiting    bool     `json:"-"`
	// Nodes is how many workers the run spans at once (issue 29,
	// group.go): a group of Nodes members, GPUs (and cores, memory) on
	// each, placed all at once or not at all. 0 or 1: a run on one worker;
	// the JSON says Group().
	Nodes int `json:"nodes"`
}

// ReasonEarlyStopped is the Reason of a sweep's member stopped by its
// sweep's early stopping (API.md "Sweep search and early stopping"); its
// Error names the rung, the step and the cut.
const ReasonEarlyStopped = "early_stopped"

// QueueBefore is the queue's order (store.Store.QueuedTasks, the
// scheduler's page, the simulator's queue): priority, higher first, then
// oldest first, then id.
func QueueBefore(a, b *Task) bool {
	if a.Priority != b.Priority {
		return a.Priority > b.Priority
	}
	if !a.CreatedAt.Equal(b.CreatedAt) {
		return a.CreatedAt.Before(b.CreatedAt)
	}
	return a.ID < b.ID
}

// The kinds of run.
const (
	KindBatch       = "batch"
	KindInteractive = "interactive"
)

// RecordEnv is set to "0" in the env of an interactive run submitted with
// record: false: its worker keeps the terminal's output out of the run's
// log (a note line says so). Only the master sets it (ReservedEnv refuses
// it from users, as every RLSCHED_ name).
const RecordEnv = "RLSCHED_RECORD"

// PortEnv is the port on the worker's loopback where an interactive run
// submitted with a port serves its web app (a notebook), which the master
// proxies at SessionPath(id), given to the app as BaseURLEnv (issue 34).
// Only the master sets them, as RecordEnv.
const (
	PortEnv    = "RLSCHED_PORT"
	BaseURLEnv = "RLSCHED_BASE_URL"
)

// SessionPath is where the master serves the web app of interactive run
// id: every path under it goes to the app unchanged.
func SessionPath(id string) string { return "/sessions/" + id + "/" }

// SessionPort is the port of t's web app; 0: it has none.
func (t *Task) SessionPort() int {
	if t.Kind != KindInteractive {
		return 0
	}
	p, err := strconv.Atoi(t.Env[PortEnv])
	if err != nil || p < 1 || p > 65535 {
		return 0
	}
	return p
}

// Usage is what an ended run used (API.md "Resources").
type Usage struct {
	CPUSeconds   float64 `json:"cpuSeconds"`
	PeakMemoryMB int64   `json:"peakMemoryMb"`
	GPUSeconds   float64 `json:"gpuSeconds"`
}

// Limits of preemption (API.md "Scheduling policy").
const (
	DefaultPreemptGrace = 30 * time.Second
	MaxPreemptGrace     = 600 * time.Second
)

// PreemptGrace is how long t gets between SIGTERM and SIGKILL when
// preempted.
func (t Task) PreemptGrace() time.Duration {
	if t.PreemptGraceSeconds <= 0 {
		return DefaultPreemptGrace
	}
	return min(time.Duration(t.PreemptGraceSeconds)*time.Second, MaxPreemptGrace)
}

// QueueInfo explains why a QUEUED run waits: its place in the queue (1 =
// next to run), a sentence such as "needs 2 GPUs, the largest free block
// is 1", and that reason's code (API.md's pendingCode: "resources",
// "no_worker", "priority", ...; empty for a run about to start).
type QueueInfo struct {
	Position int
	Reason   string
	Code     string
}

// Role of a user.
type Role string

const (
	RoleUser  Role = "USER"
	RoleAdmin Role = "ADMIN"
)

// User is an account. PasswordHash is bcrypt and never leaves the server.
// TokenVersion is stamped into every token issued to the user; raising it
// (logout, a change of role, disabling, a new password) revokes every token
// issued before.
type User struct {
	ID           int64      `json:"id"`
	Username     string     `json:"username"`
	Role         Role       `json:"role"`
	PasswordHash string     `json:"-"`
	TokenVersion int64      `json:"-"`
	CreatedAt    time.Time  `json:"createdAt"`
	Disabled     bool       `json:"disabled"`
	LastLoginAt  *time.Time `json:"lastLoginAt"`
	// Deleted: the account is gone. Its row stays, renamed DeletedUsername,
	// so that its runs keep an owner.
	Deleted bool `json:"-"`
	// Notify is where the user hears about their runs' ends.
	Notify Notify `json:"-"`
}

// DeletedUsername is the name a deleted user's row (and so its runs'
// owner) takes: not a valid username, so no one can register or sign in
// under it, and the old name is free again.
func DeletedUsername(id int64) string { return "deleted user " + strconv.FormatInt(id, 10) }

// Notify is a user's notification settings: a webhook URL (empty: none)
// and the events it hears about, run statuses (SUCCEEDED, FAILED, ...) or
// warning codes (idle_gpu).
type Notify struct {
	Webhook string   `json:"webhook"`
	On      []string `json:"on"`
}

// MetricPoint is one value of one named series of a run.
type MetricPoint struct {
	Step  int64
	Name  string
	Value float64
	// Time is when the point was logged, Unix ms (the master's clock as it
	// read the line); 0: not known, and a point stored again without one
	// keeps the time it had.
	Time int64
}

// MetricResume is the series of where each attempt ≥ 2 resumed: a point at
// the attempt's first metric step, valued the attempt's number, recorded by
// the master as it reads the attempt's output from its start (logpipe), so
// the run page marks every resume however much of the log it reads.
const MetricResume = "rlsched/resume"
