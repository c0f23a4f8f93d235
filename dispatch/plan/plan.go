// Package plan decides where queued runs start and why the others wait. It
// is every placement rule of the master in one place: a run only where its
// GPUs, cores and memory all fit, best-fit GPUs, CPU runs to the machines
// without free GPUs first and then the most free slots, backfill past a run
// that does not fit, how deep the scheduler looks, and the reason (with a
// code) given for each run left queued. The scheduler executes what Plan returns; Explain shows it;
// preemption serves only the runs Held does not hold back.
// A new placement rule (quota, foreign GPUs, sweep limits, ...) goes here.
//
// Plan is a pure function of its arguments: this package never locks,
// reads a clock, does I/O or keeps state, and it imports only core. The
// caller takes the snapshot and does the side effects (package dispatch).
package plan

import (
	"fmt"
	"slices"
	"sort"
	"time"

	"github.com/rlsched/rlsched/core"
)

// Batch is how many queued runs one scheduler pass reads. When none of them
// fits what is free, the pass looks Deep runs deep instead, so a head of
// the queue that fits nowhere now (say 256 runs wanting 8 GPUs on 4-GPU
// machines) cannot starve a run further back that would fit.
const (
	Batch = 256
	Deep  = 4096
)

// Codes of a waiting run's reason (API.md, "Scheduling policy": pendingCode).
// A run about to start has no code.
const (
	CodeResources = "resources" // no worker has that much free now
	CodeNoWorker  = "no_worker" // no connected worker could ever fit it
	CodePriority  = "priority"  // runs ahead of it take what it would fit in
	CodeCPU       = "cpu"       // its GPUs would fit, not its cores
	CodeMemory    = "memory"    // its GPUs and cores would fit, not its memory
)

// Unlimited is the free cores or memory of a worker that reports none (an
// older worker, Hello's 0): whatever a run asks for fits. It is far from
// the int64 limit, so sums and differences of it cannot overflow.
const Unlimited int64 = 1 << 60

// Worker is a connected worker with something free.
type Worker struct {
	ID        string
	FreeGPUs  []int // indices, handed out from the front
	FreeSlots int
	// ForeignGPUs are its GPUs with a process rlsched did not start: given
	// to no new run (the gpu_foreign rule, foreign.go).
	ForeignGPUs []int
	GPUs        int // all its GPUs, free or not (backfill reservations, reserve.go)
	// FreeCPUMillis (thousandths of a core) and FreeMemoryMB are what its
	// runs leave of what it offers, CPUMillis and MemoryMB all it offers
	// (a reservation's "enough in all", reserve.go); Unlimited when it
	// reports none.
	FreeCPUMillis, FreeMemoryMB int64
	CPUMillis, MemoryMB         int64
	// Shares are its GPUs that fractional runs hold part of, out of
	// FreeGPUs (share.go); Models its GPUs' names and memory (gpuType,
	// gpuMemoryMb; nil: not known); Labels its labels (constraints).
	// The planner never writes into them.
	Shares []Share
	Models []core.GPU
	Labels map[string]string
	// Containers: it has a container runtime (Hello.runtimes), so it may
	// run a run's image (issue 27).
	Containers bool
}

// Size is what a connected worker offers in all, free or not: what the
// no_worker reason compares a run with.
type Size struct {
	GPUs, Slots         int
	CPUMillis, MemoryMB int64 // Unlimited when not reported
}

// fits reports whether w has cpu thousandths of a core and mem MiB free.
func (w *Worker) fits(cpu, mem int64) bool { return w.FreeCPUMillis >= cpu && w.FreeMemoryMB >= mem }

// need is what t asks of a worker's cores (thousandths) and memory (MiB).
func need(t *core.Task) (cpu, mem int64) { return max(core.CPUMillis(t.CPUs), 0), max(t.MemoryMB, 0) }

