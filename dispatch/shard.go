package dispatch

import (
	"context"
	"sync"
)

// shard runs submitted functions one at a time in submission order. Pushing
// never blocks, so event loops can hand work over; the queue is bounded by
// the protocol (a worker's log window and heartbeat rate), not here.
type shard struct {
	mu    sync.Mutex
	queue []func()
	spare []func()
	ready chan struct{}
}

func newShard() *shard { return &shard{ready: make(chan struct{}, 1)} }

// push is safe from any goroutine.
func (s *shard) push(f func()) {
	s.mu.Lock()
	s.queue = append(s.queue, f)
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
			for i, f := range batch {
				f()
				batch[i] = nil
			}
			s.mu.Lock()
			s.spare = batch[:0]
			s.mu.Unlock()
		}
	}
}
