package dispatch

import (
	"fmt"
	"maps"
	"net"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rlsched/rlsched/codec/pb"
	"github.com/rlsched/rlsched/core"
	"github.com/rlsched/rlsched/dispatch/plan"
)

// registry is the master's view of its workers and the runs placed on them.
// It owns its maps and its mutex: nothing outside this file touches them,
// and every method takes the mutex itself (those ending in Locked expect it
// held). No method does I/O or blocks while holding it.
//
// The event loops never take the mutex: the reports they check per frame
// (LogData, TaskStarted) look the run up in their session's own table of
// its worker's runs (session.run), which the registry republishes, copied,
// whenever a run is added to or removed from that worker.
type registry struct {
	mu      sync.Mutex
	workers map[string]*workerRec
	runs    map[string]*runRec  // by task id
	cancels map[string]struct{} // runs whose cancel was requested, by task id
	// cancelWhy is why a run cancelled by the master itself (an idle GPU,
	// its sweep's early stopping) ends, instead of "cancelled"; by task id.
	cancelWhy map[string]cancelCause
	ended     endedRuns
}

type workerRec struct {
	id, host, version, isolation string
	gpus                         []core.GPU
	slots                        int
	// cpuMillis and memoryMB are what it offers runs (Hello; 0: not
	// reported, unlimited); enforcement and enforcementWarning how it
	// holds runs to them.
	cpuMillis, memoryMB             int64
	enforcement, enforcementWarning string
	// labels are its labels (Hello.labels, constraints match them); like
	// gpus, replaced whole at each Hello, never written into: the
	// planner's snapshots share them.
	labels map[string]string
	// runtimes are its container runtimes (Hello.runtimes): runs with an
	// image go only where there is one (issue 27).
	runtimes      []string
	sess          *session // nil while disconnected
	runs          map[string]*runRec
	lastHeartbeat time.Time // of the last session; the live one keeps its own
	// lastHeard is when the last session's last frame came (session.lastSeen).
	lastHeard time.Time
	// silentTold: its runs have the worker_silent warning for this
	// absence (silent.go); a join clears it.
	silentTold bool
	// draining: an admin drained it; it takes no new runs (also after a
	// reconnect) until undrained or forgotten.
	draining bool
	// addr is where a multi-node group's other members reach it
	// (Hello.addr, else the connection's remote address).
	addr string
}

// runRec is a run placed on a worker: its GPUs or CPU slot are taken until
// the run is removed. taskID, attempt, traceID, workerID and gpus never
// change; the rest is safe to read without the registry's mutex.
type runRec struct {
	taskID   string
	attempt  int
	traceID  string
	workerID string
	gpus     []int // indices; empty for a CPU-slot run
	// cpuMillis and memoryMB are the cores (thousandths) and MiB it holds.
	cpuMillis, memoryMB int64
	// share is a fractional run's hundredths of its one GPU (0: whole
	// GPUs), shareMB the MiB of that GPU's memory it was given.
	share   int
	shareMB int64
	// userID is the run's owner (0 when not known: a run adopted from a
	// worker's Hello), for the standing (standingMoved).
	userID int64
	// fence is set once the claim returned it; 0 while it is in flight.
	fence atomic.Uint64
	// view is the run as this master last wrote it while holding the run
	// (nil: unknown, read it); see view.go.
	view atomic.Pointer[core.Task]
	// starting is closed when the run's TaskStarted has been recorded; nil
	// when none is in flight (see Dispatcher.startPending).
	starting atomic.Pointer[startGate]
	// restore is the files this attempt may be sent, by path (artifacts.go);
	// nil until listed.
	restore atomic.Pointer[map[string]core.Artifact]
	// preempt, when set, is the run this one is being stopped for
	// (preempt.go): its end is recorded as a preemption.
	preempt atomic.Pointer[preemptFor]
	// pol is what preemption needs of the run, fixed when this master
	// placed it (nil for a run it adopted: never preempted).
	pol *runPolicy
	// group is the multi-node group this is a member of, rank its rank
	// (group.go); nil for a run on one worker. Rank 0 is the run's entry
	// in registry.runs; every member is in its own worker's runs.
	group *groupRun
	rank  int
	// memberDone: the group counted this member as ended (group.go).
	memberDone atomic.Bool
	// exited: its worker reported every process of the run gone
	// (TaskExited, or RunRef.finished in a Hello) while its outputs are
	// still stored: its GPUs, slot, cores and memory count as free for
	// placement, though it keeps its lease and its place here until its
	// TaskFinished is recorded (issue 33). Set under registry.mu.
	exited atomic.Bool
	// orphan: a multi-node group's run adopted from the store (another
	// master's, or this one's before a restart): its other members are
	// not known here, so the attempt is lost when its worker reports it.
	orphan bool
	// sess is the session that may report the run: the one its
	// ExecuteTask went to (sent), or the one that adopted it with its
	// run token (join). Guarded by registry.mu. Another session of the
	// same worker id does not see the run (publishLocked).
	sess *session
}

