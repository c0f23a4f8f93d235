package core

import (
	"bytes"
	"encoding/json"
	"maps"
	"math"
)

// EventSink receives run and worker changes for live views (/topic/tasks,
// /topic/workers): the live hub, and the cluster node that forwards them to
// the other masters. Implementations must not block.
type EventSink interface {
	TaskChanged(t Task)
	WorkerChanged(w WorkerInfo)
}

// View is t as clients see it, over REST and on /topic/tasks alike: arrays
// never null, env and params objects, no value JSON cannot encode. The
// fence never leaves the masters (its JSON tag is "-"): knowing a run's
// fence is half of what a worker needs to report for it.
func (t Task) View() Task {
	if t.Command == nil {
		t.Command = []string{}
	}
	if t.Tags == nil {
		t.Tags = []string{}
	}
	if t.GPUIndices == nil {
		t.GPUIndices = []int{}
	}
	if t.GPUUUIDs == nil {
		t.GPUUUIDs = []string{}
	}
	if t.Env == nil {
		t.Env = map[string]string{}
	}
	if t.Warnings == nil {
		t.Warnings = []Warning{}
	}
	t.History = t.HistoryView()
	if p := bytes.TrimSpace(t.Params); len(p) == 0 || bytes.Equal(p, []byte("null")) || !json.Valid(p) {
		t.Params = json.RawMessage("{}")
	}
	if t.FinalReward != nil && (math.IsNaN(*t.FinalReward) || math.IsInf(*t.FinalReward, 0)) {
		t.FinalReward = nil
	}
	return t
}

// MaskedValue replaces every env value of a run shown to a user who may not
// see it (EnvVisibleTo).
const MaskedValue = "***"

// MaskedEnv is t with every env value replaced by MaskedValue (the names
// stay): how a run looks to users other than its owner and the admins. t's
// own map is not changed.
func (t Task) MaskedEnv() Task {
	if len(t.Env) == 0 {
		return t
	}
	env := maps.Clone(t.Env)
	for k := range env {
		env[k] = MaskedValue
	}
	t.Env = env
	return t
}

// EnvVisibleTo reports whether u may see t's env values: u owns the run or
// is an admin.
func (t Task) EnvVisibleTo(u User) bool {
	return u.Role == RoleAdmin || (u.ID != 0 && u.ID == t.UserID)
}

// Who may read a run's outputs and resume from them (ARTIFACT_VISIBILITY,
// API.md "Who may read what").
const (
	OutputsAll   = "all"   // every signed-in user, unless the run is private
	OutputsOwner = "owner" // the owner and admins only
)

// OutputsVisibleTo reports whether u may read t's output files, and start
// a run from them (resumeFrom), under the server's visibility (OutputsAll
// or OutputsOwner): its owner and admins always; others only where the
// server shares outputs and t is not private.
func (t Task) OutputsVisibleTo(u User, visibility string) bool {
	return t.EnvVisibleTo(u) || (u.ID != 0 && visibility == OutputsAll && !t.Private)
}

// ViewFor is t as u sees it: its View, with the env values masked unless u
// owns the run or is an admin.
func (t Task) ViewFor(u User) Task {
	v := t.View()
	if !t.EnvVisibleTo(u) {
		v = v.MaskedEnv()
	}
	return v
}

// View is w as clients see it (GET /api/workers, /topic/workers): arrays
// never null.
func (w WorkerInfo) View() WorkerInfo {
	gpus := make([]GPU, len(w.GPUs)) // a copy: w's array may be shared
	copy(gpus, w.GPUs)
	for i := range gpus {
		if gpus[i].Foreign == nil {
			gpus[i].Foreign = []ForeignProc{}
		}
	}
	w.GPUs = gpus
	if w.RunningTasks == nil {
		w.RunningTasks = []string{}
	}
	return w
}

// ForUser is the view a reader who is no admin gets: who runs a foreign
// process, and its command line (which may carry the other user's
// secrets), left out; that a GPU is taken stays. The view is copied, w
// is not changed.
func (w WorkerInfo) ForUser() WorkerInfo {
	gpus := make([]GPU, len(w.GPUs))
	copy(gpus, w.GPUs)
	for i := range gpus {
		procs := make([]ForeignProc, len(gpus[i].Foreign))
		for j, p := range gpus[i].Foreign {
			procs[j] = ForeignProc{PID: p.PID, MemoryMB: p.MemoryMB}
		}
		gpus[i].Foreign = procs
	}
	w.GPUs = gpus
	return w
}

// QueueItem is a QUEUED run in GET /api/queue (openapi.json's QueueItem):
// where it stands in the order the scheduler serves the queue, and why it
// waits. The CLI decodes what httpapi encodes: one type for both.
type QueueItem struct {
	ID            string  `json:"id"`
	Name          string  `json:"name"`
	User          string  `json:"user"`
	GPUs          float64 `json:"gpus"` // whole GPUs or a fraction of one (Task.GPUCount)
	Priority      int     `json:"priority"`
	CreatedAt     string  `json:"createdAt"` // RFC 3339, UTC
	Position      int     `json:"position"`
	PendingCode   string  `json:"pendingCode"`
	PendingReason string  `json:"pendingReason"`
}

// UserUsage is a user's standing in GET /api/users/usage (openapi.json's
// UserUsage): fair-share usage in GPU-seconds, decayed; what they have
// active (DISPATCHED + RUNNING); the quota that applies to them.
type UserUsage struct {
	User        string  `json:"user"`
	Usage       float64 `json:"usage"`
	RunningGPUs int     `json:"runningGpus"`
	RunningRuns int     `json:"runningRuns"`
	Quota       Quota   `json:"quota"`
}
