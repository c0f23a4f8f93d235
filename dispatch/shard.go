package dispatch

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// shard runs submitted functions one at a time in submission order. Pushing
// never blocks, so event loops can hand work over. Its queue is bounded:
// a session has at most one heartbeat waiting (pushHeartbeat, session.hb),
// and a worker's reports (Hello, TaskStarted, TaskFinished) go through
// tryPush, which refuses once the shard holds maxItems pending functions;
// the caller then closes that worker's connection (server.admit), and the
// worker resends what was not acknowledged after it reconnects. push, for
// the master's own work (a session's close, a final reward), always queues:
// one per session or per acked log batch.
//
// Work pushed async (tryPush with async: a run's TaskStarted and TaskFinished, whose
// fenced store writes are group-committed) is started in order but runs
// beside the shard, on at most maxAsync goroutines, so one worker's many
// runs share commits instead of waiting for one commit each; further async
// work waits for one of them. Work pushed with push waits first until every
// earlier async function has returned, so it still sees their writes (a
// final reward is never undone by a run's read-modify-write, a Hello's
// reconciliation sees finished runs gone); pushHeartbeat skips that wait
// (heartbeats do not touch the store).
type shard struct {
	maxItems int64
	maxAsync int

	mu    sync.Mutex
	queue []shardItem
	spare []shardItem
	ready chan struct{}
	// pending counts the functions pushed and not yet returned (async ones
	// included), for maxItems.
	pending atomic.Int64

	async sync.WaitGroup // async functions queued or running; Add and Wait only on the shard's goroutine

	asyncMu      sync.Mutex
	asyncQueue   []func() // started in order as goroutines free up
	asyncRunning int      // goroutines running async work, at most maxAsync

	// ctx and its end, for callCtx; only on the shard's goroutine.
	ctx    context.Context
	cancel context.CancelFunc
	end    time.Time
}

// shardItem is a function to run, or a session's pending heartbeat
// (session.hb; without a closure to allocate for each).
type shardItem struct {
	f    func()
	kind int // itemOrdered, itemAsync or itemHeartbeat
	sess *session
}

const (
	itemOrdered = iota
	itemAsync
	itemHeartbeat // does not wait for async work
)

// callTimeout bounds a call made with callCtx: between callTimeout and
// 2×callTimeout from the call.
const callTimeout = 10 * time.Second

// callCtx returns a context under parent that ends at least callTimeout
// from now. It is shared by the shard's calls until that no longer holds,
// so a heartbeat does not allocate a context and a timer of its own. Only
// on the shard's goroutine, for work that runs there (not async work).
func (s *shard) callCtx(parent context.Context) context.Context {
	now := time.Now()
	if s.ctx == nil || s.end.Sub(now) < callTimeout || s.ctx.Err() != nil {
		if s.cancel != nil {
			s.cancel()
		}
		s.end = now.Add(2 * callTimeout)
		s.ctx, s.cancel = context.WithDeadline(parent, s.end)
	}
	return s.ctx
}

func newShard(maxItems, maxAsync int) *shard {
	return &shard{maxItems: int64(maxItems), maxAsync: maxAsync, ready: make(chan struct{}, 1)}
}

// push queues f; it always does. Safe from any goroutine.
func (s *shard) push(f func()) { s.pushItem(shardItem{f: f}) }

// tryPush queues f unless the shard is full; safe from any goroutine.
// async: f starts in order but runs beside the shard (see shard).
func (s *shard) tryPush(f func(), async bool) bool {
	if s.pending.Load() >= s.maxItems {
		return false
	}
	it := shardItem{f: f}
	if async {
		it.kind = itemAsync
	}
	s.pushItem(it)
	return true
}

// pushHeartbeat queues the handling of sess's newest heartbeat, which does
// not wait for async work.
func (s *shard) pushHeartbeat(sess *session) {
	s.pushItem(shardItem{kind: itemHeartbeat, sess: sess})
}

func (s *shard) pushItem(it shardItem) {
	s.pending.Add(1)
	s.mu.Lock()
	s.queue = append(s.queue, it)
	s.mu.Unlock()
	select {
	case s.ready <- struct{}{}:
	default:
	}
}

func (s *shard) run(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			s.async.Wait()
			if s.cancel != nil {
				s.cancel()
			}
			return
		case <-s.ready:
		}
		for {
			s.mu.Lock()
			batch := s.queue
			if len(batch) == 0 {
				s.mu.Unlock()
				break
			}
			// Two buffers alternate; spare is nil while batch is in use so
			// pushes can never append into the slice being run.
			s.queue, s.spare = s.spare[:0], nil
			s.mu.Unlock()
			for i, it := range batch {
				switch it.kind {
				case itemAsync:
					s.async.Add(1)
					s.startAsync(it.f)
				case itemOrdered:
					s.async.Wait()
					it.f()
					s.pending.Add(-1)
				case itemHeartbeat:
					if hb := it.sess.hb.Swap(nil); hb != nil {
						it.sess.d.onHeartbeat(it.sess, hb)
					}
					s.pending.Add(-1)
				}
				batch[i] = shardItem{}
			}
			s.mu.Lock()
			s.spare = batch[:0]
			s.mu.Unlock()
		}
	}
}

// startAsync runs f on a goroutine of the shard's async pool: a new one
// while fewer than maxAsync run, else the next one to free up.
func (s *shard) startAsync(f func()) {
	s.asyncMu.Lock()
	if s.asyncRunning >= s.maxAsync {
		s.asyncQueue = append(s.asyncQueue, f)
		s.asyncMu.Unlock()
		return
	}
	s.asyncRunning++
	s.asyncMu.Unlock()
	go s.asyncLoop(f)
}

// asyncLoop runs f, then queued async work until there is none.
func (s *shard) asyncLoop(f func()) {
	for {
		f()
		s.pending.Add(-1)
		s.async.Done()
		s.asyncMu.Lock()
		if len(s.asyncQueue) == 0 {
			s.asyncRunning--
			s.asyncQueue = nil // drop a grown array once idle
			s.asyncMu.Unlock()
			return
		}
		f = s.asyncQueue[0]
		s.asyncQueue[0] = nil
		s.asyncQueue = s.asyncQueue[1:]
		s.asyncMu.Unlock()
	}
}