// Snapshot is what Plan sees of the master: read-only, taken by the caller
// at one instant.
type Snapshot struct {
	// Free lists the connected workers with anything free, sorted by ID
	// (placement among equals goes to the first).
	Free []Worker
	// Connected counts the connected workers, free or not; MaxGPUs and
	// MaxSlots are the most GPUs and CPU slots one of them has.
	Connected, MaxGPUs, MaxSlots int
	// Sizes are the distinct sizes of the connected workers (any order);
	// nil: the reasons compare only GPUs and slots (MaxGPUs, MaxSlots).
	Sizes []Size
	// Machines are the connected workers' labels and GPUs, what the
	// reasons compare a run's gpuType, gpuMemoryMb and constraints with
	// (share.go); nil: those never make a run no_worker.
	Machines []Machine
	// InFlight holds the runs of the queue that are already placed on a
	// worker (claimed, not yet recorded as DISPATCHED): task id → worker.
	InFlight map[string]string
	// Sweeps holds the capped sweeps the queue's runs are members of, by
	// id (the sweep_limit rule, sweeplimit.go).
	Sweeps map[string]core.SweepLimit
	// Users holds the owners of the queue's runs by user id: their usage
	// orders the queue (fair share, fairshare.go), their quotas cap what
	// they start (quota.go). Nil: the store's order, no quotas.
	Users map[int64]User
	// ReserveBefore: a GPU run QUEUED (UpdatedAt) before it that fits
	// nowhere holds the worker where it fits best (reserve.go); zero: no
	// reservations. The caller sets it to now − BACKFILL_RESERVE_SECONDS.
	ReserveBefore time.Time
	// SessionsFirst (INTERACTIVE_PREEMPTS, issue 34): interactive runs
	// come before batch runs of their priority (fairshare.go), so the GPUs
	// a session preempts a batch run of its own priority for are its, not
	// the requeued victim's.
	SessionsFirst bool
	// NoGroups: the caller cannot start a multi-node group's members (the
	// simulator, which does not model them; the master does, issue 29), so
	// groups wait, no_worker, rather than start as one member.
	NoGroups bool
}

// Placement is a run to start: on Worker, with GPUs (empty: a CPU slot;
// a fractional run's one GPU, shared), and for a fractional run the MiB of
// that GPU's memory it gets (GPUMemoryMB; 0: not known).
type Placement struct {
	Task        *core.Task // points into the queue given to Plan
	Worker      string
	GPUs        []int
	GPUMemoryMB int64
	// Members are a multi-node group's members in rank order (group.go;
	// nil for a run on one worker): Worker and GPUs are rank 0's.
	Members []Member
}

// Result of Plan.
type Result struct {
	// Placements in the order they take capacity, which is their order in
	// the queue.
	Placements []Placement
	// Waiting explains every run of the queue: its position among the runs
	// not in flight (1 = served next; 0 for a run in flight), and why it has
	// not started. Placed runs are explained "starting on <worker>".
	Waiting map[string]core.QueueInfo
}

// LookDeeper reports whether a pass that read read runs (Batch at most) and
// placed placed of them reads Deep runs instead: nothing fitted a full page.
func LookDeeper(placed, read int) bool { return placed == 0 && read == Batch }

// PassAgain reports whether a pass that read read runs and placed placed of
// them is followed by another: it placed some and the page was full, so the
// queue may hold more that fit.
func PassAgain(placed, read int) bool { return placed > 0 && read == Batch }

// Plan places the runs of queue (in the store's order: priority, then age;
// ordered again by fair share when s has Users) on s, as the scheduler's
// passes will: each pass reads the first Batch runs
// still queued and places every one that fits what is free (GPU runs
// best-fit, CPU runs to the most free slots), skipping those that do not
// (backfill); when none fits, it looks Deep runs deep (LookDeeper); another
// pass follows while PassAgain. It explains every run. s is not changed.
//
// Explain gives Plan a long stretch of the queue and gets every pass's
// placements; the scheduler calls Place with the page it read.
func Plan(s Snapshot, queue []core.Task) Result { return plan(s, queue, true) }

// Place is Plan without the reasons, for the scheduler: the placements of
// the runs it read.
func Place(s Snapshot, queue []core.Task) []Placement { return plan(s, queue, false).Placements }

