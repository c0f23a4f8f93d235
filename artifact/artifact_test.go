package artifact

import (
	"errors"
	"io"
	"strings"
	"testing"
)

func TestHasherSizes(t *testing.T) {
	f := func(src string, size int64, wantErr error) {
		t.Helper()
		h := NewHasher(size)
		_, err := io.ReadAll(h.Reader(t.Context(), strings.NewReader(src)))
		if !errors.Is(err, wantErr) || !errors.Is(h.Err(), wantErr) {
			t.Fatalf("%q announced as %d: read error %v, Err %v; want %v", src, size, err, h.Err(), wantErr)
		}
	}
	f("hello", 5, nil)
	f("hello", -1, nil)
	f("", 0, nil)
	f("hello", 4, ErrSize)
	f("hello", 6, ErrSize)
	f("hello", 0, ErrSize)
	f("", 1, ErrSize)
}

// A client that stops reading at the announced size, or never reads at
// size 0: Finish looks one byte further.
func TestHasherFinish(t *testing.T) {
	f := func(src string, size int64, read int, wantErr error) {
		t.Helper()
		r := strings.NewReader(src)
		h := NewHasher(size)
		if _, err := io.ReadFull(h.Reader(t.Context(), r), make([]byte, read)); err != nil {
			t.Fatalf("%q: reading %d bytes: %v", src, read, err)
		}
		if err := h.Finish(t.Context(), r); !errors.Is(err, wantErr) {
			t.Fatalf("%q announced as %d, %d read: Finish = %v, want %v", src, size, read, err, wantErr)
		}
	}
	f("hello", 5, 5, nil)
	f("hello", 0, 0, ErrSize)
	f("", 0, 0, nil)
	f("hello!", 5, 5, ErrSize)
	f("hello", -1, 2, nil) // unknown size: nothing to check
}

func TestHasherSumAndClose(t *testing.T) {
	h := NewHasher(-1)
	r := h.Reader(t.Context(), strings.NewReader("abc"))
	if _, err := io.ReadAll(r); err != nil {
		t.Fatal(err)
	}
	if b := h.Sum(); b.Size != 3 || b.SHA256 != "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad" {
		t.Fatalf("Sum = %+v", b)
	}
	h.Close()
	if _, err := r.Read(make([]byte, 1)); err == nil {
		t.Fatal("a read after Close succeeded")
	}
}

func TestCheckRange(t *testing.T) {
	f := func(size, off, n, want int64, wantErr bool) {
		t.Helper()
		got, err := CheckRange(size, off, n)
		if (err != nil) != wantErr || (!wantErr && got != want) || (wantErr && !errors.Is(err, ErrRange)) {
			t.Fatalf("CheckRange(%d, %d, %d) = %d, %v", size, off, n, got, err)
		}
	}
	f(10, 0, -1, 10, false)
	f(10, 3, -1, 7, false)
	f(10, 10, -1, 0, false)
	f(10, 10, 0, 0, false)
	f(10, 2, 8, 8, false)
	f(10, 11, -1, 0, true)
	f(10, -1, 1, 0, true)
	f(10, 2, 9, 0, true)
}

func TestValidSHA256(t *testing.T) {
	ok := strings.Repeat("0123456789abcdef", 4)
	for _, s := range []string{ok} {
		if !ValidSHA256(s) || CheckSHA256(s) != nil {
			t.Fatalf("%q refused", s)
		}
	}
	for _, s := range []string{"", ok[:63], ok + "0", strings.ToUpper(ok), ok[:63] + "g", "../" + ok[3:]} {
		if ValidSHA256(s) || CheckSHA256(s) == nil {
			t.Fatalf("%q accepted", s)
		}
	}
}
