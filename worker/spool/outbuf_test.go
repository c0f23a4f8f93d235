package spool

import (
	"bytes"
	"math/rand/v2"
	"os"
	"path/filepath"
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

func TestBuffer_SpillsToDiskAndBack(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "spool")
	b := NewSpilling(Limits{Memory: 100, Disk: 1 << 20, Dir: dir})
	b.segSize = 64
	var all bytes.Buffer
	for i := range 40 {
		p := bytes.Repeat([]byte{byte('a' + i%26)}, 1+i%37)
		all.Write(p)
		if _, err := b.Write(p); err != nil {
			t.Fatal(err)
		}
	}
	if b.Spilled() != int64(all.Len()-b.memUsed) || b.memUsed > 100 || b.Spilled() == 0 {
		t.Fatalf("%d bytes: %d in memory, %d spilled", all.Len(), b.memUsed, b.Spilled())
	}
	files, _ := filepath.Glob(filepath.Join(dir, "*.spill"))
	if len(files) < 2 {
		t.Fatalf("spill files %v", files)
	}
	// Read everything back in chunks that cross segments.
	var got []byte
	for off := uint64(0); off < b.End(); {
		p := b.ReadAt(off, 50)
		if len(p) == 0 {
			t.Fatalf("ReadAt(%d) empty before End %d", off, b.End())
		}
		got = append(got, p...)
		off += uint64(len(p))
	}
	if !bytes.Equal(got, all.Bytes()) {
		t.Fatal("bytes read back differ")
	}
	// Acks free the disk: once everything is acked no file is left.
	for off := uint64(0); off < b.End(); off += 33 {
		b.Ack(off)
		if p := b.ReadAt(off, 10); len(p) == 0 || !bytes.Equal(p, all.Bytes()[off:int(off)+len(p)]) {
			t.Fatalf("ReadAt(%d) after Ack = %q", off, p)
		}
	}
	b.Ack(b.End())
	if files, _ := filepath.Glob(filepath.Join(dir, "*.spill")); len(files) != 0 || b.Spilled() != 0 {
		t.Fatalf("after all acked: files %v, spilled %d", files, b.Spilled())
	}
	// Memory is free again: the next write stays in memory.
	b.Write([]byte("more"))
	if b.Spilled() != 0 || string(b.ReadAt(uint64(all.Len()), 10)) != "more" {
		t.Fatalf("after drain: spilled %d", b.Spilled())
	}
	b.Discard()
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("spool dir left after Discard: %v", err)
	}
}

// TestBuffer_RandomAgainstModel: random writes, reads and acks across
// memory and disk segments agree with a plain byte slice.
func TestBuffer_RandomAgainstModel(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	b := NewSpilling(Limits{Memory: 300, Disk: 1 << 20, Dir: t.TempDir()})
	b.segSize = 50
	var all []byte
	var acked uint64
	for step := range 5000 {
		switch rng.IntN(3) {
		case 0:
			p := make([]byte, 1+rng.IntN(80))
			for i := range p {
				p[i] = byte(rng.IntN(256))
			}
			if b.End()-acked+uint64(len(p)) > 300+1<<20 {
				continue // would block
			}
			b.Write(p)
			all = append(all, p...)
		case 1:
			if end := b.End(); end > acked {
				acked = b.Ack(acked + uint64(rng.IntN(int(end-acked)+1)))
			}
		case 2:
			end := b.End()
			if end == acked {
				continue
			}
			off := acked + uint64(rng.IntN(int(end-acked)))
			p := b.ReadAt(off, 1+rng.IntN(120))
			if len(p) == 0 || !bytes.Equal(p, all[off:off+uint64(len(p))]) {
				t.Fatalf("step %d: ReadAt(%d) = %d bytes, wrong", step, off, len(p))
			}
		}
		if b.End() != uint64(len(all)) || b.Acked() != acked {
			t.Fatalf("step %d: End %d Acked %d, want %d %d", step, b.End(), b.Acked(), len(all), acked)
		}
	}
}

func TestBuffer_DiskBoundBlocks(t *testing.T) {
	b := NewSpilling(Limits{Memory: 10, Disk: 20, Dir: t.TempDir()})
	b.Write([]byte("0123456789"))           // memory
	b.Write([]byte("abcdefghijklmnopqrst")) // disk
	if b.Spilled() != 20 {
		t.Fatalf("spilled %d", b.Spilled())
	}
	wrote := make(chan struct{})
	go func() {
		b.Write([]byte("XYZ"))
		close(wrote)
	}()
	select {
	case <-wrote:
		t.Fatal("Write did not block with memory and disk full")
	case <-time.After(50 * time.Millisecond):
	}
	b.Ack(5) // room in memory
	select {
	case <-wrote:
	case <-time.After(5 * time.Second):
		t.Fatal("Write still blocked after Ack made room")
	}
	if got := string(b.ReadAt(25, 100)); got != "pqrst" {
		t.Fatalf("ReadAt(25) = %q", got)
	}
	if got := string(b.ReadAt(30, 100)); got != "XYZ" {
		t.Fatalf("ReadAt(30) = %q", got)
	}
}

// TestBuffer_SpillFailureWaits: a spool dir that cannot be made (under a
// regular file: ENOTDIR, for root too) stops spilling; writes past memory
// then wait for acks instead of failing or dropping.
func TestBuffer_SpillFailureWaits(t *testing.T) {
	file := filepath.Join(t.TempDir(), "file")
	os.WriteFile(file, nil, 0o644)
	b := NewSpilling(Limits{Memory: 10, Disk: 1 << 20, Dir: filepath.Join(file, "spool")})
	b.Write([]byte("0123456789"))
	wrote := make(chan struct{})
	go func() {
		b.Write([]byte("abc"))
		close(wrote)
	}()
	select {
	case <-wrote:
		t.Fatal("Write past memory returned with an unusable spool dir")
	case <-time.After(50 * time.Millisecond):
	}
	if b.Err() == nil {
		t.Fatal("no spill error recorded")
	}
	b.Ack(10)
	select {
	case <-wrote:
	case <-time.After(5 * time.Second):
		t.Fatal("Write still blocked after Ack")
	}
	if got := string(b.ReadAt(10, 10)); got != "abc" {
		t.Fatalf("ReadAt(10) = %q", got)
	}
}