// holds: rr's run holds its GPUs, slot, cores and memory; false once its
// worker reported its processes gone (exited).
func (rr *runRec) holds() bool { return !rr.exited.Load() }

// reports is the one fence check: whether a report about rr's run (a
// TaskStarted, LogData, TaskFinished, a heartbeat's or a Hello's entry)
// from workerID for attempt under fence comes from the run's current
// holder. Fence 0 is never handed out, so it never matches (not even a
// claim still in flight). A nil rr never matches.
func (rr *runRec) reports(workerID string, attempt int32, fence uint64) bool {
	return rr != nil && fence != 0 && rr.workerID == workerID && rr.attempt == int(attempt) && rr.fence.Load() == fence
}

func (r *registry) init() {
	r.workers = map[string]*workerRec{}
	r.runs = map[string]*runRec{}
	r.cancels = map[string]struct{}{}
	r.cancelWhy = map[string]cancelCause{}
	r.ended.at = map[string]time.Time{}
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
	w := r.workerLocked(rr.workerID)
	w.runs[rr.taskID] = rr
	w.publishLocked()
}

// removeLocked removes rr if it is still the run registered under its id,
// and with a group's rank 0 every member still placed.
func (r *registry) removeLocked(rr *runRec) bool {
	if r.runs[rr.taskID] != rr {
		return false
	}
	delete(r.runs, rr.taskID)
	r.dropMemberLocked(rr)
	if g := rr.group; g != nil {
		for _, m := range g.members[1:] {
			r.dropMemberLocked(m)
		}
	}
	delete(r.cancels, rr.taskID)
	delete(r.cancelWhy, rr.taskID)
	return true
}

// dropMemberLocked takes rr off its worker's runs, if it is still there.
func (r *registry) dropMemberLocked(rr *runRec) {
	if w := r.workers[rr.workerID]; w != nil && w.runs[rr.taskID] == rr {
		delete(w.runs, rr.taskID)
		w.publishLocked()
	}
}

// publishLocked gives w's session a fresh copy of w's runs (session.run).
func (w *workerRec) publishLocked() {
	if w.sess == nil {
		return
	}
	runs := make(map[string]*runRec, len(w.runs))
	for id, rr := range w.runs {
		if rr.sess == w.sess {
			runs[id] = rr
		}
	}
	w.sess.runs.Store(&runs)
}

func (w *workerRec) connectedLocked() bool { return w.sess != nil && !w.sess.closed.Load() }

// endedRuns remembers the runs whose end this master recorded lately, so a
// heartbeat the worker sent before it saw the TaskFinishedAck does not get
// them reported lost. Entries are kept in the order they were added, so
// forgetting the old ones looks only at the oldest.
type endedRuns struct {
	at    map[string]time.Time
	order []endedRun // oldest first, from head
	head  int
}

type endedRun struct {
	id string
	at time.Time
}

// endedKeep is how long a recorded end is remembered: longer than a
// heartbeat in flight, short enough to stay small.
const endedKeep = time.Minute

func (e *endedRuns) add(id string, now time.Time) {
	for e.head < len(e.order) && now.Sub(e.order[e.head].at) > endedKeep {
		old := e.order[e.head]
		if e.at[old.id].Equal(old.at) { // not re-added since
			delete(e.at, old.id)
		}
		e.order[e.head] = endedRun{}
		e.head++
	}
	if e.head > len(e.order)/2 { // reuse the array: amortised O(1) per add
		n := copy(e.order, e.order[e.head:])
		clear(e.order[n:])
		e.order, e.head = e.order[:n], 0
	}
	e.at[id] = now
	e.order = append(e.order, endedRun{id: id, at: now})
}

func (e *endedRuns) has(id string) bool { _, ok := e.at[id]; return ok }

// place registers rr on its worker for a claim; false when the worker is
// not connected or the run is placed already.
func (r *registry) place(rr *runRec) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	w := r.workers[rr.workerID]
	if w == nil || w.sess == nil || r.runs[rr.taskID] != nil {
		return false
	}
	r.addRunLocked(rr)
	return true
}

