package terminal

import (
	"bytes"
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/rlsched/rlsched/internal/testkit/testutil"
)

// worker is a Sender that acks input like a worker writing to its PTY,
// on a goroutine of its own.
type worker struct {
	mu       sync.Mutex
	got      []byte
	maxChunk int
	maxOut   int // most bytes sent and not acked
	resizes  [][2]uint32
	s        *Session
	acks     chan uint64
}

func (w *worker) Input(off uint64, data []byte) error {
	w.mu.Lock()
	if uint64(len(w.got)) != off {
		w.mu.Unlock()
		return errors.New("input out of order")
	}
	w.got = append(w.got, data...)
	w.maxChunk = max(w.maxChunk, len(data))
	w.mu.Unlock()
	w.acks <- off + uint64(len(data))
	return nil
}

func (w *worker) Resize(c, r uint32) error {
	w.mu.Lock()
	w.resizes = append(w.resizes, [2]uint32{c, r})
	w.mu.Unlock()
	return nil
}

func TestPasteIsChunkedWithinTheWindow(t *testing.T) {
	h := NewHub()
	w := &worker{acks: make(chan uint64, 1024)}
	s := h.Session("t1", 1, 5, w)
	w.s = s
	// The "PTY" takes input slowly: it acks one chunk at a time, and
	// checks the window before each ack.
	go func() {
		for off := range w.acks {
			s.mu.Lock()
			out := int(s.inSent - s.inAcked)
			s.mu.Unlock()
			w.mu.Lock()
			w.maxOut = max(w.maxOut, out)
			w.mu.Unlock()
			s.Ack(off)
		}
	}()
	paste := bytes.Repeat([]byte("0123456789abcdef"), 10<<20/16) // 10 MiB
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.Write(ctx, paste); err != nil {
		t.Fatal(err)
	}
	close(w.acks)
	w.mu.Lock()
	defer w.mu.Unlock()
	if !bytes.Equal(w.got, paste) {
		t.Fatalf("the worker got %d bytes, want the paste's %d", len(w.got), len(paste))
	}
	if w.maxChunk > InputChunk || w.maxOut > InputWindow {
		t.Fatalf("largest chunk %d (limit %d), most in flight %d (window %d)", w.maxChunk, InputChunk, w.maxOut, InputWindow)
	}
}

func TestWriteWaitsForCreditAndStopsAtEnd(t *testing.T) {
	h := NewHub()
	w := &worker{acks: make(chan uint64, 1024)} // never acked
	s := h.Session("t1", 1, 5, w)
	errc := make(chan error, 1)
	go func() { errc <- s.Write(context.Background(), make([]byte, 2*InputWindow)) }()
	// It sends one window, then waits; ending the session frees it.
	testutil.WaitFor(t, 10*time.Second, "a window of input sent", func() bool { return len(w.acks) >= InputWindow/InputChunk })
	select {
	case err := <-errc:
		t.Fatalf("Write returned %v without credit", err)
	default:
	}
	h.End("t1", "SUCCEEDED")
	if err := <-errc; !errors.Is(err, ErrEnded) {
		t.Fatalf("Write after the end: %v", err)
	}
}

func TestRingResumesAndSlowViewerNeverBlocks(t *testing.T) {
	h := NewHub()
	s := h.Session("t1", 1, 5, &worker{acks: make(chan uint64, 1)})
	slow, err := s.Attach() // never reads
	if err != nil {
		t.Fatal(err)
	}
	chunk := bytes.Repeat([]byte("x"), 4096)
	var off uint64
	start := time.Now()
	for range 4096 { // 16 MiB through a viewer that reads nothing
		s.Output(off, chunk)
		off += uint64(len(chunk))
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("output took %s with a viewer that does not read", d)
	}
	s.Output(off, []byte("END"))
	out, lagged, _, err := slow.Next(context.Background())
	if err != nil || lagged == 0 || total(out) > ViewerQueue {
		t.Fatalf("slow viewer: %d bytes queued, %d dropped, %v; want at most %d and some dropped", total(out), lagged, err, ViewerQueue)
	}
	// A new viewer starts with the ring: the last RingSize bytes.
	v, _ := s.Attach()
	out, lagged, _, _ = v.Next(context.Background())
	screen := bytes.Join(out, nil)
	if len(screen) != RingSize || !bytes.HasSuffix(screen, []byte("END")) || lagged != 0 {
		t.Fatalf("ring: %d bytes ending %q, lagged %d", len(screen), screen[max(0, len(screen)-3):], lagged)
	}
	// A resent frame is not shown twice.
	s.Output(off, []byte("END"))
	s.Output(off+3, []byte("!"))
	out, _, _, _ = v.Next(context.Background())
	if got := string(bytes.Join(out, nil)); got != "!" {
		t.Fatalf("after a resend: %q", got)
	}
	v.Detach()
	h.End("t1", "SUCCEEDED")
	// What was queued before the end is still handed out, then the end.
	if out, _, _, err := slow.Next(context.Background()); err != nil || string(bytes.Join(out, nil)) != "!" {
		t.Fatalf("queued before the end: %q %v", out, err)
	}
	if _, _, why, err := slow.Next(context.Background()); !errors.Is(err, ErrEnded) || why != "SUCCEEDED" {
		t.Fatalf("end: %q %v", why, err)
	}
	if _, err := s.Attach(); !errors.Is(err, ErrEnded) {
		t.Fatalf("attach after the end: %v", err)
	}
}

