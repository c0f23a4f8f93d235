package dispatch

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/rlsched/rlsched/core"
	"github.com/rlsched/rlsched/dispatch/plan"
	"github.com/rlsched/rlsched/internal/obs"
	"github.com/rlsched/rlsched/lease"
	"github.com/rlsched/rlsched/store"
)

// scheduler is the scheduler loop and the executor of its plans
// (execute.go): it owns its page of the queue (queuePage) and its wake
// channel, and takes the planner's inputs, plan.Place's placements, the
// leases and the store writes that carry them out. It never decides a
// placement (package plan does) and never blocks a caller that wakes it:
// notify, queued and wakeUp are safe from any goroutine and never block;
// run and all else run on the scheduler's own goroutine.
type scheduler struct {
	st      schedStore
	ls      lease.Leases
	reg     *registry
	inputs  *planInputs
	preempt *preempter // on the loop's tick
	restore *restorer  // a resumed attempt's restore list, for its ExecuteTask
	// joinToken derives each ExecuteTask's run_token (codec.RunToken).
	joinToken []byte
	hold      func() time.Duration // the lease hold (Dispatcher.leaseHold)
	now       func() time.Time
	// changed reports a worker's new view; resendCancel tells a run's
	// worker to stop it if its cancel was requested. Neither blocks.
	changed      func(workerID string)
	resendCancel func(rr *runRec)
	metrics      *obs.MasterMetrics
	log          zerolog.Logger

	wake  chan struct{}
	queue queuePage
}

// schedStore is what the scheduler reads and writes of the store.
type schedStore interface {
	queueReader
	UpdateTasks(ctx context.Context, us []store.Update) []error
}

// notify says the queue may have changed (Dispatcher.Notify).
func (s *scheduler) notify() {
	s.queue.changed.Add(1)
	s.wakeUp()
}

// queued takes a run just stored QUEUED into the page (Dispatcher.Queued).
func (s *scheduler) queued(t core.Task) {
	if t.Waiting {
		return // not in the queue until released (package depctl)
	}
	s.queue.add(t)
	s.wakeUp()
}

// wakeUp wakes the scheduler for capacity that freed (a run ended, a
// worker joined or came back): its next pass may place runs of the page it
// holds without reading the queue again.
func (s *scheduler) wakeUp() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// run places queued runs whenever woken (a submission, a worker joining, a
// run ending) and once a second as a safety net.
func (s *scheduler) run(ctx context.Context) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.wake:
		case <-tick.C:
			s.preempt.tick(ctx) // preempt.go
		}
		for s.schedule(ctx) {
		}
	}
}

// schedule runs one pass: it reads a page of the queue, has plan.Place place
// it on a snapshot of the registry, and executes the placements (execute.go).
// It reports whether another pass may place more (plan.PassAgain).
//
// The snapshot is taken only when there is both a free resource somewhere
// and a queued run: every joining worker wakes the scheduler, and building
// it for 15,000 workers at each of those wakes, under the registry lock
// that every Hello also takes, was what made a reconnect storm slow.
func (s *scheduler) schedule(ctx context.Context) bool {
	start := time.Now()
	if !s.reg.anyFree() {
		return false
	}
	// Wall time, not the dispatcher's clock: the page is a cache of the
	// store, and on a clock that stands still (tests) it must still expire.
	tasks, read, err := s.queue.page(ctx, s.st, time.Now())
	if err != nil {
		if ctx.Err() == nil {
			s.log.Error().Err(err).Msg("cannot read the queue")
		}
		return false
	}
	if len(tasks) == 0 {
		return false
	}
	snap := s.reg.snapshot(tasks)
	if len(snap.Free) == 0 {
		return false
	}
	if err := s.inputs.complete(ctx, &snap, tasks); err != nil {
		if ctx.Err() == nil {
			s.log.Error().Err(err).Msg("cannot plan the queue")
		}
		return false
	}
	placements := plan.Place(snap, tasks)
	if plan.LookDeeper(len(placements), read) {
		deep, err := s.st.QueuedTasks(ctx, plan.Deep)
		if err != nil {
			if ctx.Err() == nil {
				s.log.Error().Err(err).Msg("cannot read the queue")
			}
			return false
		}
		if len(deep) > len(tasks) {
			snap.InFlight = s.reg.inFlight(deep)
			if snap.Sweeps, err = s.inputs.sweepLimits(ctx, deep); err != nil {
				if ctx.Err() == nil {
					s.log.Error().Err(err).Msg("cannot read the limits of sweeps")
				}
				return false
			}
			placements = plan.Place(snap, deep)
		}
	}
	done := s.execute(ctx, placements, snap.Users)
	s.queue.taken(done)
	s.metrics.SchedulerPass(time.Since(start)) // passes that planned: the others cost nothing
	placed := 0
	for _, ok := range done {
		if ok {
			placed++
		}
	}
	return plan.PassAgain(placed, read)
}

// pageTTL bounds how long the page of the queue one pass read serves the
// passes after it.
const pageTTL = time.Second

