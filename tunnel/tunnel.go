// Package tunnel carries byte streams over the worker connection, for the
// web app of an interactive run (issue 34, docs/interactive.md): the
// master proxies /sessions/<id>/ to the app on the worker's loopback
// through them, so no port of the worker is opened to the network.
//
// Both ends are a Stream, a net.Conn: the master's proxy reads and writes
// one as its connection to the app, the worker copies one to and from its
// TCP connection to the app. Frames (codec's ProxyData, ProxyAck,
// ProxyClose) go out through the Sender each side provides and come in
// through Deliver, Ack and PeerClosed, which never block: the connection's
// reader is never held by a stream. Each side keeps at most Window bytes
// unacknowledged, so a stream's buffer on the other side is bounded; a
// writer whose peer takes nothing for Stall is failed (the stream closes)
// rather than left blocked: a slow browser holds the app's connection for
// at most that long.
//
// Every exported method is safe to call from any goroutine.
package tunnel

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"time"
)

const (
	// Window is the data one side sends and the other has not acked: the
	// bound of a stream's receive buffer.
	Window = 256 << 10
	// Chunk is the largest ProxyData payload.
	Chunk = 32 << 10
	// Stall is how long a writer waits for its peer's window before the
	// stream is failed.
	Stall = 30 * time.Second
)

// Sender sends a stream's frames to the other side. Data's bytes are the
// caller's again once it returns: copy or encode them. None may block for
// long (both sides queue frames).
type Sender interface {
	Data(stream, off uint64, data []byte) error
	Ack(stream, off uint64) error
	Close(stream uint64, why string) error
}

// ErrStalled is a write whose peer took nothing for Stall.
var ErrStalled = fmt.Errorf("the other side took nothing for %s: stream closed", Stall)

// ErrNotHere is a stream asked of a master whose workers do not hold the
// run (another master does, or its worker is reconnecting).
var ErrNotHere = errors.New("the run is not held by this master's workers")

// ErrProtocol is a peer that broke the window or the offsets.
var ErrProtocol = errors.New("the other side broke the stream's window or offsets")

// Stream is one byte stream.
type Stream struct {
	id    uint64
	send  Sender
	stall time.Duration
	done  chan struct{} // closed by the local close (Close, fail)
	rwake chan struct{} // capacity 1: data, the peer's close, a read deadline
	wwake chan struct{} // capacity 1: an ack, the peer's close, a write deadline
	open  chan struct{} // closed at the first ack (the peer's side is open)
	gone  chan struct{} // closed at the peer's close
	onEnd func()

	mu       sync.Mutex
	rbuf     []byte // received and not yet read, at most Window
	rOff     uint64 // offset just past what Read returned
	rAcked   uint64 // rOff last acked
	peerEnd  bool   // the peer closed; rbuf still readable
	peerWhy  string // its error ("" : a clean end)
	wOff     uint64 // offset just past what was sent
	wAcked   uint64 // what the peer acked
	opened   bool
	closed   bool
	localWhy error // why the local side closed (nil: Close)
	rdl, wdl time.Time
}

// New returns stream id, sending through s; onEnd (may be nil) runs once,
// when both sides are done with it (its Set removes it).
func New(id uint64, s Sender, onEnd func()) *Stream {
	return &Stream{id: id, send: s, stall: Stall, done: make(chan struct{}), rwake: make(chan struct{}, 1), wwake: make(chan struct{}, 1),
		open: make(chan struct{}), gone: make(chan struct{}), onEnd: onEnd}
}

// SetStall sets the stall bound (tests).
func (s *Stream) SetStall(d time.Duration) { s.stall = d }

// ID is the stream's id.
func (s *Stream) ID() uint64 { return s.id }

func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

func (s *Stream) signal() { signal(s.rwake); signal(s.wwake) }

// Deliver takes the peer's data at off. It never blocks; data that breaks
// the window or leaves a gap fails the stream.
func (s *Stream) Deliver(off uint64, data []byte) {
	s.mu.Lock()
	if s.closed || s.peerEnd {
		s.mu.Unlock()
		return
	}
	if off != s.rOff+uint64(len(s.rbuf)) || len(s.rbuf)+len(data) > Window {
		s.mu.Unlock()
		s.fail(ErrProtocol)
		return
	}
	s.rbuf = append(s.rbuf, data...)
	s.mu.Unlock()
	signal(s.rwake)
}

