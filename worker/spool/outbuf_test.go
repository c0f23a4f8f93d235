package spool

import (
	"bytes"
	"testing"
	"time"
)

func TestBuffer_WriteReadAck(t *testing.T) {
	b := New(1 << 10)
	for _, s := range []string{"hello ", "world", "\n"} {
		if _, err := b.Write([]byte(s)); err != nil {
			t.Fatal(err)
		}
	}
	if got := b.End(); got != 12 {
		t.Fatalf("End = %d, want 12", got)
	}
	if got := string(b.ReadAt(6, 100)); got != "world\n" {
		t.Fatalf("ReadAt(6) = %q", got)
	}
	if got := string(b.ReadAt(0, 5)); got != "hello" {
		t.Fatalf("ReadAt(0,5) = %q", got)
	}
	if got := b.Ack(6); got != 6 {
		t.Fatalf("Ack(6) = %d", got)
	}
	if b.ReadAt(0, 5) != nil {
		t.Fatal("acked bytes still readable")
	}
	if got := b.Ack(3); got != 6 {
		t.Fatalf("Ack backwards = %d, want 6", got)
	}
	if got := b.Ack(100); got != 12 {
		t.Fatalf("Ack past end = %d, want 12", got)
	}
	if b.Done() {
		t.Fatal("Done before Close")
	}
	b.Close()
	if !b.Done() {
		t.Fatal("not Done after Close with all acked")
	}
	if _, err := b.Write([]byte("x")); err != ErrClosed {
		t.Fatalf("Write after Close: %v", err)
	}
}

func TestBuffer_OffsetsSurviveCompaction(t *testing.T) {
	b := New(1 << 20)
	var all bytes.Buffer
	var acked uint64
	for i := range 1000 {
		p := bytes.Repeat([]byte{byte('a' + i%26)}, 1+i%37)
		all.Write(p)
		b.Write(p)
		if i%3 == 0 {
			acked = b.Ack(acked + uint64(i%50))
		}
		end := b.End()
		if got, want := b.ReadAt(acked, int(end-acked)), all.Bytes()[acked:end]; !bytes.Equal(got, want) {
			t.Fatalf("step %d: ReadAt(%d) mismatch", i, acked)
		}
	}
}

func TestBuffer_BackPressure(t *testing.T) {
	b := New(10)
	b.Write([]byte("0123456789"))
	wrote := make(chan struct{})
	go func() {
		b.Write([]byte("abc"))
		close(wrote)
	}()
	select {
	case <-wrote:
		t.Fatal("Write did not block on a full buffer")
	case <-time.After(50 * time.Millisecond):
	}
	b.Ack(3)
	select {
	case <-wrote:
	case <-time.After(5 * time.Second):
		t.Fatal("Write still blocked after Ack made room")
	}
	if got := string(b.ReadAt(3, 100)); got != "3456789abc" {
		t.Fatalf("after back-pressure: %q", got)
	}
}

func TestBuffer_DiscardUnblocks(t *testing.T) {
	b := New(4)
	b.Write([]byte("full"))
	done := make(chan struct{})
	go func() {
		b.Write([]byte("more"))
		close(done)
	}()
	b.Discard()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Write still blocked after Discard")
	}
	if b.ReadAt(0, 10) != nil || b.End() != 4 {
		t.Fatalf("after Discard: End %d", b.End())
	}
}
