package dispatch

import (
	"context"
	"sync"
	"time"
)

// shard runs submitted functions one at a time in submission order. Pushing
// never blocks, so event loops can hand work over; the queue is bounded by
// the protocol (a worker's log window, its runs) and, for heartbeats, by
// holding at most one per session (pushHeartbeat, session.hb).
//
// Work pushed with pushAsync (a run's TaskStarted and TaskFinished, whose
// fenced store writes are group-committed) is started in order but runs on
// its own goroutine, so one worker's many runs share commits instead of
// waiting for one commit each. Work pushed with push waits first until
// every earlier async function has returned, so it still sees their
// writes (a final reward is never undone by a run's read-modify-write, a
// Hello's reconciliation sees finished runs gone); pushFree and
// pushHeartbeat skip that wait (heartbeats do not touch the store).
type shard struct {
	mu    sync.Mutex
	queue []shardItem
	spare []shardItem
	ready chan struct{}
	async sync.WaitGroup // async functions running; Add and Wait only on the shard's goroutine

	// ctx and its end, for callCtx; only on the shard's goroutine.
	ctx    context.Context
	cancel context.CancelFunc
	end    time.Time
}

// shardItem is a function to run, or a session's pending heartbeat
// (session.hb; without a closure to allocate for each).
type shardItem struct {
	f    func()
	kind int // itemOrdered, itemFree, itemAsync or itemHeartbeat
	sess *session
}

const (
	itemOrdered = iota
	itemFree
	itemAsync
	itemHeartbeat // free, like itemFree
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

func newShard() *shard { return &shard{ready: make(chan struct{}, 1)} }

// push is safe from any goroutine.
func (s *shard) push(f func()) { s.pushItem(shardItem{f: f}) }

// pushFree is push without waiting for earlier async work.
func (s *shard) pushFree(f func()) { s.pushItem(shardItem{f: f, kind: itemFree}) }

// pushAsync starts f, in order, on a goroutine of its own.
func (s *shard) pushAsync(f func()) { s.pushItem(shardItem{f: f, kind: itemAsync}) }

// pushHeartbeat is pushFree of handling sess's newest heartbeat.
func (s *shard) pushHeartbeat(sess *session) {
	s.pushItem(shardItem{kind: itemHeartbeat, sess: sess})
}

func (s *shard) pushItem(it shardItem) {
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
					go func() { defer s.async.Done(); it.f() }()
				case itemOrdered:
					s.async.Wait()
					it.f()
				case itemHeartbeat:
					if hb := it.sess.hb.Swap(nil); hb != nil {
						it.sess.m.onHeartbeat(it.sess, hb)
					}
				default:
					it.f()
				}
				batch[i] = shardItem{}
			}
			s.mu.Lock()
			s.spare = batch[:0]
			s.mu.Unlock()
		}
	}
}
