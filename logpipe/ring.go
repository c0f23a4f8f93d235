package logpipe

import "sync/atomic"

// cacheLine separates the producers' and the consumers' counters so that a
// push and a pop do not invalidate each other's cache line.
const cacheLine = 64

// Ring is a bounded lock-free multi-producer multi-consumer FIFO queue:
// Dmitry Vyukov's bounded MPMC queue (see the package comment for the
// algorithm and its memory-ordering argument). TryPush and TryPop never
// block and never allocate; a full ring refuses the push.
//
// Every method is safe for concurrent use by any number of goroutines.
type Ring[T any] struct {
	_     [cacheLine]byte
	tail  atomic.Uint64 // next position to push; producers CAS it
	_     [cacheLine - 8]byte
	head  atomic.Uint64 // next position to pop; consumers CAS it
	_     [cacheLine - 8]byte
	mask  uint64
	cells []ringCell[T]
}

// ringCell is one slot. seq says whose turn the slot is: seq == pos means
// free for the producer of position pos, seq == pos+1 means it holds the
// value pushed at pos, ready for the consumer of pos.
type ringCell[T any] struct {
	seq atomic.Uint64
	val T
}

// NewRing returns a ring holding at least size values (rounded up to a
// power of two, at least 2).
func NewRing[T any](size int) *Ring[T] {
	n := 2
	for n < size {
		n <<= 1
	}
	r := &Ring[T]{mask: uint64(n - 1), cells: make([]ringCell[T], n)}
	for i := range r.cells {
		r.cells[i].seq.Store(uint64(i))
	}
	return r
}

// TryPush appends v and reports true, or reports false at once when the
// ring is full. Safe from any goroutine; never blocks.
func (r *Ring[T]) TryPush(v T) bool {
	pos := r.tail.Load()
	for {
		c := &r.cells[pos&r.mask]
		seq := c.seq.Load() // acquire: the consumer of pos-len(cells) is done with val
		switch d := int64(seq - pos); {
		case d == 0: // free for pos: claim it
			if r.tail.CompareAndSwap(pos, pos+1) {
				c.val = v
				c.seq.Store(pos + 1) // release: publishes val to the consumer of pos
				return true
			}
			pos = r.tail.Load()
		case d < 0: // still holds the value pushed one lap ago: full
			return false
		default: // another producer claimed pos; catch up
			pos = r.tail.Load()
		}
	}
}

// TryPop removes and returns the oldest value, or reports false at once when
// there is none ready. Safe from any goroutine; never blocks.
func (r *Ring[T]) TryPop() (T, bool) {
	var zero T
	pos := r.head.Load()
	for {
		c := &r.cells[pos&r.mask]
		seq := c.seq.Load() // acquire: val was written by the producer of pos
		switch d := int64(seq - (pos + 1)); {
		case d == 0: // holds the value of pos: claim it
			if r.head.CompareAndSwap(pos, pos+1) {
				v := c.val
				c.val = zero                            // let the GC have what v references
				c.seq.Store(pos + uint64(len(r.cells))) // release: free for the producer one lap on
				return v, true
			}
			pos = r.head.Load()
		case d < 0: // empty, or its producer has claimed pos but not published yet
			return zero, false
		default: // another consumer took pos; catch up
			pos = r.head.Load()
		}
	}
}

// TryPopBatch appends to dst up to max of the oldest values, in order, and
// returns it; dst comes back unchanged at once when none is ready. The
// values are claimed with one CAS of head for the lot (see the package
// comment), so a consumer that takes a batch pays for the shared counter
// once, not once a value. Safe from any goroutine; never blocks.
func (r *Ring[T]) TryPopBatch(dst []T, max int) []T {
	var zero T
	pos := r.head.Load()
	for {
		n := uint64(0)
		for n < uint64(max) {
			seq := r.cells[(pos+n)&r.mask].seq.Load() // acquire: val of pos+n was written
			if seq != pos+n+1 {
				break
			}
			n++
		}
		if n == 0 {
			seq := r.cells[pos&r.mask].seq.Load()
			if int64(seq-(pos+1)) < 0 { // empty, or its producer has not published yet
				return dst
			}
			pos = r.head.Load() // another consumer took pos; catch up
			continue
		}
		if !r.head.CompareAndSwap(pos, pos+n) {
			pos = r.head.Load()
			continue
		}
		for i := range n {
			c := &r.cells[(pos+i)&r.mask]
			dst = append(dst, c.val)
			c.val = zero                                // let the GC have what the value references
			c.seq.Store(pos + i + uint64(len(r.cells))) // release: free for the producer one lap on
		}
		return dst
	}
}

// Ready reports whether the oldest value is published, so that TryPop or
// TryPopBatch would take it now (with several consumers, a hint: another
// may take it first). A push claimed but not yet published is not ready.
// Safe from any goroutine; never blocks.
func (r *Ring[T]) Ready() bool {
	pos := r.head.Load()
	return r.cells[pos&r.mask].seq.Load() == pos+1 // acquire, as TryPop's
}

// Len is the number of values pushed and not yet popped, including pushes
// claimed but not yet published. Exact only when nobody pushes or pops.
func (r *Ring[T]) Len() int {
	head := r.head.Load()
	tail := r.tail.Load()
	if tail <= head {
		return 0
	}
	return int(tail - head)
}

// Cap is the number of values the ring holds when full.
func (r *Ring[T]) Cap() int { return len(r.cells) }
