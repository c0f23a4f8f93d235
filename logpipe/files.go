package logpipe

import (
	"bytes"
	"container/list"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/rlsched/rlsched/core"
)

// ErrGap is returned for bytes that start past what the file holds.
var ErrGap = errors.New("gap: offset beyond stored bytes")

// markerPrefix starts the line written before the output of attempt ≥ 2.
const markerPrefix = "=== rlsched attempt "

// capPrefix starts the line written once, when a run's log reaches its cap
// (WriterConfig.MaxRunLogBytes); nothing is written after it.
const capPrefix = "=== rlsched: this run's log reached "

func capMarker(lastNL bool, max int64) []byte {
	var mk []byte
	if !lastNL {
		mk = append(mk, '\n')
	}
	mk = append(mk, capPrefix...)
	mk = strconv.AppendInt(mk, max, 10)
	return append(mk, " bytes (RUN_MAX_LOG_BYTES); the rest of its output is not stored ===\n"...)
}

// Path returns the log file of a run, or of a multi-node group's member
// (taskID a core.LogKey); the id must be valid.
func Path(dir, taskID string) (string, error) {
	id, rank, ok := core.ParseLogKey(taskID)
	if !ok {
		return "", fmt.Errorf("invalid task id %q", taskID)
	}
	return filepath.Join(dir, core.LogFile(id, rank)), nil
}

// fileState is what the master knows of a run's log file.
type fileState struct {
	size    int64  // file size
	attempt int    // attempt whose output the file ends with; 0 while empty
	have    uint64 // bytes of that attempt's output in the file, or acked past the cap
	lastNL  bool   // the file ends with '\n'
	// capped: the file reached its cap and ends with the cap marker; output
	// is acked and not stored (have then counts what was acked).
	capped bool
}

// piece is a part of a staged write: header, marker or output.
type piece struct {
	b       []byte
	attempt int    // for output: the attempt it belongs to; 0 for header/marker
	offset  uint64 // for output: offset of b[0] in the attempt's output
	// drop: output past the run's cap, acked and fed to the metric
	// extractor but not written.
	drop bool
}

// stage computes what appending data (attempt's output at offset) does to
// the file described by st, appending the bytes to write to pieces. It
// returns the fresh part of data (possibly empty). Bytes already present are
// skipped; an offset past the end is ErrGap; an older attempt is refused.
// Output that would take the file past maxSize (≤ 0: no cap) is cut there,
// the cap marker written after it, and it and all later output of the run
// staged as dropped.
func (st *fileState) stage(pieces []piece, traceID string, attempt int, offset uint64, data []byte, maxSize int64) ([]piece, []byte, error) {
	if attempt < 1 {
		return pieces, nil, fmt.Errorf("invalid attempt %d", attempt)
	}
	if st.size == 0 && st.attempt == 0 {
		h := []byte("TRACE_ID:" + strings.ReplaceAll(traceID, "\n", " ") + "\n")
		pieces = append(pieces, piece{b: h})
		st.size += int64(len(h))
		st.attempt, st.have, st.lastNL = 1, 0, true
	}
	switch {
	case attempt < st.attempt:
		return pieces, nil, fmt.Errorf("stale attempt %d: the log is at attempt %d", attempt, st.attempt)
	case attempt > st.attempt && st.capped:
		st.attempt, st.have = attempt, 0 // no marker after the cap's
	case attempt > st.attempt:
		var mk []byte
		if !st.lastNL {
			mk = append(mk, '\n')
		}
		mk = append(mk, markerPrefix+strconv.Itoa(attempt)+" ===\n"...)
		pieces = append(pieces, piece{b: mk})
		st.size += int64(len(mk))
		st.attempt, st.have, st.lastNL = attempt, 0, true
	}
	if st.capped {
		// Nothing is stored, so nothing can be missing: no gaps, only
		// duplicates of what was acked.
		end := offset + uint64(len(data))
		if end <= st.have {
			return pieces, nil, nil
		}
		from := max(st.have, offset)
		fresh := data[from-offset:]
		pieces = append(pieces, piece{b: fresh, attempt: attempt, offset: from, drop: true})
		st.have = end
		return pieces, fresh, nil
	}
	if offset > st.have {
		return pieces, nil, ErrGap
	}
	skip := st.have - offset
	if skip >= uint64(len(data)) {
		return pieces, nil, nil
	}
	fresh := data[skip:]
	keep := fresh
	if maxSize > 0 && st.size+int64(len(fresh)) > maxSize {
		keep = fresh[:max(maxSize-st.size, 0)]
	}
	if len(keep) > 0 {
		pieces = append(pieces, piece{b: keep, attempt: attempt, offset: st.have})
		st.size += int64(len(keep))
		st.have += uint64(len(keep))
		st.lastNL = keep[len(keep)-1] == '\n'
	}
	if len(keep) < len(fresh) {
		mk := capMarker(st.lastNL, maxSize)
		pieces = append(pieces, piece{b: mk})
		st.size += int64(len(mk))
		st.lastNL, st.capped = true, true
		rest := fresh[len(keep):]
		pieces = append(pieces, piece{b: rest, attempt: attempt, offset: st.have, drop: true})
		st.have += uint64(len(rest))
	}
	return pieces, fresh, nil
}

