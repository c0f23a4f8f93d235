package store

import (
	"context"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rlsched/rlsched/core"
)

// DefaultMaxBatch bounds the rows of one group commit.
const DefaultMaxBatch = 512

// batchTimeout bounds one group commit. A batch carries many callers'
// rows, so it runs under its own context, not any one caller's.
const batchTimeout = 30 * time.Second

// TaskWriter is a Store that can insert runs and apply fenced updates in
// one transaction. The Batcher then commits the creates and updates that
// wait at the same time together: one durable commit (one fsync on
// SQLite) instead of two, and no second committer waiting for the store's
// only writer connection.
type TaskWriter interface {
	// WriteTasks is CreateTasks(creates) then UpdateTasks(updates), in
	// one transaction: cerrs and uerrs are as those would return them,
	// and an error of the transaction itself is every row's error.
	WriteTasks(ctx context.Context, creates []*core.Task, updates []Update) (cerrs, uerrs []error)
}

// Batcher is a Store whose CreateTask, UpdateTask and UpdateTasks are
// group-committed: concurrent calls are coalesced into one CreateTasks /
// UpdateTasks (one transaction, one durable commit) of at most MaxBatch
// rows (a larger UpdateTasks goes alone, still in one transaction). While a
// batch commits, the next one forms from the calls that arrive meanwhile,
// so a lone caller pays one commit and a crowd shares them. Each caller
// blocks until its own rows' results, which are exactly what the direct
// call would have returned. When the store is a TaskWriter, creates and
// updates share the batches; otherwise each has its own (on a store with
// many connections they commit in parallel). Everything else passes
// through to the wrapped store (CreateTasks too: it is already a batch).
//
// A caller whose context ends while its rows still wait for a batch gets
// ctx.Err() and its rows are never written; once they are in a committing
// batch the caller waits for the outcome.
//
// On a store with many connections (not a TaskWriter), updates that all
// leave QUEUED (the scheduler's dispatches) have a lane of their own: a
// run's start is what its submitter waits for, and behind a batch of the
// workers' reports it waited for that whole commit first. With a
// TaskWriter (SQLite's one writer connection) a second lane would only
// split the group commits.
//
// Every method is safe for concurrent use: concurrent callers are what it
// batches.
type Batcher struct {
	Store
	creates    *batchQueue[batchRow] // the same queue as updates with a TaskWriter
	updates    *batchQueue[batchRow]
	dispatches *batchQueue[batchRow] // the same queue as updates with a TaskWriter
}

// batchRow is one create (task set) or update of a batch.
type batchRow struct {
	create *core.Task
	update Update
}

// NewBatcher wraps st. maxBatch ≤ 0 means DefaultMaxBatch.
func NewBatcher(st Store, maxBatch int) *Batcher {
	if maxBatch <= 0 {
		maxBatch = DefaultMaxBatch
	}
	b := &Batcher{Store: st}
	if tw, ok := st.(TaskWriter); ok {
		q := &batchQueue[batchRow]{max: maxBatch, commit: func(ctx context.Context, rows []batchRow) []error {
			return writeMixed(ctx, tw, rows)
		}}
		b.creates, b.updates, b.dispatches = q, q, q
		return b
	}
	b.creates = &batchQueue[batchRow]{max: maxBatch, commit: func(ctx context.Context, rows []batchRow) []error {
		ts := make([]*core.Task, len(rows))
		for i, r := range rows {
			ts[i] = r.create
		}
		return st.CreateTasks(ctx, ts)
	}}
	update := func(ctx context.Context, rows []batchRow) []error {
		us := make([]Update, len(rows))
		for i, r := range rows {
			us[i] = r.update
		}
		return st.UpdateTasks(ctx, us)
	}
	b.updates = &batchQueue[batchRow]{max: maxBatch, commit: update}
	b.dispatches = &batchQueue[batchRow]{max: maxBatch, commit: update}
	return b
}

// laneOf is the queue of updates us: the dispatch lane when every one
// leaves QUEUED.
func (b *Batcher) laneOf(us ...Update) *batchQueue[batchRow] {
	for _, u := range us {
		if u.Expect.Status != core.StatusQueued {
			return b.updates
		}
	}
	return b.dispatches
}

// writeMixed commits rows, creates and updates, in one WriteTasks. Creates
// go first, so an update never misses a run created in the same batch;
// the updates keep their order.
func writeMixed(ctx context.Context, tw TaskWriter, rows []batchRow) []error {
	var cs []*core.Task
	var us []Update
	for _, r := range rows {
		if r.create != nil {
			cs = append(cs, r.create)
		} else {
			us = append(us, r.update)
		}
	}
	cerrs, uerrs := tw.WriteTasks(ctx, cs, us)
	errs := make([]error, len(rows))
	ci, ui := 0, 0
	for i, r := range rows {
		if r.create != nil {
			errs[i] = cerrs[ci]
			ci++
		} else {
			errs[i] = uerrs[ui]
			ui++
		}
	}
	return errs
}