// placeGroup registers a group's members (rank order, members[0] the
// run's entry) on their workers for a claim, all or none: false when a
// worker is not connected, holds the run already, or the run is placed.
func (r *registry) placeGroup(members []*runRec) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.runs[members[0].taskID] != nil {
		return false
	}
	for _, m := range members {
		w := r.workers[m.workerID]
		if w == nil || w.sess == nil || w.runs[m.taskID] != nil {
			return false
		}
	}
	r.addRunLocked(members[0])
	for _, m := range members[1:] {
		w := r.workers[m.workerID]
		w.runs[m.taskID] = m
		w.publishLocked()
	}
	return true
}

// dropMember frees a group's member that ended before its group (rank >
// 0: rank 0 holds the run until the group's end is recorded).
func (r *registry) dropMember(rr *runRec) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if rr.rank > 0 {
		r.dropMemberLocked(rr)
	}
}

// addrs are where the members' workers are reached, in rank order
// (RLSCHED_HOSTS).
func (r *registry) addrs(members []*runRec) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]string, len(members))
	for i, m := range members {
		if w := r.workers[m.workerID]; w != nil {
			out[i] = w.addr
		}
	}
	return out
}

// groupMembersOn lists the members of groups placed on worker id that
// their group has not counted as ended.
func (r *registry) groupMembersOn(id string) []*runRec {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []*runRec
	if w := r.workers[id]; w != nil {
		for _, rr := range w.runs {
			if rr.group != nil && !rr.memberDone.Load() {
				out = append(out, rr)
			}
		}
	}
	return out
}

// adopt registers rr unless its run is known already (a run recovered
// from the store, or taken over from another master).
func (r *registry) adopt(rr *runRec) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.runs[rr.taskID] == nil {
		r.addRunLocked(rr)
	}
}

// remove forgets rr (a placement that did not happen, a run another master
// moved on) if it is still registered.
func (r *registry) remove(rr *runRec) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.removeLocked(rr)
}

// end removes rr, whose end was recorded at now, and remembers the end.
func (r *registry) end(rr *runRec, now time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.removeLocked(rr) {
		r.ended.add(rr.taskID, now)
	}
}

// expired removes the run whose lease (taskID, fence) expired, if it is
// still the one registered.
func (r *registry) expired(taskID string, fence uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if rr := r.runs[taskID]; rr != nil && rr.fence.Load() == fence {
		r.removeLocked(rr)
	}
}

// sent records the fence of a claimed run, now recorded in the store, and
// returns its worker's session (nil: disconnected meanwhile) and whether
// its cancel was requested.
func (r *registry) sent(rr *runRec, fence uint64) (*session, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	rr.fence.Store(fence)
	if g := rr.group; g != nil {
		for _, m := range g.members {
			m.fence.Store(fence)
		}
	}
	_, cancel := r.cancels[rr.taskID]
	if w := r.workers[rr.workerID]; w != nil {
		r.bindLocked(rr, w)
		return w.sess, cancel
	}
	return nil, cancel
}

// run is the run registered under id, or nil.
func (r *registry) run(id string) *runRec {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.runs[id]
}

// heldLive reports whether the run id under fence is placed here on a
// worker whose session is connected: that session reports it (reconcile).
func (r *registry) heldLive(id string, fence uint64) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	rr := r.runs[id]
	if rr == nil || rr.fence.Load() != fence {
		return false
	}
	w := r.workers[rr.workerID]
	return w != nil && w.connectedLocked()
}

// reported returns the run a report from sess's worker is about, or nil
// when the report is stale (runRec.reports).
func (r *registry) reported(sess *session, taskID string, attempt int32, fence uint64) *runRec {
	r.mu.Lock()
	defer r.mu.Unlock()
	w := r.workers[sess.workerID]
	if w == nil {
		return nil
	}
	// The worker's own entry: a group's member on it is not the run's
	// entry in r.runs (rank 0's).
	if rr := w.runs[taskID]; rr.reports(sess.workerID, attempt, fence) && rr.sess == sess {
		return rr
	}
	return nil
}

// exited marks the run a TaskExited from sess's worker is about as
// holding nothing (runRec.exited), and reports whether it did: false for a
// stale report, a multi-node group's member (its group frees its members
// at its end), or a run marked already.
func (r *registry) exited(sess *session, m *pb.TaskExited) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	w := r.workers[sess.workerID]
	if w == nil {
		return false
	}
	rr := w.runs[m.TaskId]
	if !rr.reports(sess.workerID, m.Attempt, m.Fence) || rr.sess != sess || rr.group != nil {
		return false
	}
	return !rr.exited.Swap(true)
}

// endedLately reports which of ids had their end recorded lately.
func (r *registry) endedLately(ids []string) map[string]bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out map[string]bool
	for _, id := range ids {
		if r.runs[id] == nil && r.ended.has(id) {
			if out == nil {
				out = map[string]bool{}
			}
			out[id] = true
		}
	}
	return out
}

