package dispatch

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"time"
	"weak"

	"github.com/rlsched/rlsched/core"
)

// explainQueueDepth bounds how much of the queue Explain reads; runs further
// back get no explanation.
const explainQueueDepth = 2000

// explainTTL is how long one explanation of the queue is reused. Listings
// come from every open dashboard; a reason a fraction of a second old is as
// good as a fresh one, and a run the cached answer does not know (just
// submitted) forces a fresh one anyway.
const explainTTL = 250 * time.Millisecond

// explainer caches the last replay of the scheduler; its own mutex, never
// the registry's, guards it, so a slow store read never holds up scheduling.
type explainer struct {
	mu   sync.Mutex
	at   time.Time
	info map[string]core.QueueInfo
}

// explainers holds each Master's cache beside it rather than in it (Master
// belongs to the scheduler's files); a weak key and a cleanup drop the
// entry when its Master is collected.
var explainers sync.Map // weak.Pointer[Master] → *explainer

func (m *Master) explainer() *explainer {
	key := weak.Make(m)
	if e, ok := explainers.Load(key); ok {
		return e.(*explainer)
	}
	e, loaded := explainers.LoadOrStore(key, &explainer{})
	if !loaded {
		runtime.AddCleanup(m, func(k weak.Pointer[Master]) { explainers.Delete(k) }, key)
	}
	return e.(*explainer)
}

// Explain implements httpapi.QueueExplainer: it replays what the scheduler
// will do next (schedule: the store's queue order, best-fit place/take on
// the registry's capacities, backfill, passes of scheduleBatch runs) and
// says, for each queued run, where it stands and why it has not started.
// Only this master's workers are known; with several masters sharing a
// store, a run may start on another master's worker first.
func (m *Master) Explain(ctx context.Context, queued []core.Task) map[string]core.QueueInfo {
	e := m.explainer()
	e.mu.Lock()
	defer e.mu.Unlock()
	fresh := e.info != nil && time.Since(e.at) < explainTTL
	for _, t := range queued {
		if !fresh {
			break
		}
		// A run submitted since the replay needs a new one; an older run
		// it lacks is beyond explainQueueDepth, or no longer queued.
		if _, ok := e.info[t.ID]; !ok && !t.CreatedAt.Before(e.at) {
			fresh = false
		}
	}
	if !fresh {
		queue, err := m.st.QueuedTasks(ctx, explainQueueDepth)
		if err != nil {
			return nil // an explanation is never worth an error
		}
		e.info, e.at = replay(m.fleetNow(), queue), time.Now()
	}
	out := make(map[string]core.QueueInfo, len(queued))
	for _, t := range queued {
		if qi, ok := e.info[t.ID]; ok {
			out[t.ID] = qi
		}
	}
	return out
}

// fleet is what the connected workers have, free or not, when Explain looks.
type fleet struct {
	connected   int
	maxGPUs     int // the most GPUs one connected worker has
	maxSlots    int // the most CPU slots one connected worker has
	largestFree int // the most free GPUs on one connected worker
	freeSlots   int // free CPU slots over all connected workers
	caps        []capacity
	inFlight    map[string]string // queued in the store but already placed: task → worker
}

func (m *Master) fleetNow() fleet {
	m.reg.mu.Lock()
	defer m.reg.mu.Unlock()
	f := fleet{caps: m.reg.capacitiesLocked(), inFlight: map[string]string{}}
	for _, w := range m.reg.workers {
		if w.sess == nil || w.sess.closed.Load() {
			continue
		}
		f.connected++
		f.maxGPUs = max(f.maxGPUs, len(w.gpus))
		f.maxSlots = max(f.maxSlots, w.slots)
	}
	for _, c := range f.caps {
		f.largestFree = max(f.largestFree, len(c.freeGPUs))
		f.freeSlots += max(c.freeSlots, 0)
	}
	for id, rr := range m.reg.runs {
		f.inFlight[id] = rr.workerID
	}
	return f
}

