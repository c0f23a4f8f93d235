package dispatch

import (
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/rlsched/rlsched/core"
	"github.com/rlsched/rlsched/dispatch/plan"
)

// registry is the master's view of its workers and the runs placed on them.
// One mutex guards it; methods ending in Locked expect it held.
type registry struct {
	mu      sync.Mutex
	workers map[string]*workerRec
	runs    map[string]*runRec   // by task id
	cancels map[string]time.Time // runs whose cancel was requested, by task id
	// ended: runs whose end this master recorded lately, by task id, so a
	// heartbeat the worker sent before it saw the TaskFinishedAck does not
	// get them reported lost. Pruned by endedLocked.
	ended map[string]time.Time
}

// endedKeep is how long a recorded end is remembered: longer than a
// heartbeat in flight, short enough to stay small.
const endedKeep = time.Minute

// endedLocked remembers that id's end was recorded, forgetting ends
// older than endedKeep when the map has grown.
func (r *registry) endedLocked(id string, now time.Time) {
	if len(r.ended) >= 1024 {
		for k, t := range r.ended {
			if now.Sub(t) > endedKeep {
				delete(r.ended, k)
			}
		}
	}
	r.ended[id] = now
}

type workerRec struct {
	id, host, version string
	gpus              []core.GPU
	slots             int
	sess              *session // nil while disconnected
	runs              map[string]*runRec
	lastHeartbeat     time.Time
	lastSeen          time.Time
}

// runRec is a run placed on a worker: its GPUs or CPU slot are taken until
// the run is removed.
type runRec struct {
	taskID   string
	attempt  int
	fence    uint64 // 0 while the claim is in flight
	traceID  string
	workerID string
	gpus     []int // indices; empty for a CPU-slot run
	started  bool
	// view is the run as this master last wrote it while holding the run
	// on its current session (nil: unknown, read it). It lets a fenced
	// update skip reading the run first; see updateTask.
	view *core.Task
	// starting is closed when the run's TaskStarted has been recorded;
	// nil when none is in flight (see startPending).
	starting chan struct{}
}

func (r *registry) init() {
	r.workers = map[string]*workerRec{}
	r.runs = map[string]*runRec{}
	r.cancels = map[string]time.Time{}
	r.ended = map[string]time.Time{}
}

func (r *registry) workerLocked(id string) *workerRec {
	w := r.workers[id]
	if w == nil {
		w = &workerRec{id: id, runs: map[string]*runRec{}}
		r.workers[id] = w
	}
	return w
}

func (r *registry) addRunLocked(rr *runRec) {
	r.runs[rr.taskID] = rr
	r.workerLocked(rr.workerID).runs[rr.taskID] = rr
}

func (r *registry) removeRunLocked(taskID string) *runRec {
	rr := r.runs[taskID]
	if rr == nil {
		return nil
	}
	delete(r.runs, taskID)
	if w := r.workers[rr.workerID]; w != nil {
		delete(w.runs, taskID)
	}
	delete(r.cancels, taskID)
	return rr
}

// freeLocked is w's free resources, as the planner sees them. It allocates
// only the free GPU list: the scheduler builds one for every connected
// worker on each pass.
func (w *workerRec) freeLocked() plan.Worker {
	var usedBuf [16]int
	used := usedBuf[:0]
	cpuRuns := 0
	for _, rr := range w.runs {
		if len(rr.gpus) == 0 {
			cpuRuns++
		}
		used = append(used, rr.gpus...)
	}
	c := plan.Worker{ID: w.id, FreeSlots: w.slots - cpuRuns}
	for _, g := range w.gpus {
		if !slices.Contains(used, g.Index) {
			c.FreeGPUs = append(c.FreeGPUs, g.Index)
		}
	}
	return c
}

