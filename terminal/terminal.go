// Package terminal relays the terminals of interactive runs (issue 34,
// docs/interactive.md) on the master: between the worker connection that
// holds a run (through a Sender the caller provides) and the viewers
// attached to it (the WebSockets of httpapi).
//
// What it must never do: block the worker connection's event loop on a
// viewer (Output and Ack never wait; each viewer has a queue bounded in
// bytes, and what does not fit is dropped for that viewer alone — the run's
// log, recorded apart, keeps every byte), keep more than a bounded ring of
// output per session, or send the worker more input than its window
// (Write waits for the worker's acks instead: a 10 MB paste flows at the
// PTY's pace in chunks, never as one frame).
//
// Every exported method is safe to call from any goroutine.
package terminal

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

const (
	// RingSize is how much recent output a session keeps, sent first to a
	// viewer that attaches (reattach resumes the screen).
	RingSize = 64 << 10
	// ViewerQueue bounds the output queued for one viewer.
	ViewerQueue = 1 << 20
	// InputChunk is the largest input sent to the worker in one frame.
	InputChunk = 16 << 10
	// InputWindow is the input sent to the worker and not yet acked.
	InputWindow = 64 << 10
	// MaxSize is the largest side of a window; a resize beyond it, or to
	// zero, is refused (ErrBadSize), never forwarded.
	MaxSize = 1000
)

// Sender sends to the worker that holds a session's run. It must not
// block for long (the master queues frames on the connection).
type Sender interface {
	// Input sends data at input offset off. data is the caller's again
	// once Input returns (the WebSocket reader reuses its buffer): copy it
	// or encode it before returning.
	Input(off uint64, data []byte) error
	// Resize sets the window size.
	Resize(cols, rows uint32) error
}

var (
	// ErrEnded is returned to a viewer of a session whose run ended.
	ErrEnded = errors.New("the session ended")
	// ErrBadSize is a resize to zero or beyond MaxSize.
	ErrBadSize = fmt.Errorf("a window is 1..%d columns by 1..%d rows", MaxSize, MaxSize)
)

// Hub holds the sessions of the runs this master's workers hold, by task id.
type Hub struct {
	mu       sync.Mutex
	sessions map[string]*Session
}

func NewHub() *Hub { return &Hub{sessions: map[string]*Session{}} }

// Session returns the session of attempt's run under fence, made on first
// use; a newer attempt or fence replaces (and ends) an older one.
func (h *Hub) Session(taskID string, attempt int32, fence uint64, s Sender) *Session {
	h.mu.Lock()
	defer h.mu.Unlock()
	if cur := h.sessions[taskID]; cur != nil {
		if cur.attempt == attempt && cur.fence == fence {
			return cur
		}
		cur.End("a newer attempt started")
	}
	ss := &Session{attempt: attempt, fence: fence, send: s, credit: make(chan struct{}, 1),
		viewers: map[*Viewer]struct{}{}, done: make(chan struct{})}
	h.sessions[taskID] = ss
	return ss
}

// Lookup returns the live session of taskID, or nil.
func (h *Hub) Lookup(taskID string) *Session {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.sessions[taskID]
}

// End ends taskID's session, telling its viewers why; no-op without one.
func (h *Hub) End(taskID, why string) {
	h.mu.Lock()
	s := h.sessions[taskID]
	delete(h.sessions, taskID)
	h.mu.Unlock()
	if s != nil {
		s.End(why)
	}
}

// Len is the number of live sessions.
func (h *Hub) Len() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.sessions)
}