func plan(s Snapshot, queue []core.Task, explain bool) Result {
	var res Result
	if explain {
		res.Waiting = make(map[string]core.QueueInfo, len(queue))
	}
	live := make([]*core.Task, 0, len(queue)) // the runs not in flight; a run's position is its index + 1
	for i := range queue {
		t := &queue[i]
		if w, ok := s.InFlight[t.ID]; ok {
			if explain {
				res.Waiting[t.ID] = core.QueueInfo{Reason: "starting on " + w}
			}
			continue
		}
		live = append(live, t)
	}
	fairOrder(s, live)

	var foreign foreignRule
	s.Free, foreign = withoutForeign(s.Free) // a copy: the reasons read it as the pass found it
	free := append([]Worker(nil), s.Free...) // taken from as runs are placed
	on := make([]string, len(live))          // the worker a live run starts on
	examined := make([]bool, len(live))
	var placed []int // indices into live, in the order of placement
	gate := newSweepGate(s, queue)
	quota := newQuotaGate(s, queue)
	resv := newReserver(&s)
	ix := newFreeIndex(free)
	pass := func(win []int) (n int) {
		for _, i := range win {
			t := live[i]
			examined[i] = true
			if gate.full(t) || quota.full(t) {
				continue
			}
			if t.IsGroup() {
				if s.NoGroups {
					continue
				}
				ws, gpus := placeGroup(t, free)
				if ws == nil {
					if resv.due(t) {
						resv.reserveGroup(t, free, ix)
					}
					continue // all members or none; smaller runs behind it may fit
				}
				members := make([]Member, len(ws))
				for k, w := range ws {
					take(free, w, t, gpus[k], ix)
					members[k] = Member{Worker: free[w].ID, GPUs: gpus[k]}
				}
				gate.take(t)
				quota.take(t)
				on[i] = members[0].Worker
				placed = append(placed, i)
				res.Placements = append(res.Placements, Placement{Task: t, Worker: members[0].Worker, GPUs: gpus[0], Members: members})
				n++
				continue
			}
			if t.Fractional() {
				w, g, mb := placeShare(t, free, ix)
				if w < 0 {
					continue // does not fit now; others behind it may
				}
				takeShare(free, w, t, g, mb, ix)
				gate.take(t)
				quota.take(t)
				on[i] = free[w].ID
				placed = append(placed, i)
				res.Placements = append(res.Placements, Placement{Task: t, Worker: free[w].ID, GPUs: []int{g}, GPUMemoryMB: mb})
				n++
				continue
			}
			w, gpus := place(t, free, ix)
			if w < 0 {
				resv.missed(t)
				if resv.due(t) {
					resv.reserve(t, free, ix)
				}
				continue // does not fit now; smaller runs behind it may
			}
			take(free, w, t, gpus, ix)
			gate.take(t)
			quota.take(t)
			on[i] = free[w].ID
			placed = append(placed, i)
			res.Placements = append(res.Placements, Placement{Task: t, Worker: free[w].ID, GPUs: gpus})
			n++
		}
		return n
	}
	rest := make([]int, len(live))
	for i := range rest {
		rest[i] = i
	}
	for len(rest) > 0 {
		win := rest[:min(Batch, len(rest))]
		n := pass(win)
		if LookDeeper(n, len(win)) {
			n = pass(rest[len(win):min(Deep, len(rest))])
		}
		if !PassAgain(n, len(win)) {
			break
		}
		left := rest[:0] // in place: rest is read ahead of where left writes
		for _, i := range rest {
			if on[i] == "" {
				left = append(left, i)
			}
		}
		rest = left
	}

	if explain {
		f := fleetOf(s)
		ah := aheadOf(live, placed)
		for i, t := range live {
			code, why := reason(i, live, f, on[i], examined[i], ah)
			if on[i] == "" && gate.full(t) {
				code, why = CodeSweepLimit, gate.reason(t)
			}
			if on[i] == "" && code != CodeNoWorker && quota.full(t) {
				code, why = CodeQuota, quota.reason(t)
			} else if c, w, ok := resv.reason(t); ok && on[i] == "" {
				code, why = c, w
			} else if on[i] == "" && code == CodeResources && examined[i] && t.Fractional() {
				code, why = shareReason(t, free)
			} else if on[i] == "" && (code == CodeResources || code == CodePriority) && examined[i] && picky(t) && t.GPUs > 0 {
				code, why = CodeResources, fmt.Sprintf("needs %d GPU%s of the type, memory or labels it asks for; none are free now",
					t.GPUs, plural(t.GPUs))
			} else if code == CodeResources || code == CodePriority {
				if msg, ok := foreign.blocks(t.GPUs, free); ok && on[i] == "" {
					code, why = CodeGPUForeign, msg
				}
			}
			if on[i] == "" && t.IsGroup() && code != CodeSweepLimit && code != CodeQuota {
				switch _, _, held := resv.reason(t); {
				case s.NoGroups:
					code, why = CodeNoWorker, "needs several workers at once, and this scheduler does not run multi-node groups"
				case !held:
					code, why = groupReason(t, s, free)
				}
			}
			res.Waiting[t.ID] = core.QueueInfo{Position: i + 1, Reason: why, Code: code}
		}
	}
	return res
}

