// Package artifact defines the blob store that keeps run outputs
// (checkpoints, TensorBoard files, anything under RLSCHED_OUTPUT_DIR):
// content-addressed by sha256, so the same bytes are stored once whichever
// run, attempt or path they came from. Which path of which run holds which
// blob is the store's index (store), not this package's business.
//
// Backends live below: disk (ARTIFACT_DIR) and s3 (any S3-compatible
// bucket); artifacttest is the conformance suite both pass. This package
// does no I/O of its own: it holds the interface, the digest rules and the
// hashing of a caller's reader.
package artifact

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"sync"
	"sync/atomic"
)

// Blob describes one stored blob.
type Blob struct {
	// SHA256 is the lower-case hex digest of the bytes, the blob's name.
	SHA256 string
	Size   int64
}

// Store is a content-addressed blob store. Every method is safe for
// concurrent use, also by several processes (masters) sharing one
// ARTIFACT_DIR or bucket. Missing blobs are reported as errors wrapping
// core.ErrNotFound.
type Store interface {
	// Put stores everything r yields and returns its digest and size. size
	// is the length the caller expects, or -1 when unknown; a different
	// length is ErrSize (Put reads one byte past size to see r end there,
	// so r must end, not block, after its bytes). Put streams: memory stays bounded whatever the
	// size (the s3 backend holds one multipart part). Until it returns
	// successfully nothing of the new blob is visible: a reader that fails
	// midway, a wrong size or a cancelled ctx leave no blob behind. Putting
	// bytes that are already stored succeeds and keeps one copy. Put hashes
	// as it writes (one pass over the bytes); a caller that knows the digest
	// beforehand calls Stat first and skips the Put when the blob is there.
	Put(ctx context.Context, r io.Reader, size int64) (Blob, error)
	// Open returns the n bytes of blob sum that start at off; n < 0 reads
	// to the end. A range past the end of the blob is ErrRange; Stat first
	// to answer an HTTP Range request.
	Open(ctx context.Context, sum string, off, n int64) (io.ReadCloser, error)
	// Stat returns the blob's size.
	Stat(ctx context.Context, sum string) (Blob, error)
	// Delete removes a blob (garbage collection). It does not know whether
	// the index still names it: that is the collector's job, which must
	// also spare blobs younger than its grace period, since an upload puts
	// the blob before it writes the index row that names it.
	Delete(ctx context.Context, sum string) error
}

var (
	// ErrRange means Open asked for bytes the blob does not have.
	ErrRange = errors.New("range outside the blob")
	// ErrSize means Put's reader yielded another length than announced.
	ErrSize = errors.New("size differs from the announced size")
)

// ValidSHA256 reports whether s is a sha256 digest as this package writes
// it: 64 lower-case hex digits. Backends check it before a digest touches a
// path or a key.
func ValidSHA256(s string) bool {
	if len(s) != 2*sha256.Size {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// CheckSHA256 returns an error naming s unless ValidSHA256(s).
func CheckSHA256(s string) error {
	if !ValidSHA256(s) {
		return fmt.Errorf("invalid sha256 %.80q: want 64 lower-case hex digits", s)
	}
	return nil
}

// CheckRange validates Open's off and n against a blob of size bytes and
// returns how many bytes to read.
func CheckRange(size, off, n int64) (int64, error) {
	if off < 0 || off > size || (n >= 0 && n > size-off) {
		return 0, fmt.Errorf("cannot read %d bytes at %d of a %d-byte blob: %w", n, off, size, ErrRange)
	}
	if n < 0 {
		n = size - off
	}
	return n, nil
}

// Hasher counts and hashes what passes through it; wrap Put's reader with
// Reader and read Sum when the reader is drained. Sum and Err may be
// called while another goroutine reads (an HTTP transport may still be
// reading a request body when the call that sent it returned).
type Hasher struct {
	readMu sync.Mutex // serialises reads of the source
	mu     sync.Mutex // guards the fields below
	h      hash.Hash
	n      int64
	want   int64
	err    error
	ended  bool // the source was seen to end, or to yield too much
	done   atomic.Bool
}

// NewHasher returns a Hasher for a reader of size bytes (-1: unknown).
func NewHasher(size int64) *Hasher { return &Hasher{h: sha256.New(), want: size} }

// errEnded is what a read after Close gets.
var errEnded = errors.New("read after the Put ended")

// Reader returns r with every byte read from it hashed. It reports ErrSize
// as soon as r yields more than the announced size (it reads one byte
// ahead when the announced size is reached: a source with a size must end
// there), and at EOF when it yielded less, so a wrong length never reaches
// a commit; once ctx is done the next read returns ctx's error, so a
// cancelled Put stops reading.
func (h *Hasher) Reader(ctx context.Context, r io.Reader) io.Reader {
	return &hashReader{ctx: ctx, r: r, h: h}
}

// Finish makes sure the source ended where announced, for clients that
// stop reading at the announced size (or never start, at size 0): it reads
// one byte ahead unless a read already saw the end. It returns Err.
func (h *Hasher) Finish(ctx context.Context, r io.Reader) error {
	h.mu.Lock()
	check := !h.ended && h.err == nil && h.want >= 0 && h.n == h.want
	h.mu.Unlock()
	if check {
		_, _ = (&hashReader{ctx: ctx, r: r, h: h}).lookahead(nil)
	}
	return h.Err()
}

// Close makes every later read fail without touching the source, which
// the caller may reuse once Put returned.
func (h *Hasher) Close() { h.done.Store(true) }

// Err returns the first error Reader returned other than io.EOF: the
// source's own, ErrSize or the context's. A backend whose upload failed
// reports it rather than what its client made of it.
func (h *Hasher) Err() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.err
}

// Sum returns the blob read so far.
func (h *Hasher) Sum() Blob {
	h.mu.Lock()
	defer h.mu.Unlock()
	return Blob{SHA256: hex.EncodeToString(h.h.Sum(nil)), Size: h.n}
}

type hashReader struct {
	ctx context.Context
	r   io.Reader
	h   *Hasher
}

func (r *hashReader) Read(p []byte) (int, error) {
	return r.lookahead(p)
}

// lookahead reads into p (nothing when p is empty) and, when the announced
// size is reached, one byte more to see that the source ends there.
func (r *hashReader) lookahead(p []byte) (int, error) {
	h := r.h
	if h.done.Load() {
		return 0, errEnded
	}
	if err := r.ctx.Err(); err != nil {
		h.record(err)
		return 0, err
	}
	h.readMu.Lock()
	defer h.readMu.Unlock()
	var n int
	var err error
	if len(p) > 0 {
		n, err = r.r.Read(p)
	}
	h.mu.Lock()
	h.h.Write(p[:n])
	h.n += int64(n)
	total, want := h.n, h.want
	h.mu.Unlock()
	extra := false
	if want >= 0 && total == want && err == nil {
		var one [1]byte
		m, perr := r.r.Read(one[:])
		switch {
		case m > 0:
			extra = true
		case perr != nil:
			err = perr
		}
	}
	if want >= 0 {
		if total > want || extra {
			err = fmt.Errorf("the reader yields more than the announced %d bytes: %w", want, ErrSize)
		} else if err == io.EOF && total != want {
			err = fmt.Errorf("the reader ended after %d of the announced %d bytes: %w", total, want, ErrSize)
		}
	}
	if err != nil {
		h.mu.Lock()
		h.ended = true
		h.mu.Unlock()
	}
	if err != nil && err != io.EOF {
		h.record(err)
	}
	return n, err
}

// record keeps the first error.
func (h *Hasher) record(err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.err == nil {
		h.err = err
	}
}
