package artifactpipe

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"syscall"

	"github.com/rlsched/rlsched/artifact"
)

// sink is where an upload's bytes go, appended in order. Only its shard's
// goroutine uses it.
type sink interface {
	// write appends p.
	write(p []byte) error
	// commit stores what was written as a blob; the sink is done after it.
	commit(ctx context.Context) (artifact.Blob, error)
	// release lets go of the sink, keeping what another master could
	// resume (a staged file); abort gives it up and removes it.
	release()
	abort()
}

// errStagedBusy: another master holds the staged file of the upload.
var errStagedBusy = errors.New("another master is writing this upload")

// errTooManyStreams: MaxStreams uploads stream already.
var errTooManyStreams = errors.New("too many uploads stream to the store at once")

// memSink is a file of one chunk, stored from the chunk's own bytes.
type memSink struct {
	blobs artifact.Store
	data  []byte
}

func (m *memSink) write(p []byte) error {
	if m.data != nil {
		return errors.New("BUG: a one-chunk upload got a second chunk")
	}
	m.data = p
	return nil
}

func (m *memSink) commit(ctx context.Context) (artifact.Blob, error) {
	return m.blobs.Put(ctx, bytes.NewReader(m.data), int64(len(m.data)))
}

func (m *memSink) release() {}
func (m *memSink) abort()   {}

// stagedSink writes a file under the store's StageDir, hashing every byte
// it writes, and commits it by Stager.Adopt. The file is locked (flock)
// while this master writes it, so two masters never append to one file.
//
// The hash runs on a goroutine of its own, one chunk behind the writes,
// so hashing and writing use two cores; and the kernel is asked to start
// writing the file back every writebackEvery bytes, so the fsync of the
// commit finds little left to write. That request goes to a goroutine of
// its own too: sync_file_range waits when the disk's queue is full, which
// at the disk's bandwidth is most of the time, and the writer must not
// stop taking chunks (and the worker sending them) while the disk catches
// up.
type stagedSink struct {
	st      Stager
	f       *os.File
	h       hash.Hash
	n       int64
	name    string
	flushed int64       // bytes whose writeback was asked for (by write)
	hashq   chan []byte // to the hasher; closed by commit or abort
	hashed  chan struct{}
	wbq     chan int64 // to the writeback goroutine: start it up to here; closed with hashq
	wbDone  chan struct{}
}

// writebackEvery is how many bytes a staged file grows between two starts
// of its writeback (startWriteback): small enough that the disk is fed
// steadily and the commit's fsync finds at most this much not yet started.
const writebackEvery = 8 << 20

// stageName is the staged file of an upload: a hash of its key (run,
// attempt, path: no path of a worker's ever becomes a file name) and its
// version, so every master that shares the directory finds it.
func stageName(dir, taskID string, attempt int, path string, size, modNs int64) string {
	k := sha256.Sum256([]byte(taskID + "\x00" + strconv.Itoa(attempt) + "\x00" + path))
	return filepath.Join(dir, fmt.Sprintf("up-%s-%d-%d", hex.EncodeToString(k[:16]), size, modNs))
}

// openStaged opens (or creates) the staged file name, locks it and
// rehashes what it holds: the upload resumes at its length.
func openStaged(st Stager, name string) (*stagedSink, error) {
	f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return nil, fmt.Errorf("cannot open a staging file: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, errStagedBusy
		}
		return nil, fmt.Errorf("cannot lock a staging file: %w", err)
	}
	s := &stagedSink{st: st, f: f, h: sha256.New(), name: name}
	n, err := io.Copy(s.h, io.NewSectionReader(f, 0, 1<<62))
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("cannot read back a staging file: %w", err)
	}
	s.n, s.flushed = n, n
	s.hashq, s.hashed = make(chan []byte, 4), make(chan struct{})
	go func() {
		defer close(s.hashed)
		lowerPriority() // doc.go, "Priority"
		for p := range s.hashq {
			s.h.Write(p)
		}
	}()
	s.wbq, s.wbDone = make(chan int64, 1), make(chan struct{})
	go func(from int64) {
		defer close(s.wbDone)
		for to := range s.wbq {
			startWriteback(f, from, to-from)
			from = to
		}
	}(n)
	return s, nil
}

