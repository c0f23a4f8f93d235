// Package spool keeps the output of one run attempt until the master has
// acknowledged it. Bytes are addressed by their offset in the attempt's
// output, from 0. Unacked bytes are held in memory up to Limits.Memory; past
// it they spill to segment files in Limits.Dir, up to Limits.Disk. A spool
// never drops bytes on its own: when both bounds are reached, Write blocks,
// so the run's pipe stops being read and the run itself blocks on its next
// write (back-pressure, not loss). Only Discard, for a run the worker has
// given up or finished with, throws bytes away (and removes the files).
//
// Every method is safe for concurrent use. Write, ReadAt and Ack do file
// I/O under the buffer's lock when bytes are on disk; nothing else waits
// on that lock for long.
package spool

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"sync"
)

// ErrClosed is returned by Write after Close.
var ErrClosed = errors.New("spool: write after close")

// segmentSize is the size a segment grows to before the next one starts;
// a segment is freed (its file removed) once all of it is acked.
const segmentSize = 1 << 20

// Limits bound a Buffer.
type Limits struct {
	// Memory bounds the unacked bytes held in memory (a segment's acked
	// part is held until the whole segment is acked, so up to segmentSize
	// more may be allocated).
	Memory int
	// Disk bounds the unacked bytes spilled to files; 0 disables spilling.
	Disk int64
	// Dir holds the spill files; created on the first spill and removed by
	// Discard. Required when Disk > 0.
	Dir string
}

// segment holds the contiguous bytes [start, start+n), in memory or in a
// file (file position 0 holds offset start).
type segment struct {
	start uint64
	n     int
	mem   []byte // memory segment: len(mem) == n
	f     *os.File
}

func (s *segment) end() uint64 { return s.start + uint64(s.n) }

// Buffer holds the unacked tail of one attempt's output.
type Buffer struct {
	mu       sync.Mutex
	cond     sync.Cond // signalled when bytes are acked, or on Close and Discard
	lim      Limits
	segSize  int        // segmentSize; smaller in tests
	segs     []*segment // in offset order, contiguous; segs[0] may start before base
	base     uint64     // everything before it is acked
	end      uint64     // one past the last byte written
	memUsed  int        // unacked bytes in memory
	diskUsed int64      // unacked bytes on disk
	spare    []byte     // a freed memory segment, reused
	files    int        // spill files created, for names
	spillErr error      // the first spill failure; no spilling after it
	closed   bool
	discard  bool
}

// New returns a Buffer that holds at most limit unacked bytes, in memory
// only (a single write larger than limit is still accepted into an empty
// buffer).
func New(limit int) *Buffer { return NewSpilling(Limits{Memory: limit}) }

// NewSpilling returns a Buffer with the given bounds.
func NewSpilling(l Limits) *Buffer {
	if l.Dir == "" {
		l.Disk = 0
	}
	b := &Buffer{lim: l, segSize: segmentSize}
	b.cond.L = &b.mu
	return b
}

// Write appends p. It blocks while p fits neither in memory nor on disk,
// until Ack makes room or Discard is called. After Discard it drops p and
// returns len(p), nil.
func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for {
		switch {
		case b.discard:
			return len(p), nil
		case b.closed:
			return 0, ErrClosed
		case len(p) == 0:
			return 0, nil
		case b.storeLocked(p):
			return len(p), nil
		case b.end == b.base: // empty: take it whatever its size
			b.memLocked(p)
			return len(p), nil
		}
		b.cond.Wait()
	}
}

// storeLocked places p in memory if it fits, else on disk if it fits
// there; false when it fits nowhere.
func (b *Buffer) storeLocked(p []byte) bool {
	if b.memUsed+len(p) <= b.lim.Memory {
		b.memLocked(p)
		return true
	}
	if b.lim.Disk <= 0 || b.spillErr != nil || b.diskUsed+int64(len(p)) > b.lim.Disk {
		return false
	}
	if err := b.diskLocked(p); err != nil {
		// A worker's full disk: keep what is held, stop spilling, and let
		// the writer wait for acks like a memory-only spool.
		b.spillErr = err
		return false
	}
	return true
}

func (b *Buffer) memLocked(p []byte) {
	var tail *segment
	if n := len(b.segs); n > 0 {
		tail = b.segs[n-1]
	}
	if tail == nil || tail.mem == nil || tail.n >= b.segSize {
		tail = &segment{start: b.end, mem: b.spare[:0]}
		b.spare = nil
		b.segs = append(b.segs, tail)
	}
	tail.mem = append(tail.mem, p...)
	tail.n += len(p)
	b.end += uint64(len(p))
	b.memUsed += len(p)
}

