// Package sim is rlsched sim: a discrete-event simulation, in simulated
// time, of a cluster running a trace of jobs under the master's own
// planner. Every placement, fair-share, quota, reservation and preemption
// decision is the one package dispatch/plan makes for the master, on a
// snapshot taken the way the master's scheduler takes it (dispatch's
// schedule.go, inputs.go, preempt.go); this package only keeps the
// simulated state the master keeps in its registry and store, and moves
// simulated time from one event to the next.
//
// What it must never do: decide a placement or a victim itself (a rule
// that is not plan's is a second copy, which drifts), read the wall clock
// (time comes from the trace and the event queue only), or do I/O beyond
// the readers it is handed.
package sim

import (
	"container/heap"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/rlsched/rlsched/core"
	"github.com/rlsched/rlsched/dispatch"
	"github.com/rlsched/rlsched/dispatch/plan"
)

// Policy is one scheduling policy to simulate: the master's knobs
// (dispatch.Policy, the same zero-means-default rules), or the FIFO
// baseline.
type Policy struct {
	Name string
	// FIFO gives the planner no users: no fair-share order and no quotas,
	// the store's order (priority, then age). The planner still
	// backfills past a run that does not fit.
	FIFO bool
	// HalfLife is FAIRSHARE_HALF_LIFE (0: the master's default).
	HalfLife time.Duration
	// BackfillReserve is BACKFILL_RESERVE_SECONDS (0: the default; < 0:
	// no reservations).
	BackfillReserve time.Duration
	// PreemptCooldown is PREEMPT_COOLDOWN_SECONDS (0: the default; < 0: no
	// preemption).
	PreemptCooldown time.Duration
	// DefaultGPUQuota is DEFAULT_USER_GPU_QUOTA (0: none).
	DefaultGPUQuota int
	// Order sets the runs' priorities for a baseline, so that the planner's
	// own priority rules (the queue's order, preemption of lower
	// priorities) carry it out: "" keeps the trace's priorities; OrderSJF
	// gives shorter runs (their oracle duration) higher ones; OrderTiresias
	// gives every run the level of Tiresias' discretized 2D-LAS its
	// attained service (GPU-seconds) has reached, and makes it
	// preemptible.
	Order string
}

// The baselines' orders (Policy.Order).
const (
	OrderSJF         = "sjf"
	OrderTiresias    = "tiresias"
	OrderMultifactor = "multifactor"
)

// The multifactor baseline's weights and age cap (Slurm's
// PriorityWeightAge, PriorityWeightFairshare, PriorityMaxAge; its
// defaults of the age cap, weights equal): a queued run's priority is
// MultifactorScale × (age factor + fair-share factor) / 2, the age factor
// its wait over the cap (at most 1), the fair-share factor 2^(−U/S), U
// its owner's share of the decayed usage of everyone, S 1/(the trace's
// users): every user has an equal share.
const (
	MultifactorMaxAge = 7 * 24 * time.Hour
	MultifactorScale  = 1_000_000
)

// TiresiasLevels are the attained-service thresholds (GPU-seconds) of
// OrderTiresias' queues: below the first, priority 0; below the second,
// −1; then −2.
var TiresiasLevels = []float64{3600, 36000}

func (p Policy) withDefaults() Policy {
	if p.HalfLife <= 0 {
		p.HalfLife = dispatch.DefaultHalfLife
	}
	if p.BackfillReserve == 0 {
		p.BackfillReserve = dispatch.DefaultBackfillReserve
	}
	if p.PreemptCooldown == 0 {
		p.PreemptCooldown = dispatch.DefaultPreemptCooldown
	}
	return p
}

// Config is one simulation.
type Config struct {
	Policy Policy
	// CheckpointEvery: a run keeps its work at every multiple of it; a
	// preemption or a fault loses what it did since (0: it starts over).
	CheckpointEvery time.Duration
	// Tick: while runs wait, the scheduler also passes every Tick of
	// simulated time (0: never). The master's one-second tick is simulated
	// without it, at the instants it could find something new: a run due
	// for its reservation, a run out of its preemption cooldown, a
	// Tiresias level reached.
	Tick time.Duration
}

// JobResult is what became of one job.
type JobResult struct {
	ID          string        `json:"id"`
	User        string        `json:"user"`
	GPUs        float64       `json:"gpus"` // whole GPUs, or a share of one (0.5)
	Submit      time.Time     `json:"submit"`
	Start       time.Time     `json:"start"` // its first start
	End         time.Time     `json:"end"`
	Duration    time.Duration `json:"duration"` // its work, from the trace
	Preemptions int           `json:"preemptions"`
	Faults      int           `json:"faults"`
	Lost        time.Duration `json:"lost"` // work done and lost to preemptions and faults
}

// Wait is the time from submission to the first start.
func (j JobResult) Wait() time.Duration { return j.Start.Sub(j.Submit) }

// JCT is the job completion time: from submission to the end.
func (j JobResult) JCT() time.Duration { return j.End.Sub(j.Submit) }

// Result is one simulation's outcome.
type Result struct {
	Policy Policy
	// Jobs are the jobs that finished, in the order they did.
	Jobs []JobResult
	// Skipped are the trace's jobs not simulated (what the cluster can
	// never fit) and those that never started, with the planner's reason.
	Skipped []Skipped
	// GPUs of the cluster; AllocatedGPUSeconds were held by runs, Useful
	// of them ran work that was kept (not lost to a preemption or fault).
	Workers, GPUs                     int
	AllocatedGPUSeconds, UsefulGPUSec float64
	Start, End                        time.Time // the first submission, the last instant anything changed
	Events, Passes, Preemptions       int64
	// Busy is the GPU-seconds held in each Bucket of simulated time from
	// Start (utilisation over time).
	Busy   []float64
	Bucket time.Duration
}