// replay runs the scheduler's placement over queue (in the store's order)
// on f's capacities, which it uses up.
func replay(f fleet, queue []core.Task) map[string]core.QueueInfo {
	out := make(map[string]core.QueueInfo, len(queue))
	var live []*core.Task
	for i := range queue {
		t := &queue[i]
		if w, ok := f.inFlight[t.ID]; ok {
			// Claimed this very pass; the store turns it DISPATCHED next.
			out[t.ID] = core.QueueInfo{Reason: "starting on " + w}
			continue
		}
		live = append(live, t)
	}
	pos := make(map[string]int, len(live))
	for i, t := range live {
		pos[t.ID] = i + 1
	}

	// One scheduler pass reads the first scheduleBatch queued runs and
	// places those that fit (when none fits, the first scheduleDeep); another
	// follows only when it placed some, over the first scheduleBatch runs
	// still queued.
	startsOn := map[string]string{}
	examined := map[string]bool{}
	var placedOrder []*core.Task // runs that start, in the order they take capacity
	caps := f.caps
	rest := live
	pass := func(win []*core.Task) (left []*core.Task, placed int) {
		for _, t := range win {
			examined[t.ID] = true
			w, gpus := place(t.GPUs, caps)
			if w < 0 {
				left = append(left, t)
				continue
			}
			take(caps, w, gpus)
			startsOn[t.ID] = caps[w].workerID
			placedOrder = append(placedOrder, t)
			placed++
		}
		return left, placed
	}
	for len(caps) > 0 && len(rest) > 0 {
		win := rest[:min(scheduleBatch, len(rest))]
		left, placed := pass(win)
		full := len(win) == scheduleBatch
		if placed == 0 && full {
			// As the scheduler does: nothing fits the first page, so it
			// looks scheduleDeep runs deep.
			pass(rest[len(win):min(scheduleDeep, len(rest))])
			break
		}
		rest = append(left, rest[len(win):]...)
		if placed == 0 || !full {
			break
		}
	}

	for _, t := range live {
		qi := core.QueueInfo{Position: pos[t.ID]}
		switch {
		case f.connected == 0:
			qi.Reason = "no worker is connected"
		case t.GPUs > 0 && f.maxGPUs == 0:
			qi.Reason = fmt.Sprintf("needs %d GPU%s, no connected worker has a GPU", t.GPUs, plural(t.GPUs))
		case t.GPUs > f.maxGPUs:
			qi.Reason = fmt.Sprintf("needs %d GPUs, no worker has that many (the largest has %d)", t.GPUs, f.maxGPUs)
		case t.GPUs == 0 && f.maxSlots == 0:
			qi.Reason = "no connected worker has CPU slots; it needs one"
		case startsOn[t.ID] != "":
			qi.Reason = "starting on " + startsOn[t.ID]
		case t.GPUs > 0 && f.largestFree == 0:
			qi.Reason = fmt.Sprintf("needs %d GPU%s, every GPU is busy", t.GPUs, plural(t.GPUs))
		case t.GPUs > f.largestFree:
			qi.Reason = fmt.Sprintf("needs %d GPUs, the largest free block is %d", t.GPUs, f.largestFree)
		case t.GPUs == 0 && f.freeSlots == 0:
			qi.Reason = "needs a CPU slot, every slot is busy"
		case !examined[t.ID]:
			qi.Reason = fmt.Sprintf("waiting behind %d queued runs the scheduler looks at first", pos[t.ID]-1)
		default:
			// It would fit what is free now, but runs ahead of it take it first.
			qi.Reason = behind(t, placedOrder, pos)
		}
		out[t.ID] = qi
	}
	return out
}

// behind says which runs ahead of t take the resources t would fit in.
func behind(t *core.Task, placed []*core.Task, pos map[string]int) string {
	n, higher := 0, 0
	for _, p := range placed {
		if pos[p.ID] >= pos[t.ID] || (t.GPUs == 0) != (p.GPUs == 0) {
			continue
		}
		n++
		if p.Priority > t.Priority {
			higher++
		}
	}
	what := "free GPUs"
	if t.GPUs == 0 {
		what = "free CPU slots"
	}
	kind := "earlier"
	switch {
	case n == 0:
		return "waiting for " + what
	case higher == n:
		kind = "higher-priority"
	case higher == 0:
		kind = "older"
	}
	verb := "take"
	if n == 1 {
		verb = "takes"
	}
	return fmt.Sprintf("waiting behind %d %s run%s that %s the %s", n, kind, plural(n), verb, what)
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}