func TestResizeBounds(t *testing.T) {
	w := &worker{acks: make(chan uint64, 1)}
	s := NewHub().Session("t1", 1, 5, w)
	f := func(c, r int, ok bool) {
		t.Helper()
		if err := s.Resize(c, r); (err == nil) != ok {
			t.Fatalf("Resize(%d, %d) = %v", c, r, err)
		}
	}
	f(80, 24, true)
	f(1000, 1000, true)
	f(0, 0, false)
	f(100000, 24, false)
	f(80, -1, false)
	if len(w.resizes) != 2 {
		t.Fatalf("forwarded %v", w.resizes)
	}
}

// TestConcurrent runs output, viewers, input and acks together (-race).
func TestConcurrent(t *testing.T) {
	h := NewHub()
	w := &worker{acks: make(chan uint64, 4096)}
	s := h.Session("t1", 1, 5, w)
	go func() {
		for off := range w.acks {
			s.Ack(off)
		}
	}()
	var wg sync.WaitGroup
	for range 4 {
		v, _ := s.Attach()
		wg.Go(func() {
			for {
				if _, _, _, err := v.Next(context.Background()); err != nil {
					return
				}
			}
		})
	}
	wg.Go(func() { _ = s.Write(context.Background(), make([]byte, 300<<10)) })
	var off uint64
	for range 2000 {
		s.Output(off, []byte("some output\r\n"))
		off += 13
	}
	wg.Go(func() { _ = s.Resize(100, 40) })
	testutil.WaitFor(t, 10*time.Second, "all input acked", func() bool { return s.inAckedNow() >= 300<<10 })
	h.End("t1", "done")
	wg.Wait()
	close(w.acks)
}

func (s *Session) inAckedNow() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.inAcked
}

func total(bs [][]byte) int {
	n := 0
	for _, b := range bs {
		n += len(b)
	}
	return n
}

// failing is a Sender whose worker is away.
type failing struct{}

func (failing) Input(uint64, []byte) error  { return errors.New("worker not connected") }
func (failing) Resize(uint32, uint32) error { return errors.New("worker not connected") }

func TestFailedSendKeepsTheWindow(t *testing.T) {
	s := NewHub().Session("t1", 1, 5, failing{})
	for range 10 { // ten failures, each would have taken a chunk of the window
		if err := s.Write(context.Background(), make([]byte, InputChunk)); err == nil {
			t.Fatal("a send that failed was reported sent")
		}
	}
	if got := s.inSentNow(); got != 0 {
		t.Fatalf("after failed sends %d bytes count as in flight", got)
	}
}

func TestGapIsReportedInBytes(t *testing.T) {
	s := NewHub().Session("t1", 1, 5, failing{})
	s.Output(100, []byte("late")) // a fresh session: no gap to report
	v, _ := s.Attach()
	s.Output(110, []byte("x")) // 6 bytes dropped by the worker
	out, lagged, _, _ := v.Next(context.Background())
	if lagged != 6 || string(bytes.Join(out, nil)) != "latex" {
		t.Fatalf("lagged %d, output %q; want 6 and the ring then the new byte", lagged, out)
	}
}

func (s *Session) inSentNow() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.inSent
}