// Session is one run's terminal.
type Session struct {
	attempt int32
	fence   uint64
	send    Sender
	// credit wakes writers waiting for the window (capacity 1: a signal).
	credit chan struct{}
	// inMu serialises writers, so chunks of two pastes never interleave
	// and input offsets are handed out in order.
	inMu sync.Mutex
	// lastInput is when input was last sent (Unix ns; 0: never); idleEnd
	// marks a session its master ends for idleness (MarkIdleEnd).
	lastInput atomic.Int64
	idleEnd   atomic.Bool

	mu      sync.Mutex
	ring    []byte // the last RingSize bytes of output
	outEnd  uint64 // terminal offset just past the last output byte
	inSent  uint64 // input offset sent up to
	inAcked uint64 // input offset the worker acked up to
	viewers map[*Viewer]struct{}
	ended   string        // why it ended; "" while live
	done    chan struct{} // closed when it ends
}

// Attempt and Fence name the run attempt the session belongs to.
func (s *Session) Attempt() int32 { return s.attempt }
func (s *Session) Fence() uint64  { return s.fence }

// Output takes terminal output at offset off (from the worker's
// TermData): into the ring and every viewer's queue. It never blocks. A
// frame that overlaps what was taken is trimmed; a gap is noted by the
// viewers' Lagged.
func (s *Session) Output(off uint64, data []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ended != "" {
		return
	}
	if end := off + uint64(len(data)); end <= s.outEnd {
		return // a resend after a reconnect
	} else if off < s.outEnd {
		data = data[s.outEnd-off:]
		off = s.outEnd
	}
	// Bytes the worker dropped before this frame, which a viewer that saw
	// the earlier output missed; none for a session this master has just
	// made (after a restart: its viewers have seen nothing yet).
	var gap int64
	if s.outEnd > 0 && off > s.outEnd {
		gap = int64(off - s.outEnd)
	}
	s.outEnd = off + uint64(len(data))
	b := append([]byte(nil), data...) // shared by every viewer, never changed
	if len(b) >= RingSize {
		s.ring = append(s.ring[:0], b[len(b)-RingSize:]...)
	} else {
		if over := len(s.ring) + len(b) - RingSize; over > 0 {
			s.ring = append(s.ring[:0], s.ring[over:]...)
		}
		s.ring = append(s.ring, b...)
	}
	for v := range s.viewers {
		v.push(b, gap)
	}
}

// Ack takes the worker's input ack (TermAck): input is written to the PTY
// up to off. It never blocks.
func (s *Session) Ack(off uint64) {
	s.mu.Lock()
	if off > s.inAcked && off <= s.inSent {
		s.inAcked = off
	}
	s.mu.Unlock()
	select {
	case s.credit <- struct{}{}:
	default:
	}
}

