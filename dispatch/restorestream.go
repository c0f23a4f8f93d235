package dispatch

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/rlsched/rlsched/artifact"
	"github.com/rlsched/rlsched/codec/pb"
	"github.com/rlsched/rlsched/codetree"
	"github.com/rlsched/rlsched/core"
)

// restorer gives a resumed attempt the files it starts with: their list in
// its ExecuteTask (restoreMsg), then the files themselves, streamed from
// the blob store as the worker asks for them (onRestoreAck, a
// restoreStream per run and connection). It owns the streams; the list it
// keeps of each attempt lives on its run (runRec.restore). It never reads
// the blob store or the store on an event loop (onRestoreAck only hands
// the request to the stream's goroutine) and never sends a file that is
// not in the run's list. restoreMsg is called on the scheduler's
// goroutine, onRestoreAck on the connection's event loop.
type restorer struct {
	st    restoreStore
	blobs artifact.Store // nil: this master keeps no outputs
	// warn records a warning on a run, off the caller's goroutine.
	warn func(id, code, msg string)
	log  zerolog.Logger
	// ctx ends with the dispatcher (start): streams stop with it.
	ctx context.Context
}

// restoreStore is what the restorer reads of the store.
type restoreStore interface {
	Task(ctx context.Context, id string) (core.Task, error)
	Artifacts(ctx context.Context, taskID string, attempt int) ([]core.Artifact, error)
}

// start gives the restorer the dispatcher's lifetime, before any session
// or pass can ask it for a file.
func (r *restorer) start(ctx context.Context) { r.ctx = ctx }

// restoreFiles lists the files attempt t.Attempt of t starts with: the
// newest version of each path of its earlier attempts, then of the run it
// resumes from for paths those lack; then the outputs of each run of its
// inputsFrom (issue 29), each at "<run>/<path>" and named in inputOf (the
// worker puts them under RLSCHED_INPUT_DIR, not the output dir; an own
// output at the same path, which only a run that names its dirs after its
// parents could have, is kept instead). Nil for an attempt that neither
// resumes (core.Task.Resumes) nor has inputs.
func (r *restorer) restoreFiles(ctx context.Context, t *core.Task) ([]core.Artifact, map[string]string, error) {
	if !t.Resumes() && len(t.InputsFrom) == 0 {
		return nil, nil, nil
	}
	byPath := map[string]core.Artifact{}
	var inputOf map[string]string
	add := func(id string, below int, input bool) error {
		rows, err := r.st.Artifacts(ctx, id, 0)
		if err != nil {
			return err
		}
		for _, a := range rows {
			if input {
				a.Path = id + "/" + a.Path
			}
			if _, ok := byPath[a.Path]; !ok && (below == 0 || a.Attempt < below) {
				byPath[a.Path] = a
				if input {
					if inputOf == nil {
						inputOf = map[string]string{}
					}
					inputOf[a.Path] = id
				}
			}
		}
		return nil
	}
	if t.Attempt > 1 {
		if err := add(t.ID, t.Attempt, false); err != nil {
			return nil, nil, err
		}
	}
	if t.ResumeFrom != "" && t.ResumeFrom != t.ID {
		if err := add(t.ResumeFrom, 0, false); err != nil {
			return nil, nil, err
		}
	}
	for _, id := range t.InputsFrom {
		if err := add(id, 0, true); err != nil {
			return nil, nil, err
		}
	}
	out := make([]core.Artifact, 0, len(byPath))
	for _, a := range byPath {
		out = append(out, a)
	}
	slices.SortFunc(out, func(a, b core.Artifact) int { return strings.Compare(a.Path, b.Path) })
	return out, inputOf, nil
}

