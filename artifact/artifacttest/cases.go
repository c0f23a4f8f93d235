package artifacttest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/rlsched/rlsched/artifact"
	"github.com/rlsched/rlsched/core"
)

// Sizes around the edges: empty, one byte, a read buffer, and past the s3
// backend's multipart part size (16 MiB), with the size announced and not.
func testRoundTrip(t *testing.T, h Harness) {
	s := h.New(t)
	for i, n := range []int{0, 1, 32<<10 + 7, 17<<20 + 3} {
		for _, known := range []bool{true, false} {
			b := content(uint64(100+i), n)
			size := int64(-1)
			if known {
				size = int64(n)
			}
			blob := put(t, s, b, size)
			st, err := s.Stat(t.Context(), blob.SHA256)
			if err != nil || st != blob {
				t.Fatalf("Stat after Put of %d bytes = %+v, %v; want %+v", n, st, err, blob)
			}
			if got := read(t, s, blob.SHA256, 0, -1); !bytes.Equal(got, b) {
				t.Fatalf("Open of a %d-byte blob read %d bytes that differ", n, len(got))
			}
		}
	}
	h.wantObjects(t, s, 4, "four distinct contents, each put twice")
}

// The same bytes put again, with and without a size, keep one copy.
func testDedup(t *testing.T, h Harness) {
	s := h.New(t)
	b := content(1, 300<<10)
	first := put(t, s, b, int64(len(b)))
	put(t, s, b, -1)
	put(t, s, b, int64(len(b)))
	h.wantObjects(t, s, 1, "one content put three times")
	other := put(t, s, content(2, 300<<10), -1)
	if other.SHA256 == first.SHA256 {
		t.Fatal("two different contents got one digest")
	}
	h.wantObjects(t, s, 2, "two contents")
	if got := read(t, s, first.SHA256, 0, -1); !bytes.Equal(got, b) {
		t.Fatal("the deduplicated blob reads back other bytes")
	}
}

// Sixteen Puts of one content at the same moment all succeed with the
// same digest, and one copy stays, intact.
func testConcurrentPuts(t *testing.T, h Harness) {
	s := h.New(t)
	b := content(3, 1<<20+11)
	const n = 16
	var (
		start = make(chan struct{})
		wg    sync.WaitGroup
		blobs [n]artifact.Blob
		errs  [n]error
	)
	for i := range n {
		wg.Go(func() {
			<-start
			blobs[i], errs[i] = s.Put(t.Context(), byteReader(b), int64(len(b)))
		})
	}
	close(start)
	wg.Wait()
	want := artifact.Blob{SHA256: digest(b), Size: int64(len(b))}
	for i := range n {
		if errs[i] != nil || blobs[i] != want {
			t.Fatalf("concurrent Put %d = %+v, %v; want %+v", i, blobs[i], errs[i], want)
		}
	}
	h.wantObjects(t, s, 1, "one content put 16 times at once")
	if got := read(t, s, want.SHA256, 0, -1); !bytes.Equal(got, b) {
		t.Fatal("the blob put concurrently reads back other bytes")
	}
}

func testRanges(t *testing.T, h Harness) {
	s := h.New(t)
	b := content(4, 10_000)
	sum := put(t, s, b, -1).SHA256
	size := int64(len(b))
	for _, c := range []struct{ off, n int64 }{
		{0, -1}, {0, size}, {0, 0}, {0, 1}, {10, 20}, {size - 1, 1}, {size - 1, -1},
		{size - 5, 5}, {size, 0}, {size, -1}, {4096, 4096},
	} {
		want := b[c.off:]
		if c.n >= 0 {
			want = want[:c.n]
		}
		if got := read(t, s, sum, c.off, c.n); !bytes.Equal(got, want) {
			t.Fatalf("Open(%d, %d) read %d bytes, want %d bytes of the blob", c.off, c.n, len(got), len(want))
		}
	}
	for _, c := range []struct{ off, n int64 }{
		{size + 1, -1}, {size + 1, 0}, {-1, 5}, {0, size + 1}, {size - 1, 2}, {size, 1},
	} {
		rc, err := s.Open(t.Context(), sum, c.off, c.n)
		if err == nil {
			rc.Close()
		}
		wantIs(t, fmt.Sprintf("Open(%d, %d) of a %d-byte blob", c.off, c.n, size), err, artifact.ErrRange)
	}
}

