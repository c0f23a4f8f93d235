package tunnel

import (
	"bytes"
	"crypto/rand"
	"errors"
	"io"
	"os"
	"sync"
	"testing"
	"time"
)

// wire joins two streams as the two ends of a connection would: each
// side's frames are delivered to the other's stream, in order.
type wire struct {
	mu    sync.Mutex
	peer  *Stream
	bytes int // data sent and not yet acked by the peer, as the peer sees it
	drop  bool
}

func (w *wire) Data(_ uint64, off uint64, data []byte) error {
	w.peer.Deliver(off, append([]byte(nil), data...))
	return nil
}
func (w *wire) Ack(_ uint64, off uint64) error   { w.peer.Ack(off); return nil }
func (w *wire) Close(_ uint64, why string) error { w.peer.PeerClosed(why); return nil }

func pair() (*Stream, *Stream) {
	wa, wb := &wire{}, &wire{}
	a, b := New(1, wa, nil), New(1, wb, nil)
	wa.peer, wb.peer = b, a
	a.Ack(0)
	b.Ack(0)
	return a, b
}

func TestStreamCarriesBytesBothWays(t *testing.T) {
	a, b := pair()
	want := make([]byte, 3<<20) // many windows
	_, _ = rand.Read(want)
	errc := make(chan error, 1)
	go func() {
		_, err := a.Write(want)
		if err == nil {
			err = a.Close()
		}
		errc <- err
	}()
	got, err := io.ReadAll(b)
	if err != nil {
		t.Fatalf("read: %v", err)
	}
	if err := <-errc; err != nil {
		t.Fatalf("write: %v", err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("got %d bytes, not the %d written", len(got), len(want))
	}
	if _, err := b.Write([]byte("x")); err == nil {
		t.Fatal("a write to a stream its peer closed succeeded")
	}
}

func TestStreamBoundsWhatItBuffersAndFailsAStalledWriter(t *testing.T) {
	a, b := pair()
	a.SetStall(200 * time.Millisecond)
	start := time.Now()
	n, err := a.Write(make([]byte, 4*Window)) // b never reads
	if !errors.Is(err, ErrStalled) {
		t.Fatalf("a writer whose peer reads nothing: %d, %v", n, err)
	}
	if n != Window {
		t.Fatalf("wrote %d bytes past a peer that reads nothing; the window is %d", n, Window)
	}
	if time.Since(start) > 5*time.Second {
		t.Fatalf("the stall took %s", time.Since(start))
	}
	b.mu.Lock()
	buffered := len(b.rbuf)
	b.mu.Unlock()
	if buffered > Window {
		t.Fatalf("the reader buffers %d bytes, over the window", buffered)
	}
	// The peer is told why: its read drains, then fails with the reason.
	buf := make([]byte, 2*Window)
	total := 0
	for {
		k, err := b.Read(buf)
		total += k
		if err != nil {
			if err == io.EOF || !bytes.Contains([]byte(err.Error()), []byte("took nothing")) {
				t.Fatalf("the peer's read ends with %v, not the stall", err)
			}
			break
		}
	}
	if total != Window {
		t.Fatalf("the peer read %d bytes, want %d", total, Window)
	}
}

func TestStreamDeadlinesAndProtocolErrors(t *testing.T) {
	a, b := pair()
	_ = b.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	if _, err := b.Read(make([]byte, 8)); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read past its deadline: %v", err)
	}
	_ = b.SetReadDeadline(time.Time{})
	// A gap in the offsets fails the stream on both sides.
	b.Deliver(100, []byte("x"))
	if _, err := b.Read(make([]byte, 8)); err == nil {
		t.Fatal("a stream read after a gap in its offsets")
	}
	if _, err := a.Read(make([]byte, 8)); err == nil || !bytes.Contains([]byte(err.Error()), []byte("window or offsets")) {
		t.Fatalf("the peer of a broken stream reads %v", err)
	}
}

func TestSetCloseAllEndsStreams(t *testing.T) {
	set := NewSet()
	w := &wire{}
	s := set.Open(7, w)
	peer := New(7, &wire{peer: s}, nil)
	w.peer = peer
	if set.Open(7, w) != nil {
		t.Fatal("an id opened twice")
	}
	set.CloseAll("the worker's connection closed")
	if _, err := s.Read(make([]byte, 1)); err == nil {
		t.Fatal("a stream of a closed set reads")
	}
	if set.Len() != 0 || set.Open(8, w) != nil {
		t.Fatalf("a closed set holds %d streams or opens new ones", set.Len())
	}
}