// hasFreeLocked reports whether w is connected with anything free, without
// building its capacity.
func (w *workerRec) hasFreeLocked() bool {
	if w.sess == nil || w.sess.closed.Load() {
		return false
	}
	cpuRuns, gpuRuns := 0, 0
	for _, rr := range w.runs {
		if len(rr.gpus) == 0 {
			cpuRuns++
		}
		gpuRuns += len(rr.gpus)
	}
	return cpuRuns < w.slots || gpuRuns < len(w.gpus)
}

// anyFree reports whether some connected worker has anything free; it
// stops at the first, so it is cheap whenever placement is possible.
func (r *registry) anyFree() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, w := range r.workers {
		if w.hasFreeLocked() {
			return true
		}
	}
	return false
}

// snapshot is the planner's view of the registry for queue: the connected
// workers with anything free (sorted by id, so placement is deterministic),
// the size of the largest, and which runs of queue are already placed.
func (r *registry) snapshot(queue []core.Task) plan.Snapshot {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := plan.Snapshot{Free: make([]plan.Worker, 0, len(r.workers))}
	for _, w := range r.workers {
		if w.sess == nil || w.sess.closed.Load() {
			continue
		}
		s.Connected++
		s.MaxGPUs, s.MaxSlots = max(s.MaxGPUs, len(w.gpus)), max(s.MaxSlots, w.slots)
		if c := w.freeLocked(); len(c.FreeGPUs) > 0 || c.FreeSlots > 0 {
			s.Free = append(s.Free, c)
		}
	}
	slices.SortFunc(s.Free, func(a, b plan.Worker) int { return strings.Compare(a.ID, b.ID) })
	s.InFlight = r.inFlightLocked(queue)
	return s
}

// inFlight lists the runs of queue that are placed here already (the store
// has them QUEUED until the placement is recorded): task id → worker.
func (r *registry) inFlight(queue []core.Task) map[string]string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.inFlightLocked(queue)
}

func (r *registry) inFlightLocked(queue []core.Task) map[string]string {
	var out map[string]string
	for i := range queue {
		if rr := r.runs[queue[i].ID]; rr != nil {
			if out == nil {
				out = map[string]string{}
			}
			out[rr.taskID] = rr.workerID
		}
	}
	return out
}

func (w *workerRec) stateLocked() core.WorkerState {
	connected := w.sess != nil && !w.sess.closed.Load()
	switch {
	case connected && len(w.runs) > 0:
		return core.WorkerRunning
	case connected:
		return core.WorkerIdle
	case len(w.runs) > 0:
		return core.WorkerPending
	}
	return core.WorkerDown
}

func (w *workerRec) infoLocked(master string) core.WorkerInfo {
	gpus := make([]core.GPU, len(w.gpus))
	copy(gpus, w.gpus)
	holder := map[int]string{}
	running := []string{}
	for id, rr := range w.runs {
		running = append(running, id)
		for _, g := range rr.gpus {
			holder[g] = id
		}
	}
	slices.Sort(running)
	for i := range gpus {
		gpus[i].TaskID = holder[gpus[i].Index]
	}
	return core.WorkerInfo{ID: w.id, Host: w.host, State: w.stateLocked(), GPUs: gpus, Slots: w.slots,
		RunningTasks: running, LastHeartbeatAt: w.lastHeartbeat, Master: master, Version: w.version}
}

// workerChanged reports a worker's new view to Config.OnWorker.
func (m *Master) workerChanged(id string) {
	if m.cfg.OnWorker == nil {
		return
	}
	m.reg.mu.Lock()
	w := m.reg.workers[id]
	var info core.WorkerInfo
	if w != nil {
		info = w.infoLocked(m.cfg.MasterID)
	}
	m.reg.mu.Unlock()
	if w != nil {
		m.cfg.OnWorker(info)
	}
}

// Workers lists every known worker, sorted by id.
func (m *Master) Workers() []core.WorkerInfo {
	m.reg.mu.Lock()
	defer m.reg.mu.Unlock()
	out := make([]core.WorkerInfo, 0, len(m.reg.workers))
	for _, w := range m.reg.workers {
		out = append(out, w.infoLocked(m.cfg.MasterID))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}