func testNotFound(t *testing.T, h Harness) {
	s := h.New(t)
	put(t, s, []byte("present"), -1)
	absent := digest([]byte("absent"))
	_, err := s.Stat(t.Context(), absent)
	wantIs(t, "Stat of an absent blob", err, core.ErrNotFound)
	_, err = s.Open(t.Context(), absent, 0, -1)
	wantIs(t, "Open of an absent blob", err, core.ErrNotFound)
	wantIs(t, "Delete of an absent blob", s.Delete(t.Context(), absent), core.ErrNotFound)
}

// A digest that is not 64 lower-case hex digits is refused before it
// touches a path or a key, whatever the call.
func testInvalidDigest(t *testing.T, h Harness) {
	s := h.New(t)
	b := put(t, s, []byte("x"), 1)
	for _, bad := range []string{
		"", "..", "../../../../etc/passwd", strings.ToUpper(b.SHA256), b.SHA256[:63], b.SHA256 + "0",
		"/" + b.SHA256[1:], b.SHA256[:62] + "/.", b.SHA256[:63] + "\x00", b.SHA256[:60] + "%2e%2e",
	} {
		if _, err := s.Stat(t.Context(), bad); err == nil || errors.Is(err, core.ErrNotFound) {
			t.Fatalf("Stat(%q) = %v, want an invalid-digest error", bad, err)
		}
		if rc, err := s.Open(t.Context(), bad, 0, -1); err == nil || errors.Is(err, core.ErrNotFound) {
			if rc != nil {
				rc.Close()
			}
			t.Fatalf("Open(%q) = %v, want an invalid-digest error", bad, err)
		}
		if err := s.Delete(t.Context(), bad); err == nil || errors.Is(err, core.ErrNotFound) {
			t.Fatalf("Delete(%q) = %v, want an invalid-digest error", bad, err)
		}
	}
	h.wantObjects(t, s, 1, "after calls with invalid digests")
}

func testDelete(t *testing.T, h Harness) {
	s := h.New(t)
	b := content(5, 2000)
	keep := put(t, s, content(6, 2000), -1)
	sum := put(t, s, b, -1).SHA256
	if err := s.Delete(t.Context(), sum); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	_, err := s.Stat(t.Context(), sum)
	wantIs(t, "Stat after Delete", err, core.ErrNotFound)
	wantIs(t, "second Delete", s.Delete(t.Context(), sum), core.ErrNotFound)
	h.wantObjects(t, s, 1, "after deleting one of two blobs")
	if got := read(t, s, keep.SHA256, 0, -1); !bytes.Equal(got, content(6, 2000)) {
		t.Fatal("Delete of one blob changed another")
	}
	// Put after Delete stores the bytes again.
	put(t, s, b, int64(len(b)))
	if got := read(t, s, sum, 0, -1); !bytes.Equal(got, b) {
		t.Fatal("a blob put again after Delete reads back other bytes")
	}
}

var errBoom = errors.New("the source broke")

type failingReader struct{}

func (failingReader) Read([]byte) (int, error) { return 0, errBoom }

// A reader that fails after 3 MiB (inside the s3 backend's first part) or
// after 20 MiB (past it, into a multipart upload) fails the Put with its
// error and leaves nothing: no blob under the digest of what was read,
// no temporary file or key, no unfinished multipart upload.
func testReaderFails(t *testing.T, h Harness) {
	s := h.New(t)
	for _, n := range []int64{0, 3 << 20, 20 << 20} {
		for _, size := range []int64{-1, n + 1000} {
			r := io.MultiReader(stream(7, n), failingReader{})
			_, err := s.Put(t.Context(), r, size)
			wantIs(t, fmt.Sprintf("Put failing after %d bytes (announced %d)", n, size), err, errBoom)
			prefix := sha256.New()
			io.Copy(prefix, stream(7, n))
			_, err = s.Stat(t.Context(), hex.EncodeToString(prefix.Sum(nil)))
			wantIs(t, "Stat of the bytes read before the failure", err, core.ErrNotFound)
			h.wantObjects(t, s, 0, fmt.Sprintf("after a Put failing at %d bytes", n))
		}
	}
}