// restoreMsg fills ExecuteTask's resume and restore for t, and keeps the
// list on rr for the worker's requests. A list the store cannot give now
// starts the attempt without its files, with a warning on the run (it is
// better than a run that never starts).
func (r *restorer) restoreMsg(ctx context.Context, t *core.Task, rr *runRec, msg *pb.ExecuteTask) {
	if !t.Resumes() && len(t.InputsFrom) == 0 {
		return
	}
	msg.Resume = t.Resumes() // a first attempt with inputs only starts fresh
	if r.blobs == nil {
		return // a master without outputs has none to restore
	}
	files, inputOf, err := r.restoreFiles(ctx, t)
	if err != nil {
		r.log.Warn().Str("task", t.ID).Err(err).Msg("cannot list the files to restore; the attempt starts without them")
		r.warn(t.ID, core.WarnArtifactError, fmt.Sprintf("attempt %d started without the files of earlier attempts or its inputs: %v", t.Attempt, err))
		return
	}
	set := make(map[string]core.Artifact, len(files))
	for _, a := range files {
		set[a.Path] = a
		msg.Restore = append(msg.Restore, &pb.RestoreFile{Path: a.Path, Size: a.Size, Sha256: a.SHA256, ModifiedUnixNs: a.ModifiedAt.UnixNano(),
			InputOf: inputOf[a.Path]})
	}
	rr.restore.Store(&set)
}

// restoreSet is the files rr's attempt may be sent, by path: from its
// ExecuteTask, or (a run adopted from another master) listed again.
func (r *restorer) restoreSet(ctx context.Context, rr *runRec) (map[string]core.Artifact, error) {
	if set := rr.restore.Load(); set != nil {
		return *set, nil
	}
	t, err := r.st.Task(ctx, rr.taskID)
	if err != nil {
		return nil, err
	}
	if t.Attempt != rr.attempt {
		return nil, fmt.Errorf("the run is at attempt %d, not %d", t.Attempt, rr.attempt)
	}
	files, _, err := r.restoreFiles(ctx, &t)
	if err != nil {
		return nil, err
	}
	set := make(map[string]core.Artifact, len(files))
	for _, a := range files {
		set[a.Path] = a
	}
	rr.restore.Store(&set)
	return set, nil
}

// Restore flow control.
const (
	// restoreChunk is the largest chunk of a restored file.
	restoreChunk = 1 << 20
	// maxRestoreWindow bounds what one request may ask beyond its offset,
	// whatever the worker says, so a connection's outbound buffer stays
	// far below MaxOutbound.
	maxRestoreWindow = 8 << 20
	// restoreIdle ends a stream whose worker stopped asking.
	restoreIdle = 2 * time.Minute
	// maxRestoreReads bounds the blob reads of all streams at once.
	maxRestoreReads = 16
)

// onRestoreAck takes a worker's ArtifactAck{restore}: it has offset bytes
// of path and takes window more. On the event loop: it checks the fence
// and hands the request to the run's stream on this connection, started
// here when there is none.
func (r *restorer) onRestoreAck(sess *session, a *pb.ArtifactAck) {
	rr := sess.run(a.TaskId)
	if !rr.reports(sess.workerID, a.Attempt, a.Fence) {
		refuseOutput(&r.log, sess, a.TaskId, "refusing a restore request with a stale fence", nil)
		_ = sess.send(&pb.ArtifactAck{TaskId: a.TaskId, Attempt: a.Attempt, Path: a.Path, Restore: true, Error: "fenced"})
		return
	}
	if sess.restores == nil {
		sess.restores = map[string]*restoreStream{}
	}
	st := sess.restores[a.TaskId]
	if st == nil || st.ended.Load() {
		if a.Done {
			return
		}
		st = &restoreStream{r: r, sess: sess, rr: rr, wake: make(chan struct{}, 1)}
		sess.restores[a.TaskId] = st
		go st.run()
	}
	st.want.Store(a)
	select {
	case st.wake <- struct{}{}:
	default:
	}
}

// restoreStream sends one run's restored files to one connection, as its
// worker asks for them: one file at a time, at most the asked window ahead
// of what the worker has written. Its goroutine owns everything but want.
type restoreStream struct {
	r     *restorer
	sess  *session
	rr    *runRec
	wake  chan struct{}
	want  atomic.Pointer[pb.ArtifactAck] // the newest request
	ended atomic.Bool

	ctx  context.Context // the stream's: a blob reader lives across requests
	set  map[string]core.Artifact
	code map[string]core.Artifact // the blobs of the run's code snapshot, by sha256 (coderestore.go)
	pack []codetree.PackBlob      // and its pack
	cur  core.Artifact            // the file being sent
	// curCode: cur is a blob of the code snapshot, Path its sha256.
	curCode bool
	rd      io.ReadCloser
	sent    uint64
	buf     []byte
}

