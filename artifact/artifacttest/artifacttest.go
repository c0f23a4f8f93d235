// Package artifacttest is the conformance suite every artifact.Store
// backend must pass: round trips of several sizes, dedup, concurrent Puts
// of the same bytes, ranged reads, missing and invalid digests, Delete, and
// Puts that fail (a reader error midway, a wrong size, a cancelled context)
// leaving nothing behind, and a 64 MiB blob streamed with bounded memory.
// A case must never depend on one backend's layout (a path on disk, a key
// in a bucket): only what artifact.Store promises.
package artifacttest

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"math/rand/v2"
	"testing"

	"github.com/rlsched/rlsched/artifact"
)

// Harness tells the suite how to get backends and look inside them.
type Harness struct {
	// New returns a fresh, empty store for one test (a directory or a key
	// prefix of its own).
	New func(t *testing.T) artifact.Store
	// List returns every object the store given by New holds, committed or
	// not: blob files, temporary files, temporary keys, unfinished
	// multipart uploads. The suite checks with it that dedup keeps one copy
	// and that a failed Put leaves nothing.
	List func(t *testing.T, s artifact.Store) []string
	// MaxPutAlloc bounds the heap a Put of the 64 MiB blob may allocate
	// (default 16 MiB): proof that no backend buffers a whole file. The s3
	// backend needs one multipart part and some.
	MaxPutAlloc uint64
}

// Run runs the whole suite, one subtest per behaviour, each on a fresh
// store:
//
//	artifacttest.Run(t, artifacttest.Harness{
//		New:  func(t *testing.T) artifact.Store { s, _ := disk.Open(t.TempDir()); return s },
//		List: listFiles,
//	})
func Run(t *testing.T, h Harness) {
	if h.New == nil || h.List == nil {
		t.Fatal("artifacttest: Harness.New and Harness.List are required")
	}
	if h.MaxPutAlloc == 0 {
		h.MaxPutAlloc = 16 << 20
	}
	tests := []struct {
		name string
		f    func(t *testing.T, h Harness)
	}{
		{"RoundTrip", testRoundTrip},
		{"Dedup", testDedup},
		{"ConcurrentPuts", testConcurrentPuts},
		{"Ranges", testRanges},
		{"NotFound", testNotFound},
		{"InvalidDigest", testInvalidDigest},
		{"Delete", testDelete},
		{"ReaderFails", testReaderFails},
		{"WrongSize", testWrongSize},
		{"Cancelled", testCancelled},
		{"Large", testLarge},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { tc.f(t, h) })
	}
}

// content returns n deterministic pseudo-random bytes; seeds give distinct
// contents.
func content(seed uint64, n int) []byte {
	b := make([]byte, n)
	stream(seed, int64(n)).Read(b)
	return b
}

// stream yields n pseudo-random bytes without holding them.
func stream(seed uint64, n int64) io.Reader {
	var key [32]byte
	key[0], key[1] = byte(seed), byte(seed>>8)
	return io.LimitReader(rand.NewChaCha8(key), n)
}

func digest(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// put stores b and checks the returned blob.
func put(t *testing.T, s artifact.Store, b []byte, size int64) artifact.Blob {
	t.Helper()
	got, err := s.Put(t.Context(), byteReader(b), size)
	if err != nil {
		t.Fatalf("Put of %d bytes (announced %d): %v", len(b), size, err)
	}
	if want := (artifact.Blob{SHA256: digest(b), Size: int64(len(b))}); got != want {
		t.Fatalf("Put of %d bytes = %+v, want %+v", len(b), got, want)
	}
	return got
}

// byteReader is a plain stream over b, as from the network: no Seek, no
// WriterTo, no ReaderAt for a backend to take a shortcut through.
func byteReader(b []byte) io.Reader { return &sliceReader{b: b} }

type sliceReader struct{ b []byte }

func (r *sliceReader) Read(p []byte) (int, error) {
	if len(r.b) == 0 {
		return 0, io.EOF
	}
	n := copy(p, r.b)
	r.b = r.b[n:]
	return n, nil
}

// read returns the bytes of Open(sum, off, n).
func read(t *testing.T, s artifact.Store, sum string, off, n int64) []byte {
	t.Helper()
	rc, err := s.Open(t.Context(), sum, off, n)
	if err != nil {
		t.Fatalf("Open(%.12s…, %d, %d): %v", sum, off, n, err)
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		t.Fatalf("reading Open(%.12s…, %d, %d): %v", sum, off, n, err)
	}
	return b
}

// wantObjects fails unless the store holds exactly n objects.
func (h Harness) wantObjects(t *testing.T, s artifact.Store, n int, why string) {
	t.Helper()
	if got := h.List(t, s); len(got) != n {
		t.Fatalf("%s: the store holds %d objects %q, want %d", why, len(got), got, n)
	}
}

func wantIs(t *testing.T, what string, err, target error) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Fatalf("%s: got error %v, want %v", what, err, target)
	}
}

// cancelAfter cancels a context once n bytes were read through it.
type cancelAfter struct {
	r      io.Reader
	n      int64
	cancel context.CancelFunc
}

func (c *cancelAfter) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n -= int64(n)
	if c.n <= 0 {
		c.cancel()
	}
	return n, err
}