// A reader shorter or longer than announced is ErrSize, and nothing stays.
func testWrongSize(t *testing.T, h Harness) {
	s := h.New(t)
	b := content(8, 100<<10)
	for _, size := range []int64{0, 1, int64(len(b)) - 1, int64(len(b)) + 1, 2 * int64(len(b))} {
		_, err := s.Put(t.Context(), byteReader(b), size)
		wantIs(t, fmt.Sprintf("Put of %d bytes announced as %d", len(b), size), err, artifact.ErrSize)
		h.wantObjects(t, s, 0, fmt.Sprintf("after a Put of %d bytes announced as %d", len(b), size))
	}
	_, err := s.Stat(t.Context(), digest(b))
	wantIs(t, "Stat after the wrong-size Puts", err, core.ErrNotFound)
}

// A context cancelled in the middle of a Put ends it with the context's
// error, and nothing stays.
func testCancelled(t *testing.T, h Harness) {
	s := h.New(t)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	r := &cancelAfter{r: stream(9, 8<<20), n: 1 << 20, cancel: cancel}
	_, err := s.Put(ctx, r, 8<<20)
	wantIs(t, "Put cancelled after 1 MiB", err, context.Canceled)
	h.wantObjects(t, s, 0, "after a cancelled Put")
}

// A 64 MiB blob goes in and out as a stream: the Put allocates far less
// than the blob (no whole-file buffer), and what reads back hashes the
// same.
func testLarge(t *testing.T, h Harness) {
	s := h.New(t)
	const n = 64 << 20
	want := sha256.New()
	io.Copy(want, stream(10, n))
	wantSum := hex.EncodeToString(want.Sum(nil))

	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	blob, err := s.Put(t.Context(), stream(10, n), n)
	runtime.ReadMemStats(&after)
	if err != nil {
		t.Fatalf("Put of 64 MiB: %v", err)
	}
	if blob.SHA256 != wantSum || blob.Size != n {
		t.Fatalf("Put of 64 MiB = %+v, want %s", blob, wantSum)
	}
	alloc := after.TotalAlloc - before.TotalAlloc
	t.Logf("Put of 64 MiB allocated %d KiB", alloc>>10)
	if alloc > h.MaxPutAlloc {
		t.Fatalf("Put of 64 MiB allocated %d MiB, want at most %d MiB (a whole-file buffer?)",
			alloc>>20, h.MaxPutAlloc>>20)
	}
	rc, err := s.Open(t.Context(), blob.SHA256, 0, -1)
	if err != nil {
		t.Fatalf("Open of the 64 MiB blob: %v", err)
	}
	defer rc.Close()
	got := sha256.New()
	if m, err := io.Copy(got, rc); err != nil || m != n {
		t.Fatalf("reading the 64 MiB blob: %d bytes, %v", m, err)
	}
	if hex.EncodeToString(got.Sum(nil)) != wantSum {
		t.Fatal("the 64 MiB blob reads back other bytes")
	}
	// Its last MiB by range.
	tail := sha256.New()
	rest := stream(10, n)
	io.CopyN(io.Discard, rest, n-1<<20)
	io.Copy(tail, rest)
	rc2, err := s.Open(t.Context(), blob.SHA256, n-1<<20, -1)
	if err != nil {
		t.Fatalf("Open of the last MiB: %v", err)
	}
	defer rc2.Close()
	gotTail := sha256.New()
	io.Copy(gotTail, rc2)
	if !bytes.Equal(gotTail.Sum(nil), tail.Sum(nil)) {
		t.Fatal("the last MiB of the 64 MiB blob reads back other bytes")
	}
}