// write appends p; p must stay unchanged until commit or abort (the hasher
// reads it behind): the chunks' buffers are never reused.
func (s *stagedSink) write(p []byte) error {
	if _, err := s.f.WriteAt(p, s.n); err != nil {
		// A short write (ENOSPC) must not leave bytes a resuming master
		// would take for the upload's.
		_ = s.f.Truncate(s.n)
		return err
	}
	s.hashq <- p
	s.n += int64(len(p))
	if s.n-s.flushed >= writebackEvery {
		// Without waiting: while a writeback is being started, the next
		// one is asked for at a later crossing, over the longer range.
		select {
		case s.wbq <- s.n:
			s.flushed = s.n
		default:
		}
	}
	return nil
}

// stopHashing ends the hasher and the writeback goroutine and waits for
// them, so that neither touches the file once it is committed or closed.
func (s *stagedSink) stopHashing() {
	if s.hashq != nil {
		close(s.hashq)
		close(s.wbq)
		<-s.hashed
		<-s.wbDone
		s.hashq = nil
	}
}

func (s *stagedSink) commit(ctx context.Context) (artifact.Blob, error) {
	s.stopHashing()
	b := artifact.Blob{SHA256: hex.EncodeToString(s.h.Sum(nil)), Size: s.n}
	return b, s.st.Adopt(ctx, s.f, b) // closes the file, so unlocks it
}

func (s *stagedSink) release() {
	s.stopHashing()
	s.f.Close()
}

func (s *stagedSink) abort() {
	s.release()
	os.Remove(s.name)
}

// streamSink pipes the upload into Store.Put, started at the first write.
type streamSink struct {
	p      *Pipe
	pw     *io.PipeWriter
	done   chan putResult
	cancel context.CancelFunc
}

type putResult struct {
	b   artifact.Blob
	err error
}

var errAborted = errors.New("upload given up")

func (s *streamSink) start() error {
	if s.p.streams.Add(1) > int64(s.p.cfg.MaxStreams) {
		s.p.streams.Add(-1)
		return errTooManyStreams
	}
	pr, pw := io.Pipe()
	ctx, cancel := context.WithCancel(s.p.ctx)
	s.pw, s.cancel, s.done = pw, cancel, make(chan putResult, 1)
	go func() {
		lowerPriority() // the client's hashing and copies (doc.go, "Priority")
		b, err := s.p.cfg.Blobs.Put(ctx, pr, -1)
		pr.CloseWithError(err) // a write waiting on a failed Put returns its error
		s.done <- putResult{b, err}
	}()
	return nil
}

func (s *streamSink) write(p []byte) error {
	if s.pw == nil {
		if err := s.start(); err != nil {
			return err
		}
	}
	_, err := s.pw.Write(p)
	return err
}

func (s *streamSink) commit(ctx context.Context) (artifact.Blob, error) {
	if s.pw == nil { // nothing written: an empty file
		if err := s.start(); err != nil {
			return artifact.Blob{}, err
		}
	}
	s.pw.Close()
	select {
	case r := <-s.done:
		s.finish()
		return r.b, r.err
	case <-ctx.Done(): // a store that does not answer must not hold the shard
		s.abort()
		return artifact.Blob{}, fmt.Errorf("cannot commit the upload: %w", ctx.Err())
	}
}

func (s *streamSink) finish() {
	s.cancel()
	s.p.streams.Add(-1)
	s.pw = nil
}

func (s *streamSink) release() { s.abort() }

func (s *streamSink) abort() {
	if s.pw == nil {
		return
	}
	s.cancel()
	s.pw.CloseWithError(errAborted)
	<-s.done
	s.finish()
}