// CreateTask inserts t in the next group commit.
func (b *Batcher) CreateTask(ctx context.Context, t *core.Task) error {
	return b.creates.do(ctx, batchRow{create: t})
}

// UpdateTask applies the fenced update in the next group commit.
func (b *Batcher) UpdateTask(ctx context.Context, t *core.Task, exp Expect) error {
	u := Update{Task: t, Expect: exp}
	return b.laneOf(u).do(ctx, batchRow{update: u})
}

// UpdateTasks applies us in order, all in the same group commit (so still
// in one transaction), shared with whatever else waits.
func (b *Batcher) UpdateTasks(ctx context.Context, us []Update) []error {
	if len(us) == 0 {
		return nil
	}
	rows := make([]batchRow, len(us))
	for i, u := range us {
		rows[i] = batchRow{update: u}
	}
	return b.laneOf(us...).doMany(ctx, rows)
}

// batchCall is one caller's rows waiting in a batchQueue; they always
// commit together.
type batchCall[T any] struct {
	ctx   context.Context
	one   [1]T // rows' backing array for a single row
	rows  []T
	state atomic.Int32 // callWaiting → callTaken (by the committer) or callAbandoned (by the caller)
	errs  []error
	one0  [1]error
	done  chan struct{}
}

const (
	callWaiting int32 = iota
	callTaken
	callAbandoned
)

// batchQueue coalesces rows into commits. At most one committer goroutine
// runs per queue; it exists only while there are rows.
type batchQueue[T any] struct {
	max    int
	commit func(context.Context, []T) []error

	mu      sync.Mutex
	pending []*batchCall[T]
	rows    int // in pending
	running bool
}

func (q *batchQueue[T]) do(ctx context.Context, row T) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	c := &batchCall[T]{ctx: ctx, done: make(chan struct{})}
	c.one[0] = row
	c.rows, c.errs = c.one[:], c.one0[:]
	return q.wait(c)[0]
}

// doMany commits rows together, in order, in one batch.
func (q *batchQueue[T]) doMany(ctx context.Context, rows []T) []error {
	errs := make([]error, len(rows))
	if err := ctx.Err(); err != nil {
		for i := range errs {
			errs[i] = err
		}
		return errs
	}
	c := &batchCall[T]{ctx: ctx, rows: rows, errs: errs, done: make(chan struct{})}
	return q.wait(c)
}

// wait queues c and returns its rows' results.
func (q *batchQueue[T]) wait(c *batchCall[T]) []error {
	q.mu.Lock()
	q.pending = append(q.pending, c)
	q.rows += len(c.rows)
	if !q.running {
		q.running = true
		go q.run()
	}
	q.mu.Unlock()
	select {
	case <-c.done:
		return c.errs
	case <-c.ctx.Done():
		if c.state.CompareAndSwap(callWaiting, callAbandoned) {
			for i := range c.errs {
				c.errs[i] = c.ctx.Err()
			}
			return c.errs
		}
		<-c.done // already committing: its outcome is the answer
		return c.errs
	}
}

// run commits batches until no row waits.
func (q *batchQueue[T]) run() {
	var calls []*batchCall[T]
	var rows []T
	for {
		// Let the goroutines that are ready run first: under load they are
		// the callers about to queue (a worker's burst of reports), and a
		// batch that waits for them costs one commit instead of several.
		// Idle, this costs a yield and no wait.
		runtime.Gosched()
		q.mu.Lock()
		// Whole calls, up to max rows; a call larger than max goes alone.
		n, nrows := 0, 0
		for n < len(q.pending) && (n == 0 || nrows+len(q.pending[n].rows) <= q.max) {
			nrows += len(q.pending[n].rows)
			n++
		}
		if n == 0 {
			q.running = false
			q.mu.Unlock()
			return
		}
		calls = append(calls[:0], q.pending[:n]...)
		clear(q.pending[:n])
		q.pending = q.pending[n:]
		q.rows -= nrows
		if len(q.pending) == 0 {
			q.pending = nil // let the backing array go
		}
		q.mu.Unlock()

		live := calls[:0]
		rows = rows[:0]
		for _, c := range calls {
			if c.state.CompareAndSwap(callWaiting, callTaken) {
				live = append(live, c)
				rows = append(rows, c.rows...)
			}
		}
		if len(live) == 0 {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), batchTimeout)
		errs := q.commit(ctx, rows)
		cancel()
		for _, c := range live {
			errs = errs[copy(c.errs, errs):]
			close(c.done)
		}
		clear(rows)
	}
}