// runFile is one run's log file. Only its fileSet's owner touches it.
type runFile struct {
	id    string
	f     *os.File      // nil while closed; reopened on the next use
	elem  *list.Element // in fileSet.lru while f is open
	st    fileState
	known bool // st describes the file as this process last left it

	// Metric extraction, for the writer that owns the file.
	x           *extractor
	xAttempt    int
	reported    float64
	hasReported bool
	// points counts the metric points queued for the run since its state
	// was last read from the file (WriterConfig.MaxRunMetricPoints).
	points int
}

// fileSet holds the runs' log files with at most maxOpen open at once
// (least recently used closed first). Not safe for concurrent use: one
// owner, a writer goroutine.
type fileSet struct {
	dir     string
	gauge   *atomic.Int64 // files open, for Stats; may be nil
	maxOpen int
	maxRuns int // closed runs' states kept beyond this are dropped
	runs    map[string]*runFile
	lru     list.List // of *runFile with f open; front is most recent
}

func newFileSet(dir string, maxOpen int) *fileSet {
	return &fileSet{dir: dir, maxOpen: max(maxOpen, 1), maxRuns: max(4*maxOpen, 4096), runs: map[string]*runFile{}}
}

// open returns the run's file, open, its state known.
func (fs *fileSet) open(taskID string) (*runFile, error) {
	rf := fs.runs[taskID]
	if rf != nil && rf.f != nil {
		fs.lru.MoveToFront(rf.elem)
		return rf, nil
	}
	p, err := Path(fs.dir, taskID)
	if err != nil {
		return nil, err
	}
	f, err := os.OpenFile(p, os.O_RDWR|os.O_CREATE|os.O_APPEND, 0o644)
	if errors.Is(err, os.ErrNotExist) {
		// LOG_DIR itself is gone (cleaned up under us): make it again.
		if os.MkdirAll(fs.dir, 0o755) == nil {
			f, err = os.OpenFile(p, os.O_RDWR|os.O_CREATE|os.O_APPEND, 0o644)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("cannot open log file: %w", err)
	}
	if rf == nil {
		fs.trimRuns()
		rf = &runFile{id: taskID}
		fs.runs[taskID] = rf
	}
	rf.f = f
	if err := rf.recover(); err != nil {
		f.Close()
		rf.f, rf.known = nil, false
		return nil, err
	}
	rf.elem = fs.lru.PushFront(rf)
	for fs.lru.Len() > fs.maxOpen {
		fs.close(fs.lru.Back().Value.(*runFile))
	}
	fs.count()
	return rf, nil
}

// trimRuns drops the state of closed runs when there are too many; it is
// read back from their files when they are used again.
func (fs *fileSet) trimRuns() {
	if len(fs.runs) < fs.maxRuns {
		return
	}
	for id, rf := range fs.runs {
		if rf.f == nil {
			delete(fs.runs, id)
		}
		if len(fs.runs) < fs.maxRuns/2 {
			return
		}
	}
}

// close closes the run's file and keeps its state.
func (fs *fileSet) close(rf *runFile) {
	if rf.f == nil {
		return
	}
	rf.f.Close()
	rf.f = nil
	fs.lru.Remove(rf.elem)
	rf.elem = nil
	fs.count()
}

func (fs *fileSet) count() {
	if fs.gauge != nil {
		fs.gauge.Store(int64(fs.lru.Len()))
	}
}

// broken closes a file whose write failed and forgets its state, so the
// next use reads the file again.
func (fs *fileSet) broken(rf *runFile) {
	fs.close(rf)
	rf.known = false
}

// forget closes the run's file and drops everything kept about it.
func (fs *fileSet) forget(taskID string) {
	if rf := fs.runs[taskID]; rf != nil {
		fs.close(rf)
		delete(fs.runs, taskID)
	}
}

func (fs *fileSet) closeAll() {
	for _, rf := range fs.runs {
		fs.close(rf)
	}
	fs.runs = map[string]*runFile{}
}

// recover learns the state of a just opened file. A file this process left
// at the same size is trusted; anything else is read: which attempt it ends
// with and how many bytes of that attempt it holds, so a restarted master
// continues exactly where the last one stopped.
func (rf *runFile) recover() error {
	st, err := rf.f.Stat()
	if err != nil {
		return fmt.Errorf("cannot stat log file: %w", err)
	}
	if rf.known && st.Size() == rf.st.size {
		return nil
	}
	rf.st, rf.known, rf.x, rf.points = fileState{size: st.Size()}, true, nil, 0
	if rf.st.size == 0 {
		return nil
	}
	data, err := io.ReadAll(io.NewSectionReader(rf.f, 0, rf.st.size))
	if err != nil {
		rf.known = false
		return fmt.Errorf("cannot read log file: %w", err)
	}
	nl := bytes.IndexByte(data, '\n')
	if nl < 0 { // a torn header line: rewrite it
		return rf.truncate(0)
	}
	rf.st.attempt, rf.st.have = 1, uint64(len(data)-nl-1)
	rf.st.lastNL = data[len(data)-1] == '\n'
	if i := bytes.LastIndexByte(data[:len(data)-1], '\n'); rf.st.lastNL && i >= nl && bytes.HasPrefix(data[i+1:], []byte(capPrefix)) {
		// Capped (the cap marker is the last line: nothing is written after
		// it): the worker's acked offsets are past what the file holds, and
		// every offset is taken from here on (stage).
		rf.st.capped = true
		data = data[:i+1] // the attempt markers before the cap
	}
	// pos is at a '\n' (the header's, then each marker's own): a marker
	// starts a line, so one right after the header or after another marker
	// is found too (issue 11: a master that read a file whose attempt 2
	// marker followed the TRACE_ID line took it for attempt 1's, marked
	// attempt 2 again and refused the worker's acked offsets as a gap).
	for pos := nl; pos < len(data); {
		i := bytes.Index(data[pos:], []byte("\n"+markerPrefix))
		if i < 0 {
			break
		}
		start := pos + i + 1
		end := bytes.IndexByte(data[start:], '\n')
		if end < 0 { // torn marker: drop it, the next write writes it again
			if err := rf.truncate(int64(start)); err != nil {
				return err
			}
			rf.st.lastNL = true // data[start-1] is the '\n' before the marker
			return nil
		}
		var n int
		if _, err := fmt.Sscanf(string(data[start+len(markerPrefix):start+end]), "%d", &n); err == nil && n > rf.st.attempt {
			rf.st.attempt, rf.st.have = n, uint64(len(data)-(start+end+1))
		}
		pos = start + end
	}
	if rf.st.capped {
		rf.st.have = 0
	}
	return nil
}

func (rf *runFile) truncate(n int64) error {
	if err := rf.f.Truncate(n); err != nil {
		rf.known = false
		return fmt.Errorf("cannot truncate log file: %w", err)
	}
	if n == 0 {
		rf.st = fileState{}
	} else {
		rf.st.have -= uint64(rf.st.size - n)
	}
	rf.st.size = n
	return nil
}

// write appends p at the end of the file. A failed or short write is cut
// off again, so the file never holds bytes its offsets do not describe; the
// caller then treats the file as broken.
func (rf *runFile) write(p []byte) error {
	n, err := rf.f.Write(p)
	if err != nil {
		if n > 0 {
			_ = rf.f.Truncate(rf.st.size)
		}
		return fmt.Errorf("cannot write log file %s.log: %w", rf.id, err)
	}
	return nil
}

// writev appends the slices with as few writev(2) calls as it takes, so a
// batch of a run's frames reaches the file without first being copied into
// one buffer. A partial write is undone like write's. iov is not modified.
func (rf *runFile) writev(iov [][]byte) error {
	rc, err := rf.f.SyscallConn()
	if err != nil {
		return fmt.Errorf("cannot write log file %s.log: %w", rf.id, err)
	}
	var werr error
	wrote := false
	cerr := rc.Write(func(fd uintptr) bool {
		for len(iov) > 0 {
			k := min(len(iov), 1024) // IOV_MAX
			n, err := unix.Writev(int(fd), iov[:k])
			if err == unix.EINTR {
				continue
			}
			if n > 0 {
				wrote = true
			}
			if err != nil {
				werr = err
				return true
			}
			if n == 0 {
				werr = io.ErrShortWrite
				return true
			}
			for len(iov) > 0 && n >= len(iov[0]) {
				n -= len(iov[0])
				iov = iov[1:]
			}
			if n > 0 { // short write inside a slice: the caller's slices stay as they are
				iov = append([][]byte{iov[0][n:]}, iov[1:]...)
			}
		}
		return true
	})
	if werr == nil {
		werr = cerr
	}
	if werr != nil {
		if wrote {
			_ = rf.f.Truncate(rf.st.size)
		}
		return fmt.Errorf("cannot write log file %s.log: %w", rf.id, werr)
	}
	return nil
}

// tail returns up to n bytes of the file before position end, not before
// position start.
func (rf *runFile) tail(start, end int64, n int) []byte {
	from := max(start, end-int64(n))
	if from >= end {
		return nil
	}
	b := make([]byte, end-from)
	if _, err := rf.f.ReadAt(b, from); err != nil {
		return nil
	}
	return b
}
