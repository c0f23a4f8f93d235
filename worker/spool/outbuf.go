// Package spool keeps the output of one run attempt until the master has
// acknowledged it. Bytes are addressed by their offset in the attempt's
// output, from 0. A spool never drops bytes on its own: when the unacked
// bytes reach the limit, Write blocks, so the run's pipe stops being read and
// the run itself blocks on its next write (back-pressure, not loss). Only
// Discard, for a run the worker has given up, throws bytes away.
//
// Every method is safe for concurrent use.
package spool

import (
	"errors"
	"sync"
)

// ErrClosed is returned by Write after Close.
var ErrClosed = errors.New("spool: write after close")

// Buffer holds the unacked tail of one attempt's output.
type Buffer struct {
	mu      sync.Mutex
	cond    sync.Cond // signalled when bytes are acked or the buffer is discarded
	buf     []byte    // unacked bytes are buf[head:]
	head    int
	base    uint64 // offset of buf[head]: everything before it is acked
	limit   int
	closed  bool
	discard bool
}

// New returns a Buffer that holds at most limit unacked bytes (a single
// write larger than limit is still accepted into an empty buffer).
func New(limit int) *Buffer {
	b := &Buffer{limit: limit}
	b.cond.L = &b.mu
	return b
}

func (b *Buffer) lenLocked() int { return len(b.buf) - b.head }

// Write appends p. It blocks while the unacked bytes plus p would exceed the
// limit, until Ack makes room or Discard is called. After Discard it drops p
// and returns len(p), nil.
func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for !b.discard && !b.closed && b.lenLocked() > 0 && b.lenLocked()+len(p) > b.limit {
		b.cond.Wait()
	}
	if b.discard {
		return len(p), nil
	}
	if b.closed {
		return 0, ErrClosed
	}
	if b.head > 0 && b.head >= len(b.buf)/2 {
		n := copy(b.buf, b.buf[b.head:])
		b.buf = b.buf[:n]
		b.head = 0
	}
	b.buf = append(b.buf, p...)
	return len(p), nil
}

// Close marks the end of the output: End is final from now on.
func (b *Buffer) Close() {
	b.mu.Lock()
	b.closed = true
	b.cond.Broadcast()
	b.mu.Unlock()
}

// Discard drops every held byte and every future write, and wakes a
// blocked writer. For runs the worker has given up.
func (b *Buffer) Discard() {
	b.mu.Lock()
	b.discard = true
	b.base += uint64(b.lenLocked())
	b.buf, b.head = nil, 0
	b.cond.Broadcast()
	b.mu.Unlock()
}

// End returns the offset one past the last byte written.
func (b *Buffer) End() uint64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.base + uint64(b.lenLocked())
}

// Acked returns the offset up to which the master has acknowledged.
func (b *Buffer) Acked() uint64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.base
}

// Ack releases the bytes before off (clamped to End) and returns the acked
// offset afterwards. An off below the acked offset changes nothing.
func (b *Buffer) Ack(off uint64) uint64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	if off <= b.base {
		return b.base
	}
	n := min(off-b.base, uint64(b.lenLocked()))
	b.head += int(n)
	b.base += n
	if b.head == len(b.buf) {
		b.head = 0
		if cap(b.buf) > 1<<20 {
			b.buf = nil // give a burst's memory back
		} else {
			b.buf = b.buf[:0]
		}
	}
	b.cond.Broadcast()
	return b.base
}

// ReadAt returns a copy of at most max bytes starting at off, or nil when off
// is at or past End or before the acked offset (those bytes are gone).
func (b *Buffer) ReadAt(off uint64, max int) []byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	end := b.base + uint64(b.lenLocked())
	if off < b.base || off >= end || max <= 0 {
		return nil
	}
	start := b.head + int(off-b.base)
	n := min(int(end-off), max)
	return append([]byte(nil), b.buf[start:start+n]...)
}

// Done reports whether the output is closed and every byte acked.
func (b *Buffer) Done() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.closed && b.lenLocked() == 0
}