// joined is what join decided about a Hello.
type joined struct {
	refused string   // non-empty: the Hello is refused for this reason
	old     *session // the session this one replaces, to close
	adopt   []*runRec
	gone    []*runRec // placed on the worker, not listed: lost
	// groupLost are the members of groups on the worker that its last
	// session left running: lost (group.go).
	groupLost []*runRec
	kill      []string // listed, not the worker's to run
	why       []string // for the log: a line per refused entry of Hello.runs
}

// join registers sess as its worker's session and reconciles the runs its
// Hello lists with the runs placed on the worker. A second worker under a
// live worker's id (another instance token) is refused; the same instance
// (a reconnect) replaces the old session. Of a run listed twice, the entry
// that is the placed run counts (else the first). A listed run placed on
// another worker (foreign: its worker per store or registry) is never
// adopted.
func (r *registry) join(sess *session, h *pb.Hello, foreign map[string]string, now time.Time) joined {
	r.mu.Lock()
	defer r.mu.Unlock()
	w := r.workerLocked(h.WorkerId)
	var j joined
	if old := w.sess; old != nil && old != sess && old.instance != "" && sess.instance != "" &&
		old.instance != sess.instance && !old.closed.Load() {
		j.refused = fmt.Sprintf("worker id %s is already connected from %s; give each worker its own --id", h.WorkerId, old.remote)
		return j
	}
	if old := w.sess; old != nil && old != sess {
		j.old = old
		old.closed.Store(true)
	}
	w.sess, w.host, w.version, w.slots, w.isolation = sess, h.Host, h.Version, int(h.Slots), h.Isolation
	w.addr = h.Addr
	if w.addr == "" {
		w.addr = remoteHost(sess.remote)
	}
	w.cpuMillis, w.memoryMB = max(h.CpuMillis, 0), max(h.MemoryMb, 0)
	w.enforcement, w.enforcementWarning = h.Enforcement, h.EnforcementWarning
	w.gpus = make([]core.GPU, 0, len(h.Gpus)) // a new array: snapshots share the old one
	w.labels = maps.Clone(h.Labels)
	w.runtimes = slices.Clone(h.Runtimes)
	for _, g := range h.Gpus {
		w.gpus = append(w.gpus, core.GPU{Index: int(g.Index), Name: g.Name, MemoryMB: g.MemoryMb, UUID: g.Uuid, CPUAffinity: g.CpuAffinity})
	}
	w.silentTold = false
	sess.lastHeartbeat.Store(now.UnixNano())
	// Count silence from the HelloAck, not from when the event loop read the
	// Hello: under load the shard may get to it much later.
	sess.lastSeen.Store(now.UnixNano())

	listed := make(map[string]*pb.RunRef, len(h.Runs))
	for _, ref := range h.Runs {
		prev, dup := listed[ref.TaskId]
		if !dup {
			listed[ref.TaskId] = ref
			continue
		}
		rr := r.runs[ref.TaskId]
		if rr.reports(h.WorkerId, ref.Attempt, ref.Fence) && !rr.reports(h.WorkerId, prev.Attempt, prev.Fence) {
			listed[ref.TaskId] = ref
		}
		j.why = append(j.why, fmt.Sprintf("%s is listed twice; one entry is ignored", ref.TaskId))
	}
	for _, ref := range h.Runs {
		if listed[ref.TaskId] != ref {
			continue // a duplicate, or the entry of a run already decided
		}
		delete(listed, ref.TaskId)
		rr := w.runs[ref.TaskId] // this worker's: a group's member is not the run's entry
		if rr == nil {
			rr = r.runs[ref.TaskId]
		}
		switch {
		case rr.reports(h.WorkerId, ref.Attempt, ref.Fence) && rr.group != nil:
			// A group's member does not outlive its worker's session: its
			// group ends the attempt (groupLost, below) and it is killed.
			j.why = append(j.why, fmt.Sprintf("%s is rank %d of a multi-node group whose attempt ended when this worker left", ref.TaskId, rr.rank))
		case rr.reports(h.WorkerId, ref.Attempt, ref.Fence) && rr.orphan:
			j.why = append(j.why, fmt.Sprintf("%s is a multi-node group whose members this master does not know (it took the run over); the attempt is requeued", ref.TaskId))
			j.gone = append(j.gone, rr)
		case rr.reports(h.WorkerId, ref.Attempt, ref.Fence):
			rr.view.Store(nil) // another master may have held the run meanwhile
			rr.sess = sess     // its run token was checked (onHello)
			if ref.Finished && rr.group == nil {
				rr.exited.Store(true) // its process is gone; its report is to come
			}
			j.adopt = append(j.adopt, rr)
			continue
		case rr != nil && rr.workerID != h.WorkerId:
			j.why = append(j.why, fmt.Sprintf("%s is placed on worker %s", ref.TaskId, rr.workerID))
		case foreign[ref.TaskId] != "":
			j.why = append(j.why, fmt.Sprintf("%s is placed on worker %s", ref.TaskId, foreign[ref.TaskId]))
		}
		j.kill = append(j.kill, ref.TaskId)
	}
	inHello := make(map[string]bool, len(h.Runs))
	for _, ref := range h.Runs {
		inHello[ref.TaskId] = true
	}
	for id, rr := range w.runs {
		// A placed run the worker does not hold is lost: the worker restarted
		// or the ExecuteTask died with the old connection. Claims still in
		// flight (fence 0) are sent on the new session by the scheduler.
		switch {
		case rr.group != nil && !rr.memberDone.Load() && rr.fence.Load() != 0:
			j.groupLost = append(j.groupLost, rr)
		case rr.group != nil: // its group handles its end
		case !inHello[id] && rr.fence.Load() != 0:
			j.gone = append(j.gone, rr)
		}
	}
	w.publishLocked()
	return j
}