// place picks a worker among free for t: one where its GPUs (none: a CPU
// slot), its cores and its memory all fit. GPU runs go best-fit, to the
// worker with the fewest free GPUs that still fit, so large runs find
// whole machines later; CPU runs go to a worker without free GPUs first,
// keeping the GPU machines' cores for GPU runs, then to the one with the
// most free slots. It returns the index into free and the GPU indices
// taken, or -1. ix indexes free (freeIndex).
func place(t *core.Task, free []Worker, ix *freeIndex) (int, []int) {
	cpu, mem := need(t)
	if t.GPUs > 0 && picky(t) {
		return placeWhole(t, free, ix)
	}
	if t.GPUs > 0 {
		best := ix.bestFit(t.GPUs, func(i int) bool { return free[i].fits(cpu, mem) })
		if best < 0 {
			return -1, nil
		}
		return best, append([]int(nil), free[best].FreeGPUs[:t.GPUs]...)
	}
	if ix.slots <= 0 {
		return -1, nil
	}
	best := -1
	for i := range free {
		c := &free[i]
		if c.FreeSlots <= 0 || !c.admits(t, cpu, mem) {
			continue
		}
		if best < 0 {
			best = i
			continue
		}
		b := &free[best]
		if gpuFree, bGPUFree := len(c.FreeGPUs) > 0, len(b.FreeGPUs) > 0; gpuFree != bGPUFree {
			if !gpuFree {
				best = i
			}
			continue
		}
		if c.FreeSlots > b.FreeSlots {
			best = i
		}
	}
	return best, nil
}

// take removes what t's placement used from free[i], and from ix (nil: a
// free list no plan indexes). It reslices, never writes into, the
// snapshot's GPU lists.
func take(free []Worker, i int, t *core.Task, gpus []int, ix *freeIndex) {
	n := len(free[i].FreeGPUs)
	switch {
	case len(gpus) == 0:
		free[i].FreeSlots--
	case len(gpus) <= n && slices.Equal(free[i].FreeGPUs[:len(gpus)], gpus):
		free[i].FreeGPUs = free[i].FreeGPUs[len(gpus):]
	default: // GPUs of a type picked from the list: a new list without them
		kept := make([]int, 0, n-len(gpus))
		for _, g := range free[i].FreeGPUs {
			if !slices.Contains(gpus, g) {
				kept = append(kept, g)
			}
		}
		free[i].FreeGPUs = kept
	}
	cpu, mem := need(t)
	free[i].FreeCPUMillis -= cpu
	free[i].FreeMemoryMB -= mem
	if ix != nil {
		ix.took(i, n, len(gpus))
	}
}

// fleet is what the reasons compare a run with.
type fleet struct {
	connected, maxGPUs, maxSlots int
	largestFree                  int // the most free GPUs on one worker
	freeSlots                    int // free CPU slots over all workers
	sizes                        []Size
	machines                     []Machine
	// freeCPU[k] and freeMem[k] are the most free cores and memory on one
	// worker with at least k free GPUs (k = 0: with a free slot).
	freeCPU, freeMem []int64
}

func fleetOf(s Snapshot) fleet {
	f := fleet{connected: s.Connected, maxGPUs: s.MaxGPUs, maxSlots: s.MaxSlots, sizes: s.Sizes, machines: s.Machines}
	for _, w := range s.Free {
		f.largestFree = max(f.largestFree, len(w.FreeGPUs))
		f.freeSlots += max(w.FreeSlots, 0)
	}
	f.freeCPU, f.freeMem = make([]int64, f.largestFree+1), make([]int64, f.largestFree+1)
	for _, w := range s.Free {
		if k := len(w.FreeGPUs); k > 0 {
			f.freeCPU[k], f.freeMem[k] = max(f.freeCPU[k], w.FreeCPUMillis), max(f.freeMem[k], w.FreeMemoryMB)
		}
	}
	for k := f.largestFree - 1; k > 0; k-- {
		f.freeCPU[k], f.freeMem[k] = max(f.freeCPU[k], f.freeCPU[k+1]), max(f.freeMem[k], f.freeMem[k+1])
	}
	for _, w := range s.Free {
		if w.FreeSlots > 0 {
			f.freeCPU[0], f.freeMem[0] = max(f.freeCPU[0], w.FreeCPUMillis), max(f.freeMem[0], w.FreeMemoryMB)
		}
	}
	return f
}