// Write sends data to the run's terminal in chunks of InputChunk, each
// after the worker acked enough of the earlier ones to keep at most
// InputWindow in flight. It returns when all of it was sent (not written
// to the PTY), the context ends, or the session ends.
func (s *Session) Write(ctx context.Context, data []byte) error {
	s.inMu.Lock()
	defer s.inMu.Unlock()
	for len(data) > 0 {
		n := min(len(data), InputChunk)
		for {
			s.mu.Lock()
			ended, room := s.ended, InputWindow-int(s.inSent-s.inAcked)
			s.mu.Unlock()
			if ended != "" {
				return ErrEnded
			}
			if room >= n {
				break
			}
			select {
			case <-s.credit:
			case <-s.done:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		s.mu.Lock()
		off := s.inSent
		s.inSent += uint64(n)
		s.mu.Unlock()
		if err := s.send.Input(off, data[:n]); err != nil {
			// Not sent: not in flight either (inMu keeps other writers out).
			s.mu.Lock()
			s.inSent = off
			s.mu.Unlock()
			return fmt.Errorf("cannot send input to the run's worker: %w", err)
		}
		s.lastInput.Store(time.Now().UnixNano())
		data = data[n:]
	}
	return nil
}

// LastInput is when input was last sent to the worker (zero: never).
func (s *Session) LastInput() time.Time {
	if ns := s.lastInput.Load(); ns != 0 {
		return time.Unix(0, ns)
	}
	return time.Time{}
}

// MarkIdleEnd reports whether the caller is the first to end the session
// for idleness.
func (s *Session) MarkIdleEnd() bool { return s.idleEnd.CompareAndSwap(false, true) }

// Notice shows text to the viewers and in the ring, beside the run's own
// output (it is not in the run's log nor in the terminal's offsets).
func (s *Session) Notice(text string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ended != "" {
		return
	}
	b := []byte(text)
	if over := len(s.ring) + len(b) - RingSize; over > 0 {
		s.ring = append(s.ring[:0], s.ring[min(over, len(s.ring)):]...)
	}
	s.ring = append(s.ring, b...)
	for v := range s.viewers {
		v.push(b, 0)
	}
}

// Resize sets the window size, refusing 0 and sides over MaxSize.
func (s *Session) Resize(cols, rows int) error {
	if cols < 1 || rows < 1 || cols > MaxSize || rows > MaxSize {
		return ErrBadSize
	}
	if err := s.send.Resize(uint32(cols), uint32(rows)); err != nil {
		return fmt.Errorf("cannot send the window size to the run's worker: %w", err)
	}
	return nil
}

// End ends the session: its viewers get why once their queues drain.
func (s *Session) End(why string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ended != "" {
		return
	}
	s.ended = why
	close(s.done)
	for v := range s.viewers {
		v.end(why)
	}
	s.viewers = nil
	s.ring = nil
}

// Attach adds a viewer whose queue starts with the ring (the recent
// screen). ErrEnded when the session ended.
func (s *Session) Attach() (*Viewer, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ended != "" {
		return nil, ErrEnded
	}
	v := &Viewer{s: s, wake: make(chan struct{}, 1)}
	if len(s.ring) > 0 {
		v.push(append([]byte(nil), s.ring...), 0)
	}
	s.viewers[v] = struct{}{}
	return v, nil
}

// Viewers is the number of attached viewers.
func (s *Session) Viewers() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.viewers)
}

// Viewer is one attached client: Next hands it its queued output.
type Viewer struct {
	s    *Session
	wake chan struct{} // capacity 1

	mu     sync.Mutex
	queue  [][]byte
	queued int
	lagged int64 // bytes dropped since the last Next
	ended  string
}

// push queues b, after gap bytes the worker dropped; beyond ViewerQueue
// it is dropped and counted. Never blocks.
func (v *Viewer) push(b []byte, gap int64) {
	v.mu.Lock()
	v.lagged += gap
	if v.queued+len(b) > ViewerQueue {
		v.lagged += int64(len(b))
	} else {
		v.queue = append(v.queue, b)
		v.queued += len(b)
	}
	v.mu.Unlock()
	v.signal()
}

func (v *Viewer) end(why string) {
	v.mu.Lock()
	v.ended = why
	v.mu.Unlock()
	v.signal()
}

func (v *Viewer) signal() {
	select {
	case v.wake <- struct{}{}:
	default:
	}
}

// Next waits for output and returns all that is queued, the bytes dropped
// for this viewer since the last call (0: none), and, once the queue is
// empty and the session has ended, why (with err ErrEnded). The slices are
// shared: the caller must not change them.
func (v *Viewer) Next(ctx context.Context) (out [][]byte, lagged int64, why string, err error) {
	for {
		v.mu.Lock()
		out, lagged = v.queue, v.lagged
		v.queue, v.queued, v.lagged = nil, 0, 0
		why = v.ended
		v.mu.Unlock()
		if len(out) > 0 || lagged > 0 {
			return out, lagged, "", nil
		}
		if why != "" {
			return nil, 0, why, ErrEnded
		}
		select {
		case <-v.wake:
		case <-ctx.Done():
			return nil, 0, "", ctx.Err()
		}
	}
}

// Detach removes the viewer; the session goes on.
func (v *Viewer) Detach() {
	v.s.mu.Lock()
	delete(v.s.viewers, v)
	v.s.mu.Unlock()
}