// leave unregisters sess, when it is still its worker's session.
func (r *registry) leave(sess *session) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	w := r.workers[sess.workerID]
	if w == nil || w.sess != sess {
		return false
	}
	w.sess = nil
	w.lastHeartbeat = time.Unix(0, sess.lastHeartbeat.Load())
	w.lastHeard = time.Unix(0, sess.lastSeen.Load())
	return true
}

// silent lists the open sessions whose last frame is older than ttl.
func (r *registry) silent(now time.Time, ttl time.Duration) []*session {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []*session
	for _, w := range r.workers {
		// A closed session waits for its shard to unregister it: closing it
		// again on every pass would only flood the log.
		if s := w.sess; s != nil && !s.closed.Load() && now.Sub(time.Unix(0, s.lastSeen.Load())) > ttl {
			out = append(out, s)
		}
	}
	return out
}

// requestCancel records that id's cancel was requested and returns its run
// when it is placed here.
func (r *registry) requestCancel(id string, why cancelCause) *runRec {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.cancels[id] = struct{}{}
	if why.msg != "" && r.runs[id] != nil {
		if _, ok := r.cancelWhy[id]; !ok {
			r.cancelWhy[id] = why
		}
	}
	return r.runs[id]
}

// cancelReason is why run id ends when cancelled: the cause its cancel
// was requested with here, else "cancelled".
func (r *registry) cancelReason(id string) cancelCause {
	r.mu.Lock()
	defer r.mu.Unlock()
	if why, ok := r.cancelWhy[id]; ok {
		return why
	}
	return cancelCause{msg: "cancelled"}
}

// placed reports whether run id is placed on a worker of this master.
func (r *registry) placed(id string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.runs[id] != nil
}

// cancelPlaced records a cancel request (from another master, or from the
// store) for the runs among ids that are placed here and returns them.
func (r *registry) cancelPlaced(ids ...string) []*runRec {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []*runRec
	for _, id := range ids {
		if rr := r.runs[id]; rr != nil {
			r.cancels[id] = struct{}{}
			out = append(out, rr)
		}
	}
	return out
}

// cancelRequested reports whether id's cancel was requested.
func (r *registry) cancelRequested(id string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	_, ok := r.cancels[id]
	return ok
}

// takeCancel reports whether id's cancel was requested and forgets it.
func (r *registry) takeCancel(id string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	_, ok := r.cancels[id]
	delete(r.cancels, id)
	return ok
}

// cancelTarget is where a CancelTask for rr goes: its worker's session
// (nil: not connected), when its cancel was requested and its fence is known.
func (r *registry) cancelTarget(rr *runRec) *session {
	r.mu.Lock()
	defer r.mu.Unlock()
	_, requested := r.cancels[rr.taskID]
	w := r.workers[rr.workerID]
	if !requested || w == nil || rr.fence.Load() == 0 {
		return nil
	}
	return w.sess
}

// sessionOf is the connection of rr's worker (nil: not connected), while
// rr is still placed.
func (r *registry) sessionOf(rr *runRec) *session {
	r.mu.Lock()
	defer r.mu.Unlock()
	w := r.workers[rr.workerID]
	if w == nil || r.runs[rr.taskID] != rr {
		return nil
	}
	return w.sess
}