// reason says why live[i] has not started: first what can never fit it on
// the connected workers, then what is not free now, then the runs ahead of
// it (ah).
func reason(i int, live []*core.Task, f fleet, startsOn string, examined bool, ah ahead) (code, why string) {
	t := live[i]
	switch {
	case f.connected == 0:
		return CodeNoWorker, "no worker is connected"
	case t.UsesGPU() && f.maxGPUs == 0:
		return CodeNoWorker, fmt.Sprintf("needs %s, no connected worker has a GPU", core.FormatGPUs(t.GPUCount()))
	case t.GPUs > f.maxGPUs:
		return CodeNoWorker, fmt.Sprintf("needs %d GPUs, no worker has that many (the largest has %d)", t.GPUs, f.maxGPUs)
	case !t.UsesGPU() && f.maxSlots == 0:
		return CodeNoWorker, "no connected worker has CPU slots; it needs one"
	}
	if startsOn != "" {
		return "", "starting on " + startsOn
	}
	if code, why, ok := neverMatches(t, f.machines); ok {
		return code, why
	}
	if code, why, ok := f.neverFits(t); ok {
		return code, why
	}
	if t.Fractional() {
		if !examined {
			return CodePriority, fmt.Sprintf("waiting behind %d queued runs the scheduler looks at first", i)
		}
		return CodeResources, "" // share.go's shareReason says what
	}
	switch {
	case t.GPUs > 0 && f.largestFree == 0:
		return CodeResources, fmt.Sprintf("needs %d GPU%s, every GPU is busy", t.GPUs, plural(t.GPUs))
	case t.GPUs > f.largestFree:
		return CodeResources, fmt.Sprintf("needs %d GPUs, the largest free block is %d", t.GPUs, f.largestFree)
	case t.GPUs == 0 && f.freeSlots == 0:
		return CodeResources, "needs a CPU slot, every slot is busy"
	}
	if code, why, ok := f.short(t); ok {
		return code, why
	}
	if !examined {
		return CodePriority, fmt.Sprintf("waiting behind %d queued runs the scheduler looks at first", i)
	}
	// It would fit what is free now, but runs ahead of it take it first.
	return behind(t, ah.n[i], ah.higher[i])
}

// ahead is, for each live run, how many runs ahead of it that were placed
// are of its kind (GPU or CPU runs), and how many of those have a higher
// priority: what behind says. Counted in one sweep (a Fenwick tree over
// the placed runs' priorities) rather than per run over every placement,
// which was a quarter of a 100,000-run plan.
type ahead struct{ n, higher []int }

func aheadOf(live []*core.Task, placed []int) ahead {
	ah := ahead{n: make([]int, len(live)), higher: make([]int, len(live))}
	if len(placed) == 0 {
		return ah
	}
	isPlaced := make([]bool, len(live))
	prios := make([]int, 0, len(placed))
	for _, j := range placed {
		isPlaced[j] = true
		prios = append(prios, live[j].Priority)
	}
	slices.Sort(prios)
	prios = slices.Compact(prios)
	// tree[k] counts the placed runs seen so far of kind k (0: GPU, 1:
	// CPU) by priority rank, 1-based; total[k] all of them.
	var tree [2][]int
	tree[0], tree[1] = make([]int, len(prios)+1), make([]int, len(prios)+1)
	var total [2]int
	kind := func(t *core.Task) int {
		if t.GPUs == 0 {
			return 1
		}
		return 0
	}
	for i, t := range live {
		k := kind(t)
		// Placed runs of kind k ahead of t with priority <= t's.
		r, atMost := sort.SearchInts(prios, t.Priority+1), 0
		for ; r > 0; r -= r & -r {
			atMost += tree[k][r]
		}
		ah.n[i], ah.higher[i] = total[k], total[k]-atMost
		if isPlaced[i] {
			total[k]++
			for r := sort.SearchInts(prios, t.Priority) + 1; r < len(tree[k]); r += r & -r {
				tree[k][r]++
			}
		}
	}
	return ah
}

// behind says which runs ahead of t take the resources it would fit in:
// n of its kind, higher of them of a higher priority.
func behind(t *core.Task, n, higher int) (code, why string) {
	what := "free GPUs"
	if t.GPUs == 0 {
		what = "free CPU slots"
	}
	kind := "earlier"
	switch {
	case n == 0:
		return CodeResources, "waiting for " + what
	case higher == n:
		kind = "higher-priority"
	case higher == 0:
		kind = "older"
	}
	verb := "take"
	if n == 1 {
		verb = "takes"
	}
	return CodePriority, fmt.Sprintf("waiting behind %d %s run%s that %s the %s", n, kind, plural(n), verb, what)
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}
