package logpipe

import (
	"fmt"
	"sync/atomic"
)

// frameQueue is the queue between the event loops and one writer
// goroutine: any goroutine pushes, the writer alone waits and pops. The
// ring is the queue (WriterConfig.Queue "ring", the default); a buffered
// channel ("chan") is kept beside it so the benchmarks measure both on the
// same path (bench: logs -logs-queue).
type frameQueue interface {
	// push queues it and reports true, or false at once when full. Any
	// goroutine; never blocks.
	push(it frameItem) bool
	// wait returns true once an item is ready to pop, false once quit is
	// closed and nothing is left. The writer goroutine only.
	wait(quit <-chan struct{}) bool
	// popBatch appends up to max of the oldest ready items to dst (at least
	// one after wait returned true). The writer goroutine only; never
	// blocks, never spins.
	popBatch(dst []frameItem, max int) []frameItem
	// depth and capacity are for Stats; any goroutine.
	depth() int
	capacity() int
}

func newFrameQueue(kind string, size int) (frameQueue, error) {
	switch kind {
	case "", "ring":
		return &ringFrames{r: NewRing[frameItem](size), wake: make(chan struct{}, 1)}, nil
	case "chan":
		return &chanFrames{c: make(chan frameItem, size)}, nil
	}
	return nil, fmt.Errorf("unknown log queue %q: use ring or chan", kind)
}

// ringFrames is the ring with the writer's wake-up (package comment,
// "Waking the writer").
type ringFrames struct {
	r        *Ring[frameItem]
	sleeping atomic.Bool   // the writer is about to wait on wake
	wake     chan struct{} // capacity 1
}

func (q *ringFrames) push(it frameItem) bool {
	if !q.r.TryPush(it) {
		return false
	}
	// After the push is published. Pairs with wait's Store(true) then
	// Ready(): with sequentially consistent atomics either it sees this
	// push or this sees it sleeping and wakes it.
	if q.sleeping.Load() {
		select {
		case q.wake <- struct{}{}:
		default:
		}
	}
	return true
}

// wait sleeps until the oldest push is published, not merely claimed: a
// producer stopped between the two (preempted, its thread descheduled)
// wakes the writer when it publishes, instead of the writer spinning on
// the processor the producer needs.
func (q *ringFrames) wait(quit <-chan struct{}) bool {
	for !q.r.Ready() {
		q.sleeping.Store(true)
		if q.r.Ready() {
			q.sleeping.Store(false)
			break
		}
		select {
		case <-q.wake:
		case <-quit:
			// No Submit is in progress any more: every push is published,
			// and an empty ring stays empty.
			if q.r.Len() == 0 {
				q.sleeping.Store(false)
				return false
			}
		}
		q.sleeping.Store(false)
	}
	return true
}

func (q *ringFrames) popBatch(dst []frameItem, max int) []frameItem {
	return q.r.TryPopBatch(dst, max)
}

func (q *ringFrames) depth() int    { return q.r.Len() }
func (q *ringFrames) capacity() int { return q.r.Cap() }

// chanFrames is a buffered channel; its writer blocks on the channel
// itself, holding the item that woke it for the next popBatch.
type chanFrames struct {
	c    chan frameItem
	held []frameItem // at most one; the writer's only
}

func (q *chanFrames) push(it frameItem) bool {
	select {
	case q.c <- it:
		return true
	default:
		return false
	}
}

func (q *chanFrames) wait(quit <-chan struct{}) bool {
	if len(q.held) > 0 {
		return true
	}
	select {
	case it := <-q.c:
		q.held = append(q.held, it)
		return true
	case <-quit:
		select { // no Submit is in progress any more
		case it := <-q.c:
			q.held = append(q.held, it)
			return true
		default:
			return false
		}
	}
}

func (q *chanFrames) popBatch(dst []frameItem, max int) []frameItem {
	n := 0
	if len(q.held) > 0 {
		dst = append(dst, q.held[0])
		q.held[0] = frameItem{}
		q.held = q.held[:0]
		n++
	}
	for ; n < max; n++ {
		select {
		case it := <-q.c:
			dst = append(dst, it)
		default:
			return dst
		}
	}
	return dst
}

func (q *chanFrames) depth() int    { return len(q.c) }
func (q *chanFrames) capacity() int { return cap(q.c) }