// uncancelledHeld lists the runs on connected workers whose cancel was not
// requested here, fence known.
func (r *registry) uncancelledHeld() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var ids []string
	for id, rr := range r.runs {
		if _, ok := r.cancels[id]; ok || rr.fence.Load() == 0 {
			continue
		}
		if w := r.workers[rr.workerID]; w != nil && w.sess != nil {
			ids = append(ids, id)
		}
	}
	return ids
}

// movedOn forgets the run t another master changed when t shows it ended
// or moved on from this master's claim, unless it ended at that claim while
// its worker is connected here. It returns the worker whose view changed,
// or "".
func (r *registry) movedOn(t core.Task) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	rr := r.runs[t.ID]
	if rr == nil {
		return ""
	}
	fence := rr.fence.Load()
	if fence == 0 || (t.Status.Active() && t.Fence == fence && t.Worker == rr.workerID) {
		return ""
	}
	if t.Fence < fence {
		// An older state of the run, overtaken by this master's claim: the
		// cluster delivers another master's events late (the QUEUED of its
		// submission, fence 0, can reach this master after it dispatched
		// the run). Only a later claim or the end of this one moves it on;
		// a requeue keeps the fence it requeued.
		return ""
	}
	if w := r.workers[rr.workerID]; w != nil && w.sess != nil && (t.Status.Terminal() && t.Fence == fence) {
		// Ended at this master's claim: the worker's own report is
		// handled here (onFinished), which releases the run.
		return ""
	}
	// Requeued or claimed anew by another master (its reaper took the
	// expired lease): the claim this master holds is dead even when its
	// worker is connected here, and keeping it would hold the worker's
	// GPUs and keep the run from being scheduled again, for good (issue
	// 11: the worker had refused or self-fenced the attempt, so no report
	// ever comes). A heartbeat that still lists the run is then told it is
	// lost.
	r.removeLocked(rr)
	return rr.workerID
}

// hasFreeLocked reports whether w is connected with anything free, without
// building its free list.
func (w *workerRec) hasFreeLocked() bool {
	if !w.connectedLocked() || w.draining {
		return false
	}
	cpuRuns, gpuRuns := 0, 0
	var shared map[int]int
	for _, rr := range w.runs {
		if !rr.holds() {
			continue
		}
		if len(rr.gpus) == 0 {
			cpuRuns++
		}
		if rr.share > 0 && len(rr.gpus) == 1 {
			if shared == nil {
				shared = map[int]int{}
			}
			shared[rr.gpus[0]] += rr.share
			continue
		}
		gpuRuns += len(rr.gpus)
	}
	for _, h := range shared {
		if h < 100 {
			return true // room on a shared GPU
		}
	}
	// Not its cores or memory: a run that asks for none (one from before
	// they were asked for) fits a worker whose cores are all held.
	return cpuRuns < w.slots || gpuRuns+len(shared) < len(w.gpus)
}

// usedLocked is the cores (thousandths) and memory its runs hold.
func (w *workerRec) usedLocked() (cpu, mem int64) {
	for _, rr := range w.runs {
		if rr.holds() {
			cpu, mem = cpu+rr.cpuMillis, mem+rr.memoryMB
		}
	}
	return cpu, mem
}

// offers is what a worker reports it offers of cores or memory, as the
// planner counts it: 0 (not reported) is plan.Unlimited.
func offers(v int64) int64 {
	if v <= 0 {
		return plan.Unlimited
	}
	return v
}

// sizeLocked is what w offers in all, as plan.Size.
func (w *workerRec) sizeLocked() plan.Size {
	return plan.Size{GPUs: len(w.gpus), Slots: w.slots, CPUMillis: offers(w.cpuMillis), MemoryMB: offers(w.memoryMB)}
}