func (b *Buffer) diskLocked(p []byte) error {
	var tail *segment
	if n := len(b.segs); n > 0 {
		tail = b.segs[n-1]
	}
	if tail == nil || tail.f == nil || tail.n >= b.segSize {
		if err := os.MkdirAll(b.lim.Dir, 0o700); err != nil {
			return fmt.Errorf("cannot create spool dir: %w", err)
		}
		b.files++
		f, err := os.OpenFile(filepath.Join(b.lim.Dir, fmt.Sprintf("%06d.spill", b.files)), os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
		if err != nil {
			return fmt.Errorf("cannot create spool file: %w", err)
		}
		tail = &segment{start: b.end, f: f}
		b.segs = append(b.segs, tail)
	}
	if _, err := tail.f.WriteAt(p, int64(tail.n)); err != nil {
		if tail.n == 0 {
			b.dropTailLocked()
		}
		return fmt.Errorf("cannot write spool file: %w", err)
	}
	tail.n += len(p)
	b.end += uint64(len(p))
	b.diskUsed += int64(len(p))
	return nil
}

// dropTailLocked removes an empty last segment.
func (b *Buffer) dropTailLocked() {
	s := b.segs[len(b.segs)-1]
	b.segs = b.segs[:len(b.segs)-1]
	b.free(s)
}

// free releases a segment's memory or file.
func (b *Buffer) free(s *segment) {
	if s.f != nil {
		name := s.f.Name()
		s.f.Close()
		os.Remove(name)
		return
	}
	if cap(s.mem) <= b.segSize+64<<10 {
		b.spare = s.mem[:0]
	}
}

// Close marks the end of the output: End is final from now on.
func (b *Buffer) Close() {
	b.mu.Lock()
	b.closed = true
	b.cond.Broadcast()
	b.mu.Unlock()
}

// Discard drops every held byte and every future write, removes the spill
// files, and wakes a blocked writer. For runs the worker has given up, and
// to clean up after a run that is done with.
func (b *Buffer) Discard() {
	b.mu.Lock()
	b.discard = true
	b.base = b.end
	for _, s := range b.segs {
		b.free(s)
	}
	b.segs, b.spare, b.memUsed, b.diskUsed = nil, nil, 0, 0
	if b.lim.Dir != "" && b.files > 0 {
		os.RemoveAll(b.lim.Dir)
	}
	b.cond.Broadcast()
	b.mu.Unlock()
}

// End returns the offset one past the last byte written.
func (b *Buffer) End() uint64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.end
}

// Acked returns the offset up to which the master has acknowledged.
func (b *Buffer) Acked() uint64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.base
}

// Spilled returns the unacked bytes held on disk.
func (b *Buffer) Spilled() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.diskUsed
}

// Err returns why spilling stopped, if it did.
func (b *Buffer) Err() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.spillErr
}

// Ack releases the bytes before off (clamped to End) and returns the acked
// offset afterwards. An off below the acked offset changes nothing.
func (b *Buffer) Ack(off uint64) uint64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	if off <= b.base {
		return b.base
	}
	off = min(off, b.end)
	for _, s := range b.segs {
		if s.start >= off {
			break
		}
		from, to := max(s.start, b.base), min(s.end(), off)
		if to > from {
			if s.f != nil {
				b.diskUsed -= int64(to - from)
			} else {
				b.memUsed -= int(to - from)
			}
		}
	}
	b.base = off
	i := 0
	for i < len(b.segs) && b.segs[i].end() <= b.base {
		b.free(b.segs[i])
		b.segs[i] = nil
		i++
	}
	b.segs = b.segs[i:]
	b.cond.Broadcast()
	return b.base
}

// ReadAt returns a copy of at most max bytes starting at off (never more
// than one segment holds), or nil when off is at or past End or before the
// acked offset (those bytes are gone).
func (b *Buffer) ReadAt(off uint64, max int) []byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	if off < b.base || off >= b.end || max <= 0 {
		return nil
	}
	i := sort.Search(len(b.segs), func(i int) bool { return b.segs[i].end() > off })
	if i == len(b.segs) {
		return nil // BUG: segments do not cover [base, end)
	}
	s := b.segs[i]
	n := min(int(s.end()-off), max)
	if s.f == nil {
		at := int(off - s.start)
		return append([]byte(nil), s.mem[at:at+n]...)
	}
	p := make([]byte, n)
	if _, err := s.f.ReadAt(p, int64(off-s.start)); err != nil {
		if b.spillErr == nil {
			b.spillErr = fmt.Errorf("cannot read spool file: %w", err)
		}
		return nil
	}
	return p
}

// Done reports whether the output is closed and every byte acked.
func (b *Buffer) Done() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.closed && b.end == b.base
}