// errSessionGone: the connection closed; the worker asks again on its next.
var errSessionGone = errors.New("the connection closed")

// restoreReads limits the blob reads of all streams (maxRestoreReads).
var restoreReads = make(chan struct{}, maxRestoreReads)

func (st *restoreStream) run() {
	defer st.ended.Store(true)
	var cancel context.CancelFunc
	st.ctx, cancel = context.WithCancel(st.r.ctx)
	defer cancel()
	defer st.close()
	idle := time.NewTimer(restoreIdle)
	defer idle.Stop()
	for {
		select {
		case <-st.wake:
		case <-st.sess.quit:
			return
		case <-st.r.ctx.Done():
			return
		case <-idle.C:
			return
		}
		idle.Reset(restoreIdle)
		a := st.want.Load()
		if a.Done {
			return
		}
		if err := st.serve(a); errors.Is(err, errSessionGone) || st.sess.closed.Load() {
			return
		} else if err != nil {
			st.r.log.Warn().Str("task", st.rr.taskID).Str("path", a.Path).Err(err).Msg("cannot restore a file")
			_ = st.sess.send(&pb.ArtifactAck{TaskId: a.TaskId, Attempt: a.Attempt, Path: a.Path, Restore: true,
				Code: a.Code, Error: "failed: " + err.Error()})
			st.r.warn(st.rr.taskID, core.WarnArtifactError, fmt.Sprintf("attempt %d started without %s: %v", st.rr.attempt, a.Path, err))
			st.close()
		}
	}
}

func (st *restoreStream) close() {
	if st.rd != nil {
		st.rd.Close()
		st.rd = nil
	}
	st.cur = core.Artifact{}
}

// serve sends the bytes of a.path from what was sent up to a.offset +
// a.window (opening the file, or reopening it where the worker has it).
func (st *restoreStream) serve(a *pb.ArtifactAck) error {
	ctx, cancel := context.WithTimeout(st.ctx, 30*time.Second)
	defer cancel()
	if st.r.blobs == nil {
		return errors.New("this master keeps no outputs")
	}
	f, err := st.file(ctx, a)
	if err != nil {
		return err
	}
	if a.Offset > uint64(f.Size) {
		return fmt.Errorf("offset %d past the file's %d bytes", a.Offset, f.Size)
	}
	if st.rd == nil || st.cur.Path != f.Path || st.curCode != a.Code || a.Offset > st.sent {
		st.close()
		rd, err := st.open(f, a.Code, int64(a.Offset))
		if err != nil {
			return err
		}
		st.rd, st.cur, st.curCode, st.sent = rd, f, a.Code, a.Offset
	}
	limit := min(a.Offset+uint64(min(a.Window, maxRestoreWindow)), uint64(f.Size))
	if st.buf == nil {
		st.buf = make([]byte, restoreChunk)
	}
	for st.sent < limit || (st.sent == 0 && f.Size == 0 && a.Offset == 0) {
		n := int(min(uint64(len(st.buf)), limit-st.sent))
		restoreReads <- struct{}{}
		_, err := io.ReadFull(st.rd, st.buf[:n])
		<-restoreReads
		if err != nil {
			return fmt.Errorf("cannot read the stored file: %w", err)
		}
		last := st.sent+uint64(n) == uint64(f.Size)
		if err := st.sess.send(&pb.ArtifactChunk{TaskId: a.TaskId, Attempt: a.Attempt, Fence: a.Fence, Path: f.Path,
			Offset: st.sent, Data: st.buf[:n], Last: last, Size: f.Size, ModifiedUnixNs: f.ModifiedAt.UnixNano(), Restore: true,
			Code: a.Code}); err != nil {
			return errSessionGone
		}
		st.sent += uint64(n)
		if last {
			st.close()
			break
		}
	}
	return nil
}