// freeLocked is w's free resources, as the planner sees them. It allocates
// only the free GPU list: the scheduler builds one for every connected
// worker on each pass.
func (w *workerRec) freeLocked() plan.Worker {
	var usedBuf [16]int
	used := usedBuf[:0]
	cpuRuns := 0
	var cpu, mem int64
	for _, rr := range w.runs {
		if !rr.holds() {
			continue
		}
		if len(rr.gpus) == 0 {
			cpuRuns++
		}
		used = append(used, rr.gpus...)
		cpu, mem = cpu+rr.cpuMillis, mem+rr.memoryMB
	}
	c := plan.Worker{ID: w.id, FreeSlots: w.slots - cpuRuns, GPUs: len(w.gpus),
		FreeCPUMillis: offers(w.cpuMillis) - cpu, FreeMemoryMB: offers(w.memoryMB) - mem,
		CPUMillis: offers(w.cpuMillis), MemoryMB: offers(w.memoryMB), Models: w.gpus, Labels: w.labels, Shares: w.sharesLocked(), Containers: len(w.runtimes) > 0}
	if w.sess != nil {
		c.ForeignGPUs = w.sess.foreignGPUs()
	}
	for _, g := range w.gpus {
		if !slices.Contains(used, g.Index) {
			c.FreeGPUs = append(c.FreeGPUs, g.Index)
		}
	}
	return c
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
		if !w.connectedLocked() {
			continue
		}
		s.Connected++
		s.MaxGPUs, s.MaxSlots = max(s.MaxGPUs, len(w.gpus)), max(s.MaxSlots, w.slots)
		if z := w.sizeLocked(); !slices.Contains(s.Sizes, z) {
			s.Sizes = append(s.Sizes, z)
		}
		if c := w.freeLocked(); !w.draining && (len(c.FreeGPUs) > 0 || c.FreeSlots > 0 || len(c.Shares) > 0) {
			s.Free = append(s.Free, c)
		}
		s.Machines = append(s.Machines, plan.Machine{Labels: w.labels, GPUs: w.gpus, Containers: len(w.runtimes) > 0})
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
	connected := w.connectedLocked()
	switch {
	case connected && w.draining:
		return core.WorkerDraining
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
	shares := map[int][]core.GPUShare{}
	for id, rr := range w.runs {
		running = append(running, id)
		if !rr.holds() {
			continue // its outputs are still stored; the GPU may be the next run's
		}
		if rr.share > 0 && len(rr.gpus) == 1 {
			shares[rr.gpus[0]] = append(shares[rr.gpus[0]], core.GPUShare{TaskID: id, Fraction: float64(rr.share) / 100, MemoryMB: rr.shareMB})
			continue
		}
		for _, g := range rr.gpus {
			holder[g] = id
		}
	}
	slices.Sort(running)
	for i := range gpus {
		gpus[i].TaskID = holder[gpus[i].Index]
		if sh := shares[gpus[i].Index]; len(sh) > 0 {
			slices.SortFunc(sh, func(a, b core.GPUShare) int { return strings.Compare(a.TaskID, b.TaskID) })
			gpus[i].Shares = sh
		}
	}
	hb := w.lastHeartbeat
	problem := ""
	if w.sess != nil {
		hb = time.Unix(0, w.sess.lastHeartbeat.Load())
		problem = w.sess.fillGPUs(gpus)
	}
	cpu, mem := w.usedLocked()
	enf := w.enforcement
	if enf == "" {
		enf = core.EnforcementNone // a worker from before enforcement, or one that says nothing
	}
	return core.WorkerInfo{ID: w.id, Host: w.host, State: w.stateLocked(), GPUs: gpus, Slots: w.slots,
		RunningTasks: running, LastHeartbeatAt: hb, Master: master, Version: w.version, Isolation: w.isolation,
		GPUProblem: problem, CPUs: float64(w.cpuMillis) / 1000, MemoryMB: w.memoryMB, CPUsUsed: float64(cpu) / 1000,
		MemoryMBUsed: mem, Enforcement: enf, EnforcementWarning: w.enforcementWarning, Labels: w.labels,
		Runtimes: w.runtimes}
}

// info is the view of worker id; false when unknown.
func (r *registry) info(id, master string) (core.WorkerInfo, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	w := r.workers[id]
	if w == nil {
		return core.WorkerInfo{}, false
	}
	return w.infoLocked(master), true
}

// infos lists the views of every known worker, sorted by id.
func (r *registry) infos(master string) []core.WorkerInfo {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]core.WorkerInfo, 0, len(r.workers))
	for _, w := range r.workers {
		out = append(out, w.infoLocked(master))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// unenforced is why worker id runs its runs without enforcing their
// limits, when it was asked for best-effort enforcement and could not
// (Hello's enforcement_warning); "" when it enforces them or was told not to.
func (r *registry) unenforced(id string) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if w := r.workers[id]; w != nil {
		return w.enforcementWarning
	}
	return ""
}

// drain sets whether worker id takes new runs; false when unknown.
func (r *registry) drain(id string, on bool) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	w := r.workers[id]
	if w == nil {
		return false
	}
	w.draining = on
	return true
}

// forget drops worker id when it is DOWN: core.ErrNotFound when unknown,
// core.ErrConflict in any other state.
func (r *registry) forget(id string) (core.WorkerState, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	w := r.workers[id]
	if w == nil {
		return "", core.ErrNotFound
	}
	if st := w.stateLocked(); st != core.WorkerDown {
		return st, core.ErrConflict
	}
	delete(r.workers, id)
	return core.WorkerDown, nil
}

