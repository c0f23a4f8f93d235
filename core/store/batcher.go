package store

import (
	"context"
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

// Batcher is a Store whose CreateTask and UpdateTask are group-committed:
// concurrent calls are coalesced into one CreateTasks / UpdateTasks (one
// transaction, one durable commit) of at most MaxBatch rows. While a batch
// commits, the next one forms from the calls that arrive meanwhile, so a
// lone caller pays one commit and a crowd shares them. Each caller blocks
// until its own row's result, which is exactly what the single-row call
// would have returned. Everything else passes through to the wrapped store
// (UpdateTasks and CreateTasks too: they are already batches).
//
// A caller whose context ends while its row still waits for a batch gets
// ctx.Err() and its row is never written; once the row is in a committing
// batch the caller waits for the outcome.
type Batcher struct {
	Store
	creates batchQueue[*core.Task]
	updates batchQueue[Update]
}

// NewBatcher wraps st. maxBatch ≤ 0 means DefaultMaxBatch.
func NewBatcher(st Store, maxBatch int) *Batcher {
	if maxBatch <= 0 {
		maxBatch = DefaultMaxBatch
	}
	b := &Batcher{Store: st}
	b.creates = batchQueue[*core.Task]{max: maxBatch, commit: st.CreateTasks}
	b.updates = batchQueue[Update]{max: maxBatch, commit: st.UpdateTasks}
	return b
}

// CreateTask inserts t in the next group commit.
func (b *Batcher) CreateTask(ctx context.Context, t *core.Task) error {
	return b.creates.do(ctx, t)
}

// UpdateTask applies the fenced update in the next group commit.
func (b *Batcher) UpdateTask(ctx context.Context, t *core.Task, exp Expect) error {
	return b.updates.do(ctx, Update{Task: t, Expect: exp})
}

// batchCall is one caller's row waiting in a batchQueue.
type batchCall[T any] struct {
	ctx   context.Context
	row   T
	state atomic.Int32 // callWaiting → callTaken (by the committer) or callAbandoned (by the caller)
	err   error
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
	running bool
}

func (q *batchQueue[T]) do(ctx context.Context, row T) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	c := &batchCall[T]{ctx: ctx, row: row, done: make(chan struct{})}
	q.mu.Lock()
	q.pending = append(q.pending, c)
	if !q.running {
		q.running = true
		go q.run()
	}
	q.mu.Unlock()
	select {
	case <-c.done:
		return c.err
	case <-ctx.Done():
		if c.state.CompareAndSwap(callWaiting, callAbandoned) {
			return ctx.Err()
		}
		<-c.done // already committing: its outcome is the answer
		return c.err
	}
}

// run commits batches until no row waits.
func (q *batchQueue[T]) run() {
	var calls []*batchCall[T]
	var rows []T
	for {
		q.mu.Lock()
		n := min(len(q.pending), q.max)
		if n == 0 {
			q.running = false
			q.mu.Unlock()
			return
		}
		calls = append(calls[:0], q.pending[:n]...)
		clear(q.pending[:n])
		q.pending = q.pending[n:]
		if len(q.pending) == 0 {
			q.pending = nil // let the backing array go
		}
		q.mu.Unlock()

		live := calls[:0]
		rows = rows[:0]
		for _, c := range calls {
			if c.state.CompareAndSwap(callWaiting, callTaken) {
				live = append(live, c)
				rows = append(rows, c.row)
			}
		}
		if len(live) == 0 {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), batchTimeout)
		errs := q.commit(ctx, rows)
		cancel()
		for i, c := range live {
			c.err = errs[i]
			close(c.done)
		}
		clear(rows)
	}
}

// PendingUpdates is how many UpdateTask calls wait for a batch (not the
// one committing); for tests and metrics.
func (b *Batcher) PendingUpdates() int {
	b.updates.mu.Lock()
	defer b.updates.mu.Unlock()
	return len(b.updates.pending)
}