// Run simulates trace on c under cfg. It returns an error only for a
// cluster that does not check (ReadCluster's errors); every job is either
// in Result.Jobs or in Result.Skipped with its reason.
func Run(c *Cluster, tr *Trace, cfg Config) (*Result, error) {
	nodes, err := c.nodes()
	if err != nil {
		return nil, err
	}
	cfg.Policy = cfg.Policy.withDefaults()
	e := newEngine(c, nodes, cfg)
	e.load(tr)
	e.loop()
	return e.finish(), nil
}

// state is one job as the simulation keeps it: its run's record in the
// master's registry and store.
type state struct {
	job    *Job   // the trace's (never written)
	id     string // its run's id: the job's, made unique
	idx    int    // in engine.states
	userID int64
	done   time.Duration // work kept (checkpointed)
	node   int           // -1: queued or ended
	gpus   []int
	// share is the hundredths of its one GPU a fractional run holds, and
	// shareMB the MiB of that GPU's memory (the placement's); 0: whole
	// GPUs.
	share   int
	shareMB int64
	start   time.Time // of the attempt running
	epoch   int       // bumped at every stop: a finish event of an earlier attempt is stale
	preempt time.Time
	// attained is the GPU-seconds its ended attempts ran (OrderTiresias);
	// prio the priority it started its attempt with.
	attained float64
	prio     int
	res      JobResult
}

type simNode struct {
	id      string
	gpus    []int
	models  []core.GPU // by position in gpus
	used    []bool     // by position in gpus: held whole, or shared
	free    []int      // the free GPU indices in gpus' order; replaced, never written into
	shares  []plan.Share
	slots   int
	cpuRuns int
	// cpuMillis and memoryMB are what it offers (plan.Unlimited: not
	// said), cpuUsed and memUsed what its runs hold.
	cpuMillis, memoryMB int64
	cpuUsed, memUsed    int64
	labels              map[string]string
	up                  bool
	runs                map[*state]struct{}
}

type userState struct {
	name          string
	charged       float64 // decayed GPU-seconds of ended attempts, as of asOf
	asOf          time.Time
	activeH       int // hundredths of GPUs its running runs hold
	activeRuns    int
	runW, runWAt  float64 // Σ weight and Σ weight × start (s since origin) of its running runs
	maxGPUs, maxR int
}

type evKind int

const (
	evFinish evKind = iota
	evDown
	evUp
	evTick
	// evDue: a queued run becomes due for its backfill reservation
	// (valid while it is still queued in the same attempt); evWake: a
	// running run leaves its preemption cooldown or, under
	// OrderTiresias, reaches the next level (valid while it still runs the
	// same attempt). They stand for the master's one-second tick at the
	// instants when the tick could find something new.
	evDue
	evWake
)

type event struct {
	at    time.Time
	seq   int64
	kind  evKind
	s     *state
	epoch int
	node  int
}

type eventHeap []event