// forgetDown drops the DOWN workers last heard of before before and
// returns their ids.
func (r *registry) forgetDown(before time.Time) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for id, w := range r.workers {
		hb := w.lastHeartbeat
		if w.sess != nil {
			// Closed but not yet unregistered (leave copies the time):
			// the session's own time, as infoLocked reads it, not zero.
			hb = time.Unix(0, w.sess.lastHeartbeat.Load())
		}
		if w.stateLocked() == core.WorkerDown && hb.Before(before) {
			delete(r.workers, id)
			out = append(out, id)
		}
	}
	return out
}

// gpuUUIDs names GPUs indices of worker id by UUID ("" when unknown).
func (r *registry) gpuUUIDs(id string, indices []int) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]string, len(indices))
	if w := r.workers[id]; w != nil {
		for i, idx := range indices {
			for _, g := range w.gpus {
				if g.Index == idx {
					out[i] = g.UUID
				}
			}
		}
	}
	return out
}

// preemptNodes is every connected, undrained worker as plan.Preempt sees
// it: its free GPUs (those of runs already being preempted count as free:
// they are freeing) and its runs this master knows (their view), with the
// runs by id.
func (r *registry) preemptNodes() ([]plan.Node, map[string]*runRec) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var nodes []plan.Node
	recs := map[string]*runRec{}
	for _, w := range r.workers {
		if !w.connectedLocked() || w.draining {
			continue
		}
		// A GPU a foreign process holds is not free here either: counted
		// free, a run waiting for it (gpu_foreign) looked as if it fit, and
		// no preemptible run was stopped for it (issue 32).
		free := w.freeLocked()
		n := plan.Node{ID: w.id, FreeGPUs: plan.UsableGPUs(free), FreeCPUMillis: free.FreeCPUMillis, FreeMemoryMB: free.FreeMemoryMB}
		for _, rr := range w.runs {
			if !rr.holds() {
				continue // counted free already (freeLocked), and ending
			}
			if rr.preempt.Load() != nil {
				n.FreeGPUs += len(rr.gpus)
				n.FreeCPUMillis, n.FreeMemoryMB = n.FreeCPUMillis+rr.cpuMillis, n.FreeMemoryMB+rr.memoryMB
				continue
			}
			// A share frees no whole GPU: fractional runs are not preempted
			// for whole-GPU runs.
			if rr.pol == nil || rr.fence.Load() == 0 || !rr.pol.preemptible || rr.share > 0 {
				continue
			}
			a := plan.Active{ID: rr.taskID, Worker: w.id, GPUs: len(rr.gpus), CPUMillis: rr.cpuMillis, MemoryMB: rr.memoryMB,
				Priority: rr.pol.priority, Preemptible: true,
				Interactive: rr.pol.interactive, StartedAt: rr.pol.placedAt, PreemptedAt: rr.pol.preemptedAt}
			n.Runs = append(n.Runs, a)
			recs[rr.taskID] = rr
		}
		nodes = append(nodes, n)
	}
	return nodes, recs
}

// markPreempt marks rr as preempted for mark, unless it is marked already
// or no longer placed; it reports whether it marked it.
func (r *registry) markPreempt(rr *runRec, mark preemptFor) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.runs[rr.taskID] != rr {
		return false
	}
	return rr.preempt.CompareAndSwap(nil, &mark)
}

// anyPreemptible reports whether a run on a connected worker is
// preemptible and not being preempted already.
func (r *registry) anyPreemptible() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rr := range r.runs {
		if rr.pol != nil && rr.pol.preemptible && rr.preempt.Load() == nil {
			return true
		}
	}
	return false
}

// session is the session of rr's worker (nil: not connected).
func (r *registry) session(rr *runRec) *session {
	r.mu.Lock()
	defer r.mu.Unlock()
	if w := r.workers[rr.workerID]; w != nil && w.connectedLocked() {
		return w.sess
	}
	return nil
}

// startSession is session for the ExecuteTask of a group's member: that
// session then reports it.
func (r *registry) startSession(rr *runRec) *session {
	r.mu.Lock()
	defer r.mu.Unlock()
	if w := r.workers[rr.workerID]; w != nil && w.connectedLocked() {
		r.bindLocked(rr, w)
		return w.sess
	}
	return nil
}

// bindLocked makes w's session the one that reports rr (its ExecuteTask
// goes there).
func (r *registry) bindLocked(rr *runRec, w *workerRec) {
	if rr.sess != w.sess && w.runs[rr.taskID] == rr {
		rr.sess = w.sess
		w.publishLocked()
	}
}

// remoteHost is the host part of a connection's remote address.
func remoteHost(remote string) string {
	if h, _, err := net.SplitHostPort(remote); err == nil {
		return h
	}
	return remote
}