// queuePage is the page of the queue the last pass read, less the runs
// passes placed since, plus the runs this master's REST API created since
// (scheduler.queued). A pass places from it instead of reading the queue
// again: with real workers each freed slot woke a pass that read and
// decoded 256 queued runs to place one (58% of the master's CPU in
// dispatch-proc), and on MySQL that read took 10 ms a pass at 1,000
// submissions/s, most of a run's submit-to-start. It is read again when
// the queue may have changed otherwise (scheduler.notify: a run requeued or
// reprioritised, a sweep, another master's run), when half of it was
// placed, and after pageTTL. A run of it that left the queue some other
// way is refused by its claim or its fenced DISPATCHED write, as when two
// masters race for it. "Half placed" applies to a full page (plan.Batch
// runs: the queue may hold more, which a page half gone would hide); a
// shorter page held the whole queue, and with the inbox still does.
type queuePage struct {
	changed atomic.Uint64 // bumped by scheduler.notify
	mu      sync.Mutex
	inbox   []core.Task // runs scheduler.queued took since the last pass

	// Only the scheduler's goroutine touches the rest.
	runs  []core.Task     // in the store's order (core.QueueBefore)
	read  int             // runs the read returned (plan.Batch: the queue may hold more)
	last  core.Task       // the read's last run, when read == plan.Batch
	gone  map[string]bool // placed or found gone since the read
	gen   uint64
	at    time.Time
	valid bool
}

// add takes a run just created QUEUED into the page at its next use. The
// inbox holds at most plan.Batch runs: no pass drains it while nothing is
// free, and a master taking submissions with every GPU busy kept each
// one's Task here (52 MB of the 413 MiB at the rest-submit scenario's
// end). Past that the page is marked changed instead, so the next pass
// reads the queue, which has every run of the inbox and those after.
func (q *queuePage) add(t core.Task) {
	q.mu.Lock()
	if len(q.inbox) < plan.Batch {
		q.inbox = append(q.inbox, t)
	} else {
		clear(q.inbox)
		q.inbox = q.inbox[:0]
		q.changed.Add(1)
	}
	q.mu.Unlock()
}

// page returns the runs to plan and how many the read returned. The slice
// is the page itself: it is valid until the pass's taken.
func (q *queuePage) page(ctx context.Context, st queueReader, now time.Time) ([]core.Task, int, error) {
	gen := q.changed.Load()
	q.mu.Lock()
	in := q.inbox
	q.inbox = nil
	q.mu.Unlock()
	// Half placed matters only for a full page: one that held the whole
	// queue still does, with the inbox.
	half := q.read == plan.Batch && 2*len(q.runs) < q.read
	if q.valid && gen == q.gen && now.Sub(q.at) < pageTTL && !now.Before(q.at) && !half {
		for _, t := range in {
			q.merge(t)
		}
		return q.runs, q.read, nil
	}
	// The runs of the inbox were stored before they were added: the read
	// has them.
	q.valid = false
	runs, err := st.QueuedTasks(ctx, plan.Batch)
	if err != nil {
		return nil, 0, err
	}
	q.runs, q.read, q.gen, q.at, q.valid = runs, len(runs), gen, now, true
	q.gone = map[string]bool{}
	if len(runs) == plan.Batch {
		q.last = runs[len(runs)-1]
	}
	return runs, len(runs), nil
}

// merge puts t at its place in the page, unless it is there already, was
// placed or found gone since the read (its add came late), or falls beyond
// a full page (the queue holds runs before it that the page lacks: a
// later read finds it).
func (q *queuePage) merge(t core.Task) {
	if q.gone[t.ID] || (q.read == plan.Batch && core.QueueBefore(&q.last, &t)) {
		return
	}
	at := len(q.runs)
	for i := range q.runs {
		if q.runs[i].ID == t.ID {
			return
		}
		if at == len(q.runs) && core.QueueBefore(&t, &q.runs[i]) {
			at = i
		}
	}
	q.runs = slices.Insert(q.runs, at, t)
}

// taken drops the runs a pass placed, or found gone from the queue. They
// are nearly always near the front of the page (the store's order is the
// planner's first key), so only the front up to the last of them is
// shifted: copying the whole page of runs at every pass was 12% of the
// master's CPU with real workers.
func (q *queuePage) taken(ids map[string]bool) {
	if len(ids) == 0 || !q.valid {
		return
	}
	for id := range ids {
		q.gone[id] = true
	}
	n, last := 0, -1
	for i := range q.runs {
		if _, done := ids[q.runs[i].ID]; done {
			last = i
			if n++; n == len(ids) {
				break
			}
		}
	}
	w := last // the kept runs of [0, last] move right, over the dropped ones
	for i := last; i >= 0; i-- {
		if _, done := ids[q.runs[i].ID]; !done {
			q.runs[w] = q.runs[i]
			w--
		}
	}
	clear(q.runs[:w+1]) // no dropped run kept alive by the array
	q.runs = q.runs[w+1:]
}