// Ack takes the peer's ack: it took our data up to off. The first ack
// (offset 0 included) opens the stream.
func (s *Stream) Ack(off uint64) {
	s.mu.Lock()
	if !s.opened {
		s.opened = true
		close(s.open)
	}
	if off > s.wAcked && off <= s.wOff {
		s.wAcked = off
	}
	s.mu.Unlock()
	signal(s.wwake)
}

// PeerClosed takes the peer's close: what it sent is still read, then
// io.EOF (why "") or an error saying why; writes fail.
func (s *Stream) PeerClosed(why string) {
	s.mu.Lock()
	if s.peerEnd {
		s.mu.Unlock()
		return
	}
	s.peerEnd, s.peerWhy = true, why
	close(s.gone)
	closed := s.closed
	s.mu.Unlock()
	s.signal()
	if closed {
		s.end()
	}
}

// WaitOpen waits for the peer's first ack; the peer's error when it
// closed first.
func (s *Stream) WaitOpen(ctx context.Context) error {
	select {
	case <-s.open:
		return nil
	case <-s.gone:
	case <-ctx.Done():
	}
	s.mu.Lock()
	why, peerEnd := s.peerWhy, s.peerEnd
	s.mu.Unlock()
	if peerEnd {
		if why == "" {
			why = "closed"
		}
		return errors.New(why)
	}
	// A close races the deadline: look once more.
	select {
	case <-s.open:
		return nil
	default:
	}
	s.fail(errors.New("not opened in time"))
	return ctx.Err()
}

// Opened is closed once the peer acked.
func (s *Stream) Opened() <-chan struct{} { return s.open }

// Done is closed at the local close.
func (s *Stream) Done() <-chan struct{} { return s.done }

// waitOn blocks until a signal on ch, the local close, deadline dl or
// max (zero: none of either).
func (s *Stream) waitOn(ch chan struct{}, dl time.Time, max time.Duration) {
	d := max
	if !dl.IsZero() {
		if until := time.Until(dl); d == 0 || until < d {
			d = until
		}
	}
	var tc <-chan time.Time
	if d > 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		tc = t.C
	} else if d < 0 {
		return
	}
	select {
	case <-ch:
	case <-s.done:
	case <-tc:
	}
}

// Read reads what the peer sent, acking it.
func (s *Stream) Read(p []byte) (int, error) {
	for {
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			return 0, net.ErrClosed
		}
		if len(s.rbuf) > 0 {
			n := copy(p, s.rbuf)
			s.rbuf = s.rbuf[n:]
			if len(s.rbuf) == 0 {
				s.rbuf = nil
			}
			s.rOff += uint64(n)
			var ack uint64
			// Ack when a quarter window was read, or all: few frames, and
			// the peer never waits on a buffer we emptied.
			if s.rOff-s.rAcked >= Window/4 || len(s.rbuf) == 0 {
				s.rAcked, ack = s.rOff, s.rOff
			}
			peerEnd := s.peerEnd
			s.mu.Unlock()
			if ack > 0 && !peerEnd {
				_ = s.send.Ack(s.id, ack)
			}
			return n, nil
		}
		if s.peerEnd {
			why := s.peerWhy
			s.mu.Unlock()
			if why == "" {
				return 0, io.EOF
			}
			return 0, errors.New(why)
		}
		dl := s.rdl
		s.mu.Unlock()
		if !dl.IsZero() && !time.Now().Before(dl) {
			return 0, os.ErrDeadlineExceeded
		}
		s.waitOn(s.rwake, dl, 0)
	}
}