func (h eventHeap) Len() int { return len(h) }
func (h eventHeap) Less(i, j int) bool {
	if c := h[i].at.Compare(h[j].at); c != 0 {
		return c < 0
	}
	return h[i].seq < h[j].seq
}
func (h eventHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *eventHeap) Push(x any)   { *h = append(*h, x.(event)) }
func (h *eventHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

type engine struct {
	cfg    Config
	c      *Cluster
	nodes  []simNode
	byName map[string]int
	users  []userState
	userID map[string]int64

	states  []state     // the jobs to simulate, by submission
	next    int         // the next to submit
	queue   []core.Task // QUEUED, in the store's order (core.QueueBefore)
	events  eventHeap
	seq     int64
	now     time.Time
	origin  time.Time
	ticking bool
	running int
	// preemptible counts the running preemptible runs by priority: with
	// none of a lower priority than the queue's highest, plan.Preempt
	// could find no victim and preemption is not asked.
	preemptible map[int]int

	// usageAll is every user's usage at the last reprioritise
	// (OrderMultifactor).
	usageAll float64

	connected, maxGPUs, maxSlots int
	freeGPUs, freeSlots          int
	// shared counts the shared GPUs of the connected workers: a pass may
	// place a fractional run there with no GPU free.
	shared   int
	sizes    []plan.Size
	machines []plan.Machine
	freeBuf  []plan.Worker
	// fits caches, by what a job asks, why no worker of the cluster could
	// ever take it ("": one could).
	fits map[string]string
	// typed: the cluster file names its GPUs' types; without, the jobs'
	// GPU types are dropped (Cluster.NamesGPUTypes).
	typed bool

	res Result
}

func newEngine(c *Cluster, nodes []node, cfg Config) *engine {
	e := &engine{cfg: cfg, c: c, byName: map[string]int{}, userID: map[string]int64{}, preemptible: map[int]int{}}
	for i, n := range nodes {
		e.nodes = append(e.nodes, simNode{id: n.id, gpus: n.gpus, models: n.models, used: make([]bool, len(n.gpus)), free: n.gpus,
			slots: n.slots, cpuMillis: offers(n.cpuMillis), memoryMB: offers(n.memoryMB), labels: n.labels, up: true, runs: map[*state]struct{}{}})
		e.byName[n.id] = i
		e.res.GPUs += len(n.gpus)
	}
	e.res.Workers = len(nodes)
	e.typed = c.NamesGPUTypes()
	e.fleetChanged()
	e.res.Policy = cfg.Policy
	return e
}

// load takes the trace's jobs, skipping those no worker of the cluster
// could ever fit (the planner would leave them queued for good with
// pendingCode no_worker).
func (e *engine) load(tr *Trace) {
	e.res.Skipped = append(e.res.Skipped, tr.Skipped...)
	maxGPUs, maxSlots := e.maxGPUs, e.maxSlots // every worker is up at the start
	jobs := tr.Jobs
	sorted := func(a, b Job) int { return a.Submit.Compare(b.Submit) }
	if !slices.IsSortedFunc(jobs, sorted) {
		jobs = slices.Clone(jobs)
		slices.SortStableFunc(jobs, sorted)
	}
	e.states = make([]state, 0, len(jobs))
	ids := make(map[string]bool, len(jobs)) // only while loading: a million ids held through the run would be its largest map
	for i := range jobs {
		j := &jobs[i]
		switch {
		case len(e.nodes) == 0:
			e.skip(j.ID, "the cluster has no workers")
		case j.GPUs > maxGPUs:
			e.skip(j.ID, fmt.Sprintf("needs %d GPUs on one worker, no worker has that many (the largest has %d)", j.GPUs, maxGPUs))
		case j.GPUs == 0 && j.GPUFraction == 0 && maxSlots == 0:
			e.skip(j.ID, "needs a CPU slot, no worker has one")
		case e.neverFits(j) != "":
			e.skip(j.ID, e.neverFits(j))
		default:
			st := state{job: j, id: j.ID, idx: len(e.states), node: -1, userID: e.user(j.User)}
			if ids[st.id] {
				st.id = fmt.Sprintf("%s#%d", j.ID, i) // a trace's ids need not be unique; the queue's must
			}
			ids[st.id] = true
			e.states = append(e.states, st)
		}
	}
	if len(e.states) > 0 {
		e.origin = e.states[0].job.Submit
	}
	e.now = e.origin
	e.res.Start = e.origin
	if n := len(e.states); n > 0 {
		// About 500 buckets over the submissions, at least a minute each.
		e.res.Bucket = max(time.Minute, e.states[n-1].job.Submit.Sub(e.origin)/500).Round(time.Minute)
	}
	for i := range e.users {
		e.users[i].asOf = e.origin
	}
	for _, f := range e.c.Faults {
		n := e.byName[f.Worker]
		e.push(event{at: e.origin.Add(time.Duration(f.At)), kind: evDown, node: n})
		if f.For > 0 {
			e.push(event{at: e.origin.Add(time.Duration(f.At + f.For)), kind: evUp, node: n})
		}
	}
}

// neverFits is the planner's no_worker reason for j on the whole cluster
// ("": some worker could take it), for a job that asks for more than GPUs
// and slots (a share, cores, memory, a GPU type or memory): the planner's
// rule, on a snapshot of every worker free, asked once for each distinct
// request.
func (e *engine) neverFits(j *Job) string {
	if j.GPUFraction == 0 && j.CPUMillis == 0 && j.MemoryMB == 0 && j.GPUMemoryMB == 0 && (len(j.GPUType) == 0 || !e.typed) {
		return ""
	}
	key := fmt.Sprint(j.GPUs, j.GPUFraction, j.CPUMillis, j.MemoryMB, j.GPUMemoryMB, j.GPUType)
	if why, ok := e.fits[key]; ok {
		return why
	}
	if e.fits == nil {
		e.fits = map[string]string{}
	}
	t := e.task(j)
	s := plan.Snapshot{Connected: len(e.nodes), MaxGPUs: e.maxGPUs, MaxSlots: e.maxSlots, Sizes: e.sizes, Machines: e.machines, NoGroups: true}
	for i := range e.nodes {
		s.Free = append(s.Free, e.nodes[i].worker())
	}
	why := ""
	if w := plan.Plan(s, []core.Task{t}).Waiting[t.ID]; w.Code == plan.CodeNoWorker {
		why = w.Reason
	}
	e.fits[key] = why
	return why
}

// task is j's run as the store would hold it, QUEUED.
func (e *engine) task(j *Job) core.Task {
	t := core.Task{ID: j.ID, User: j.User, Status: core.StatusQueued, GPUs: j.GPUs, GPUFraction: j.GPUFraction,
		MemoryMB: j.MemoryMB, GPUMemoryMB: j.GPUMemoryMB, Priority: j.Priority, Preemptible: j.Preemptible,
		CreatedAt: j.Submit, UpdatedAt: j.Submit}
	if e.typed {
		t.GPUType = j.GPUType
	}
	if j.CPUMillis > 0 {
		t.CPUs = float64(j.CPUMillis) / 1000
	}
	return t
}

// offers is what a worker offers of cores or memory as the planner counts
// it: 0 (not said) is plan.Unlimited, as dispatch's offers.
func offers(v int64) int64 {
	if v <= 0 {
		return plan.Unlimited
	}
	return v
}

// worker is n as the planner's snapshot has it: what its runs leave free.
func (n *simNode) worker() plan.Worker {
	return plan.Worker{ID: n.id, FreeGPUs: n.free, FreeSlots: n.slots - n.cpuRuns, GPUs: len(n.gpus),
		FreeCPUMillis: n.cpuMillis - n.cpuUsed, FreeMemoryMB: n.memoryMB - n.memUsed, CPUMillis: n.cpuMillis, MemoryMB: n.memoryMB,
		Models: n.models, Labels: n.labels, Shares: n.shares}
}

func (e *engine) skip(id, reason string) {
	e.res.Skipped = append(e.res.Skipped, Skipped{ID: id, Reason: reason})
}

// user is the id of the user named name, made at its first job with the
// cluster file's quota, else the policy's default GPU quota (as
// dispatch's planUser does for the store's users).
func (e *engine) user(name string) int64 {
	if id, ok := e.userID[name]; ok {
		return id
	}
	u := userState{name: name, maxGPUs: -1, maxR: -1, asOf: e.origin}
	q, ok := e.c.Quotas[name]
	switch {
	case ok && q.GPUs != nil:
		u.maxGPUs = *q.GPUs
	case e.cfg.Policy.DefaultGPUQuota > 0:
		u.maxGPUs = e.cfg.Policy.DefaultGPUQuota
	}
	if ok && q.Runs != nil {
		u.maxR = *q.Runs
	}
	e.users = append(e.users, u)
	id := int64(len(e.users)) // ids from 1, as the store's
	e.userID[name] = id
	return id
}

func (e *engine) push(ev event) {
	e.seq++
	ev.seq = e.seq
	heap.Push(&e.events, ev)
}

// loop moves simulated time from one instant with events to the next; at
// each it applies them all, then has the scheduler pass, as the master's
// scheduler does when a submission, a run's end or a worker wakes it.
func (e *engine) loop() {
	for {
		at, ok := e.nextAt()
		if !ok {
			break
		}
		e.now = at
		changed := false
		for e.next < len(e.states) && !e.states[e.next].job.Submit.After(at) {
			e.submit(&e.states[e.next])
			e.next++
			e.res.Events++
			changed = true
		}
		for len(e.events) > 0 && !e.events[0].at.After(at) {
			ev := heap.Pop(&e.events).(event)
			e.res.Events++
			if e.apply(ev) {
				changed = true
			}
		}
		if !changed { // stale events only: a pass would find what the last one did
			continue
		}
		// The last instant that changed anything ends the span: a stale
		// event past it (a Tiresias level a run did not live to reach)
		// would stretch the utilisation's denominator.
		e.res.End = at
		e.schedule()
		if e.preempt() {
			e.schedule()
		}
		e.tickIfWaiting()
	}
}

func (e *engine) nextAt() (time.Time, bool) {
	var at time.Time
	ok := false
	if e.next < len(e.states) {
		at, ok = e.states[e.next].job.Submit, true
	}
	if len(e.events) > 0 && (!ok || e.events[0].at.Before(at)) {
		at, ok = e.events[0].at, true
	}
	return at, ok
}

// tickIfWaiting keeps the periodic tick (Config.Tick, if set) going while
// runs wait and something can still change (runs running, submissions or
// faults to come); a queue that nothing will change ends the simulation.
func (e *engine) tickIfWaiting() {
	if e.cfg.Tick <= 0 || e.ticking || len(e.queue) == 0 {
		return
	}
	if e.running == 0 && e.next == len(e.states) && len(e.events) == 0 {
		return
	}
	e.ticking = true
	e.push(event{at: e.now.Add(e.cfg.Tick), kind: evTick})
}

// apply applies ev; it reports whether it changed anything a pass sees.
func (e *engine) apply(ev event) bool {
	switch ev.kind {
	case evFinish:
		if ev.s.epoch != ev.epoch || ev.s.node < 0 {
			return false
		}
		s := ev.s
		e.release(s)
		s.done = s.job.Duration
		s.res.End = e.now
		e.res.Jobs = append(e.res.Jobs, s.res)
	case evDown:
		n := &e.nodes[ev.node]
		if !n.up {
			return false
		}
		for _, s := range sortedRuns(n) {
			e.stop(s, false)
		}
		n.up = false
		e.fleetChanged()
	case evUp:
		n := &e.nodes[ev.node]
		if n.up {
			return false
		}
		n.up = true
		e.fleetChanged()
	case evTick:
		e.ticking = false
	case evDue:
		return ev.s.epoch == ev.epoch && ev.s.node < 0 && ev.s.res.End.IsZero()
	case evWake:
		return ev.s.epoch == ev.epoch && ev.s.node >= 0
	}
	return true
}

// sortedRuns is n's runs in a fixed order (by id), so that a simulation
// is the same at every run of it.
func sortedRuns(n *simNode) []*state {
	out := make([]*state, 0, len(n.runs))
	for s := range n.runs {
		out = append(out, s)
	}
	slices.SortFunc(out, func(a, b *state) int { return strings.Compare(a.id, b.id) })
	return out
}

// fleetChanged recounts what the snapshot says of the connected workers.
func (e *engine) fleetChanged() {
	e.connected, e.maxGPUs, e.maxSlots, e.freeGPUs, e.freeSlots, e.shared = 0, 0, 0, 0, 0, 0
	e.sizes, e.machines = e.sizes[:0], e.machines[:0]
	for i := range e.nodes {
		n := &e.nodes[i]
		if !n.up {
			continue
		}
		e.connected++
		e.maxGPUs, e.maxSlots = max(e.maxGPUs, len(n.gpus)), max(e.maxSlots, n.slots)
		e.freeGPUs += len(n.free)
		e.freeSlots += max(n.slots-n.cpuRuns, 0)
		e.shared += len(n.shares)
		// As the registry's snapshot: the distinct sizes, and each
		// worker's labels and GPUs.
		if sz := (plan.Size{GPUs: len(n.gpus), Slots: n.slots, CPUMillis: n.cpuMillis, MemoryMB: n.memoryMB}); !slices.Contains(e.sizes, sz) {
			e.sizes = append(e.sizes, sz)
		}
		e.machines = append(e.machines, plan.Machine{Labels: n.labels, GPUs: n.models})
	}
}

func (e *engine) submit(s *state) {
	s.res = JobResult{ID: s.id, User: s.job.User, GPUs: s.job.gpuCount(), Submit: s.job.Submit, Duration: s.job.Duration}
	e.enqueue(s)
}

// enqueue puts s's run QUEUED into the queue at its place in the store's
// order: at the end for a new submission (the trace is in submission
// order), further up for one requeued.
func (e *engine) enqueue(s *state) {
	t := e.task(s.job)
	t.ID, t.UserID, t.Priority, t.Preemptible, t.UpdatedAt = s.id, s.userID, e.priority(s), e.isPreemptible(s), e.now
	t.Attempt, t.Preemptions = s.epoch+1, s.res.Preemptions
	// The simulation has no leases: Fence, which the planner never reads,
	// carries the index of the run's state (stateOf), so that a placement
	// finds it without a map of every id.
	t.Fence = uint64(s.idx + 1)
	if !s.preempt.IsZero() {
		at := s.preempt
		t.PreemptedAt = &at
	}
	if r := e.cfg.Policy.BackfillReserve; r >= 0 && t.UsesGPU() {
		// Due once UpdatedAt is before now − r (plan's reserver).
		e.push(event{at: e.now.Add(r + 1), kind: evDue, s: s, epoch: s.epoch})
	}
	if n := len(e.queue); n == 0 || core.QueueBefore(&e.queue[n-1], &t) {
		e.queue = append(e.queue, t)
		return
	}
	i, _ := slices.BinarySearchFunc(e.queue, &t, func(a core.Task, b *core.Task) int {
		if core.QueueBefore(&a, b) {
			return -1
		}
		return 1
	})
	e.queue = slices.Insert(e.queue, i, t)
}

// stateOf is the state of a queued run (enqueue's Fence).
func (e *engine) stateOf(t *core.Task) *state {
	i := int(t.Fence) - 1
	if i < 0 || i >= len(e.states) || e.states[i].id != t.ID {
		panic(fmt.Sprintf("BUG: queued run %s has no state (fence %d)", t.ID, t.Fence))
	}
	return &e.states[i]
}

// running1 is the run id running on worker.
func (e *engine) running1(worker, id string) *state {
	for s := range e.nodes[e.byName[worker]].runs {
		if s.id == id {
			return s
		}
	}
	panic(fmt.Sprintf("BUG: preemption of %s, which does not run on %s", id, worker))
}

// priority is s's run's priority now: the trace's, or its baseline's
// (Policy.Order).
func (e *engine) priority(s *state) int {
	switch e.cfg.Policy.Order {
	case OrderSJF:
		return -int(min(s.job.Duration/time.Second, 1<<40))
	case OrderMultifactor:
		if s.node >= 0 {
			return s.prio // its priority at its start: nothing preempts under it
		}
		age := min(float64(e.now.Sub(s.job.Submit))/float64(MultifactorMaxAge), 1)
		share := 0.0
		if e.usageAll > 0 {
			share = e.usageOf(s.userID) / e.usageAll * float64(len(e.users))
		}
		return int(MultifactorScale * (age + math.Exp2(-share)) / 2)
	case OrderTiresias:
		got := s.attained
		if s.node >= 0 {
			got += s.job.gpuCount() * e.now.Sub(s.start).Seconds()
		}
		level := 0
		for level < len(TiresiasLevels) && got >= TiresiasLevels[level] {
			level++
		}
		return -level
	}
	return s.job.Priority
}

func (e *engine) isPreemptible(s *state) bool {
	return s.job.Preemptible || e.cfg.Policy.Order == OrderTiresias
}

// schedule is the master's scheduler.schedule, pass after pass while
// plan.PassAgain: a page of the queue (plan.Batch), plan.Place on a
// snapshot of the workers and users, plan.Deep deep when nothing of a full
// page fitted, and the placements carried out.
func (e *engine) schedule() {
	if e.cfg.Policy.Order == OrderMultifactor && e.freeGPUs+e.freeSlots+e.shared > 0 {
		e.reprioritise()
	}
	for e.freeGPUs+e.freeSlots+e.shared > 0 && len(e.queue) > 0 {
		page := e.queue[:min(plan.Batch, len(e.queue))]
		snap := e.snapshot(page)
		if len(snap.Free) == 0 {
			return
		}
		placements := plan.Place(snap, page)
		e.res.Passes++
		read := len(page)
		if plan.LookDeeper(len(placements), read) {
			if deep := e.queue[:min(plan.Deep, len(e.queue))]; len(deep) > len(page) {
				snap.Users = e.planUsers(deep)
				placements = plan.Place(snap, deep)
			}
		}
		e.start(placements)
		if !plan.PassAgain(len(placements), read) {
			return
		}
	}
}

// reprioritise gives every queued run its multifactor priority now and
// puts the queue back in the store's order: the priorities change with
// time (age) and usage, which the master's store would read at each pass.
func (e *engine) reprioritise() {
	e.usageAll = 0
	for i := range e.users {
		e.usageAll += e.usageOf(int64(i + 1))
	}
	for i := range e.queue {
		e.queue[i].Priority = e.priority(e.stateOf(&e.queue[i]))
	}
	slices.SortStableFunc(e.queue, func(a, b core.Task) int {
		if core.QueueBefore(&a, &b) {
			return -1
		}
		if core.QueueBefore(&b, &a) {
			return 1
		}
		return 0
	})
}

// usageOf is user id's usage now, as planUsers gives it the planner.
func (e *engine) usageOf(id int64) float64 {
	u := &e.users[id-1]
	return core.Decay(u.charged, e.now.Sub(u.asOf), e.cfg.Policy.HalfLife) + max(u.runW*e.now.Sub(e.origin).Seconds()-u.runWAt, 0)
}

// snapshot is the planner's snapshot now, as dispatch's planInputs takes
// it: the connected workers with something free, by id; the users owning
// the runs of page (with their usage, what they have active and their
// quota); the reservation time.
func (e *engine) snapshot(page []core.Task) plan.Snapshot {
	// NoGroups: the simulation does not model a multi-node group's
	// members (the master runs them, dispatch/group.go), so its groups wait.
	s := plan.Snapshot{Connected: e.connected, MaxGPUs: e.maxGPUs, MaxSlots: e.maxSlots, NoGroups: true}
	free := e.freeBuf[:0]
	for i := range e.nodes {
		n := &e.nodes[i]
		if n.up && (len(n.free) > 0 || n.slots > n.cpuRuns || len(n.shares) > 0) {
			free = append(free, n.worker())
		}
	}
	s.Sizes, s.Machines = e.sizes, e.machines
	e.freeBuf, s.Free = free, free // Place copies what it changes, so the buffer serves the next pass
	if !e.cfg.Policy.FIFO {
		s.Users = e.planUsers(page)
	}
	if e.cfg.Policy.BackfillReserve >= 0 {
		s.ReserveBefore = e.now.Add(-e.cfg.Policy.BackfillReserve)
	}
	return s
}

// planUsers is the standing of the owners of queue's runs now (the
// store's Usage: the decayed charges of ended runs plus what running runs
// have used since they started, undecayed). Only the owners of the runs
// planned are given: the fair-share order ranks them among themselves,
// which orders them as ranking among every user would.
func (e *engine) planUsers(queue []core.Task) map[int64]plan.User {
	out := make(map[int64]plan.User, 16)
	for i := range queue {
		id := queue[i].UserID
		if _, ok := out[id]; ok {
			continue
		}
		u := &e.users[id-1]
		// The store's ActiveGPUs: shares summed, rounded up.
		out[id] = plan.User{Name: u.name, Usage: e.usageOf(id), ActiveGPUs: (u.activeH + 99) / 100, ActiveRuns: u.activeRuns,
			MaxGPUs: u.maxGPUs, MaxRuns: u.maxR}
	}
	return out
}

// start carries out placements: each run takes its GPUs (or a slot) and
// ends when its remaining work is done; the placed runs leave the queue.
func (e *engine) start(placements []plan.Placement) {
	if len(placements) == 0 {
		return
	}
	ids := make(map[string]bool, len(placements))
	for _, p := range placements {
		s := e.stateOf(p.Task)
		n := &e.nodes[e.byName[p.Worker]]
		if s.node >= 0 {
			panic(fmt.Sprintf("BUG: %s placed while it runs on %s", s.id, e.nodes[s.node].id))
		}
		ids[s.id] = true
		s.node, s.gpus, s.start = e.byName[p.Worker], p.GPUs, e.now
		if s.res.Start.IsZero() {
			s.res.Start = e.now
		}
		want := s.job.GPUs
		if s.job.GPUFraction > 0 {
			want = 1
		}
		if s.node != e.byName[p.Worker] || !n.up || len(p.GPUs) != want {
			panic(fmt.Sprintf("BUG: %s placed on %s (up %v) with GPUs %v, needing %v", s.id, p.Worker, n.up, p.GPUs, s.job.gpuCount()))
		}
		n.runs[s] = struct{}{}
		if n.cpuUsed += s.job.CPUMillis; n.cpuUsed > n.cpuMillis {
			panic(fmt.Sprintf("BUG: %s placed on %s beyond its cores", s.id, n.id))
		}
		if n.memUsed += s.job.MemoryMB; n.memUsed > n.memoryMB {
			panic(fmt.Sprintf("BUG: %s placed on %s beyond its memory", s.id, n.id))
		}
		switch {
		case s.job.GPUFraction > 0:
			s.share, s.shareMB = p.Task.GPUHundredths(), p.GPUMemoryMB
			taken, shared := n.reshare()
			e.freeGPUs -= taken
			e.shared += shared
		case len(p.GPUs) == 0:
			if n.cpuRuns++; n.cpuRuns > n.slots {
				panic(fmt.Sprintf("BUG: %s placed on %s beyond its %d slots", s.id, n.id, n.slots))
			}
			e.freeSlots--
		default:
			for _, g := range p.GPUs {
				i := slices.Index(n.gpus, g)
				if i < 0 || n.used[i] {
					panic(fmt.Sprintf("BUG: %s placed on GPU %d of %s, which is not free", s.id, g, n.id))
				}
				n.used[i] = true
			}
			n.refree()
			e.freeGPUs -= len(p.GPUs)
		}
		u := &e.users[s.userID-1]
		w := s.job.weight()
		u.activeH += s.share + 100*s.job.GPUs
		u.activeRuns++
		u.runW += w
		u.runWAt += w * e.now.Sub(e.origin).Seconds()
		e.running++
		s.prio = p.Task.Priority
		if e.isPreemptible(s) {
			e.preemptible[s.prio]++
		}
		e.push(event{at: e.now.Add(s.job.Duration - s.done), kind: evFinish, s: s, epoch: s.epoch})
		if e.cfg.Policy.Order == OrderTiresias && s.job.gpuCount() > 0 {
			for _, thr := range TiresiasLevels {
				if thr > s.attained {
					at := e.now.Add(time.Duration((thr - s.attained) / s.job.gpuCount() * 1e9))
					e.push(event{at: at, kind: evWake, s: s, epoch: s.epoch})
				}
			}
		}
		if !s.preempt.IsZero() && e.cfg.Policy.PreemptCooldown > 0 {
			if at := s.preempt.Add(e.cfg.Policy.PreemptCooldown + 1); at.After(e.now) {
				e.push(event{at: at, kind: evWake, s: s, epoch: s.epoch})
			}
		}
	}
	e.dequeue(ids)
}

// reshare rebuilds n's shares from its fractional runs, as the registry's
// sharesLocked, in GPU order: a GPU with a share is out of the free list
// until its last share ends. It returns how many GPUs left the free list
// (negative: came back) and how many more shared GPUs n has.
func (n *simNode) reshare() (taken, shared int) {
	var out []plan.Share
	for s := range n.runs {
		if s.share == 0 {
			continue
		}
		g := s.gpus[0]
		j := slices.IndexFunc(out, func(x plan.Share) bool { return x.Index == g })
		if j < 0 {
			out = append(out, plan.Share{Index: g, TotalMB: n.models[slices.Index(n.gpus, g)].MemoryMB, User: s.userID})
			j = len(out) - 1
		} else if out[j].User != s.userID {
			out[j].User = -1
		}
		out[j].Used += s.share
		out[j].MemoryMB += s.shareMB
	}
	slices.SortFunc(out, func(a, b plan.Share) int { return a.Index - b.Index })
	has := func(sh []plan.Share, g int) bool {
		return slices.ContainsFunc(sh, func(x plan.Share) bool { return x.Index == g })
	}
	for _, sh := range n.shares {
		if !has(out, sh.Index) {
			n.used[slices.Index(n.gpus, sh.Index)] = false
			taken--
		}
	}
	for _, sh := range out {
		i := slices.Index(n.gpus, sh.Index)
		if !has(n.shares, sh.Index) {
			if n.used[i] {
				panic(fmt.Sprintf("BUG: GPU %d of %s shared while a whole-GPU run holds it", sh.Index, n.id))
			}
			n.used[i] = true
			taken++
		}
		if sh.Used > 100 || (sh.TotalMB > 0 && sh.MemoryMB > sh.TotalMB) {
			panic(fmt.Sprintf("BUG: GPU %d of %s shared past its whole: %+v", sh.Index, n.id, sh))
		}
	}
	shared = len(out) - len(n.shares)
	n.shares = out // a new slice: snapshots hold the old one
	if taken != 0 {
		n.refree()
	}
	return taken, shared
}

func (n *simNode) refree() {
	free := make([]int, 0, len(n.gpus))
	for i, g := range n.gpus {
		if !n.used[i] {
			free = append(free, g)
		}
	}
	n.free = free
}

// dequeue drops the runs ids from the queue. They are nearly always near
// its front (the store's order is the planner's first key), so only the
// front up to the last of them is moved.
func (e *engine) dequeue(ids map[string]bool) {
	q := e.queue
	n, last := 0, -1
	for i := range q {
		if ids[q[i].ID] {
			last = i
			if n++; n == len(ids) {
				break
			}
		}
	}
	w := last
	for i := last; i >= 0; i-- {
		if !ids[q[i].ID] {
			q[w] = q[i]
			w--
		}
	}
	clear(q[:w+1])
	e.queue = q[w+1:]
}

// release ends s's attempt on its worker: its GPUs or slot free, its
// owner is charged what it ran (the store's Accruing: weight × time).
func (e *engine) release(s *state) {
	n := &e.nodes[s.node]
	delete(n.runs, s)
	n.cpuUsed -= s.job.CPUMillis
	n.memUsed -= s.job.MemoryMB
	switch {
	case s.share > 0:
		taken, shared := n.reshare()
		if n.up {
			e.freeGPUs -= taken
			e.shared += shared
		}
	case len(s.gpus) == 0:
		n.cpuRuns--
		if n.up {
			e.freeSlots++
		}
	default:
		for _, g := range s.gpus {
			n.used[slices.Index(n.gpus, g)] = false
		}
		n.refree()
		if n.up {
			e.freeGPUs += len(s.gpus)
		}
	}
	ran := e.now.Sub(s.start)
	u := &e.users[s.userID-1]
	w := s.job.weight()
	u.charged = core.Decay(u.charged, e.now.Sub(u.asOf), e.cfg.Policy.HalfLife) + w*ran.Seconds()
	u.asOf = e.now
	u.activeH -= s.share + 100*s.job.GPUs
	u.activeRuns--
	u.runW -= w
	u.runWAt -= w * s.start.Sub(e.origin).Seconds()
	e.res.AllocatedGPUSeconds += s.job.gpuCount() * ran.Seconds()
	e.busy(s.start, s.job.gpuCount())
	s.attained += s.job.gpuCount() * ran.Seconds()
	e.running--
	if e.isPreemptible(s) {
		if e.preemptible[s.prio]--; e.preemptible[s.prio] == 0 {
			delete(e.preemptible, s.prio)
		}
	}
	s.node, s.gpus, s.share, s.shareMB = -1, nil, 0, 0
	s.epoch++
}

// busy adds gpus GPUs held from from to now to the buckets it spans.
func (e *engine) busy(from time.Time, gpus float64) {
	if gpus == 0 || e.res.Bucket <= 0 {
		return
	}
	w := e.res.Bucket
	for t := from; t.Before(e.now); {
		i := int(t.Sub(e.origin) / w)
		end := e.origin.Add(time.Duration(i+1) * w)
		if end.After(e.now) {
			end = e.now
		}
		for len(e.res.Busy) <= i {
			e.res.Busy = append(e.res.Busy, 0)
		}
		e.res.Busy[i] += gpus * end.Sub(t).Seconds()
		t = end
	}
}

// stop ends s's attempt early, for a preemption or its worker's fault: it
// keeps the work up to its last checkpoint and is queued again (as the
// master requeues a preempted run, core.Task.Preempt, or a lost one).
func (e *engine) stop(s *state, preempted bool) {
	progress := s.done + e.now.Sub(s.start)
	kept := time.Duration(0)
	if ck := e.cfg.CheckpointEvery; ck > 0 {
		kept = progress / ck * ck
	}
	kept = max(kept, s.done)
	s.res.Lost += progress - kept
	s.done = kept
	e.release(s)
	if preempted {
		s.res.Preemptions++
		s.preempt = e.now
		e.res.Preemptions++
	} else {
		s.res.Faults++
	}
	e.enqueue(s)
}

// preempt is the master's preempter.tick after a pass: the queue's first
// page planned, plan.Waiting's runs served by plan.Preempt over the
// workers' preemptible runs, the victims stopped. It reports whether it
// stopped any.
func (e *engine) preempt() bool {
	if e.cfg.Policy.PreemptCooldown < 0 || len(e.preemptible) == 0 || len(e.queue) == 0 {
		return false
	}
	page := e.queue[:min(plan.Batch, len(e.queue))]
	if !e.anyVictimFor(page) {
		return false
	}
	snap := e.snapshot(page)
	waiting := plan.Waiting(snap, page, plan.Place(snap, page))
	if len(waiting) == 0 {
		return false
	}
	ps := plan.Preempt(plan.PreemptInput{Nodes: e.preemptNodes(), Waiting: waiting, Max: dispatch.MaxPreemptionsPerPass,
		CooldownSince: e.now.Add(-e.cfg.Policy.PreemptCooldown)})
	var victims []*state
	for _, p := range ps {
		for _, id := range p.Victims {
			victims = append(victims, e.running1(p.Worker, id))
		}
	}
	for _, s := range victims {
		if s.node >= 0 {
			e.stop(s, true)
		}
	}
	return len(victims) > 0
}

// anyVictimFor is a shortcut past building the preemption's input: a run
// of page may preempt only runs of a lower priority (plan.Preempt), and
// when no preemptible run has one, there is nothing to ask. (Under
// OrderTiresias a running run's priority falls as it runs: always ask.)
func (e *engine) anyVictimFor(page []core.Task) bool {
	if e.cfg.Policy.Order == OrderTiresias {
		return true
	}
	top := page[0].Priority // the store's order: the highest first
	for p := range e.preemptible {
		if p < top {
			return true
		}
	}
	return false
}

// preemptNodes is the registry's preemptNodes: every connected worker with
// its free GPUs and its preemptible GPU runs.
func (e *engine) preemptNodes() []plan.Node {
	var out []plan.Node
	for i := range e.nodes {
		n := &e.nodes[i]
		if !n.up {
			continue
		}
		pn := plan.Node{ID: n.id, FreeGPUs: len(n.free), FreeCPUMillis: n.cpuMillis - n.cpuUsed, FreeMemoryMB: n.memoryMB - n.memUsed}
		for _, s := range sortedRuns(n) {
			// A share frees no whole GPU: fractional runs are not
			// preempted for whole-GPU runs (the registry's rule).
			if !e.isPreemptible(s) || s.share > 0 {
				continue
			}
			a := plan.Active{ID: s.id, Worker: n.id, GPUs: len(s.gpus), CPUMillis: s.job.CPUMillis, MemoryMB: s.job.MemoryMB,
				Priority: e.priority(s), Preemptible: true,
				StartedAt: s.start, PreemptedAt: s.preempt}
			pn.Runs = append(pn.Runs, a)
		}
		out = append(out, pn)
	}
	return out
}

// finish reports the runs still queued, which nothing would start, with
// the planner's reason, and the work kept.
func (e *engine) finish() *Result {
	if len(e.queue) > 0 {
		why := plan.Plan(e.snapshot(e.queue), e.queue).Waiting
		for i := range e.queue {
			t := &e.queue[i]
			e.skip(t.ID, "never started: "+why[t.ID].Reason)
		}
	}
	for _, j := range e.res.Jobs {
		e.res.UsefulGPUSec += j.GPUs * j.Duration.Seconds()
	}
	return &e.res
}