// Write sends p in chunks, each once the peer's window has room; it fails
// the stream when the peer takes nothing for the stall bound.
func (s *Stream) Write(p []byte) (int, error) {
	written := 0
	var waitStart time.Time
	for len(p) > 0 {
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			return written, net.ErrClosed
		}
		if s.peerEnd {
			s.mu.Unlock()
			return written, io.ErrClosedPipe
		}
		room := Window - int(s.wOff-s.wAcked)
		if room <= 0 {
			dl := s.wdl
			s.mu.Unlock()
			now := time.Now()
			if !dl.IsZero() && !now.Before(dl) {
				return written, os.ErrDeadlineExceeded
			}
			if waitStart.IsZero() {
				waitStart = now
			}
			left := s.stall - now.Sub(waitStart)
			if left <= 0 {
				s.fail(ErrStalled)
				return written, ErrStalled
			}
			s.waitOn(s.wwake, dl, left)
			continue
		}
		waitStart = time.Time{}
		n := min(len(p), Chunk, room)
		off := s.wOff
		s.wOff += uint64(n)
		s.mu.Unlock()
		if err := s.send.Data(s.id, off, p[:n]); err != nil {
			s.fail(err)
			return written, err
		}
		written += n
		p = p[n:]
	}
	return written, nil
}

// Close ends the stream: the peer is told (unless it closed first).
func (s *Stream) Close() error { s.closeWith(nil); return nil }

// Fail closes the stream telling the peer why.
func (s *Stream) Fail(why error) { s.fail(why) }

func (s *Stream) fail(why error) { s.closeWith(why) }

func (s *Stream) closeWith(why error) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.closed, s.localWhy = true, why
	peerEnd := s.peerEnd
	s.rbuf = nil
	close(s.done)
	s.mu.Unlock()
	msg := ""
	if why != nil {
		msg = why.Error()
	}
	// A clean end after the peer's own is implied: nothing to say.
	if !peerEnd || why != nil {
		_ = s.send.Close(s.id, msg)
	}
	s.end()
}

// end runs onEnd once the local side is closed.
func (s *Stream) end() {
	s.mu.Lock()
	f := s.onEnd
	s.onEnd = nil
	s.mu.Unlock()
	if f != nil {
		f()
	}
}

type addr struct{}

func (addr) Network() string { return "rlsched-tunnel" }
func (addr) String() string  { return "worker-connection" }

func (s *Stream) LocalAddr() net.Addr  { return addr{} }
func (s *Stream) RemoteAddr() net.Addr { return addr{} }

func (s *Stream) SetDeadline(t time.Time) error {
	s.mu.Lock()
	s.rdl, s.wdl = t, t
	s.mu.Unlock()
	s.signal()
	return nil
}

func (s *Stream) SetReadDeadline(t time.Time) error {
	s.mu.Lock()
	s.rdl = t
	s.mu.Unlock()
	s.signal()
	return nil
}

func (s *Stream) SetWriteDeadline(t time.Time) error {
	s.mu.Lock()
	s.wdl = t
	s.mu.Unlock()
	s.signal()
	return nil
}

// Set holds the streams of one connection by id.
type Set struct {
	mu      sync.Mutex
	streams map[uint64]*Stream
	closed  bool
}

func NewSet() *Set { return &Set{streams: map[uint64]*Stream{}} }

// Open makes stream id in the set; nil when the id is taken or the set
// closed.
func (t *Set) Open(id uint64, s Sender) *Stream {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed || t.streams[id] != nil {
		return nil
	}
	st := New(id, s, func() { t.remove(id) })
	t.streams[id] = st
	return st
}

func (t *Set) remove(id uint64) {
	t.mu.Lock()
	delete(t.streams, id)
	t.mu.Unlock()
}

// Get returns stream id, or nil.
func (t *Set) Get(id uint64) *Stream {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.streams[id]
}

// Len is the number of open streams.
func (t *Set) Len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.streams)
}

// CloseAll closes every stream (the connection ended) and refuses new ones.
func (t *Set) CloseAll(why string) {
	t.mu.Lock()
	t.closed = true
	ss := make([]*Stream, 0, len(t.streams))
	for _, s := range t.streams {
		ss = append(ss, s)
	}
	t.mu.Unlock()
	for _, s := range ss {
		s.PeerClosed(why)
		s.fail(errors.New(why))
	}
}
