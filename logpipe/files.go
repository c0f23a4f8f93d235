// Package logpipe turns the output bytes of runs into one log file per run
// (LOG_DIR/<taskId>.log, first line TRACE_ID:<traceId>, attempts after the
// first each preceded by one marker line) and into metric points.
//
// Offsets make delivery exactly-once into the file: each attempt's output is
// addressed by byte offset from 0; bytes the file already has are dropped and
// an offset past the end is refused, never padded. This version writes under
// a mutex per run; it must never be called from a gnet event loop.
package logpipe

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"sync"

	"github.com/rlsched/rlsched/core"
)

// ErrGap is returned for bytes that start past what the file holds.
var ErrGap = errors.New("gap: offset beyond stored bytes")

// markerPrefix starts the line written before the output of attempt ≥ 2.
const markerPrefix = "=== rlsched attempt "

// Files appends run output to per-run log files. Safe for concurrent use.
type Files struct {
	dir string

	mu   sync.Mutex
	runs map[string]*runFile
}

type runFile struct {
	mu      sync.Mutex
	f       *os.File
	size    int64 // file size
	attempt int   // attempt whose output the file currently ends with
	have    uint64
}

// NewFiles keeps log files in dir, creating it.
func NewFiles(dir string) (*Files, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("cannot create log dir %s: %w", dir, err)
	}
	return &Files{dir: dir, runs: map[string]*runFile{}}, nil
}

// Dir is the directory holding the files.
func (fs *Files) Dir() string { return fs.dir }

// Path returns the log file of a run; id must be valid.
func Path(dir, taskID string) (string, error) {
	if !core.ValidTaskID(taskID) {
		return "", fmt.Errorf("invalid task id %q", taskID)
	}
	return filepath.Join(dir, taskID+".log"), nil
}

func (fs *Files) get(taskID string) (*runFile, error) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if rf := fs.runs[taskID]; rf != nil {
		return rf, nil
	}
	p, err := Path(fs.dir, taskID)
	if err != nil {
		return nil, err
	}
	f, err := os.OpenFile(p, os.O_RDWR|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("cannot open log file: %w", err)
	}
	rf := &runFile{f: f}
	if err := rf.recover(); err != nil {
		f.Close()
		return nil, err
	}
	fs.runs[taskID] = rf
	return rf, nil
}

// recover reads an existing file to learn which attempt it ends with and
// how many bytes of that attempt it holds, so a restarted master continues
// exactly where the last one stopped.
func (rf *runFile) recover() error {
	st, err := rf.f.Stat()
	if err != nil {
		return fmt.Errorf("cannot stat log file: %w", err)
	}
	rf.size = st.Size()
	if rf.size == 0 {
		return nil
	}
	data, err := io.ReadAll(io.NewSectionReader(rf.f, 0, rf.size))
	if err != nil {
		return fmt.Errorf("cannot read log file: %w", err)
	}
	nl := bytes.IndexByte(data, '\n')
	if nl < 0 { // a torn header line: rewrite it
		return rf.truncate(0)
	}
	rf.attempt, rf.have = 1, uint64(len(data)-nl-1)
	for pos := nl + 1; pos < len(data); {
		i := bytes.Index(data[pos:], []byte("\n"+markerPrefix))
		if i < 0 {
			break
		}
		start := pos + i + 1
		end := bytes.IndexByte(data[start:], '\n')
		if end < 0 { // torn marker: drop it, the next write writes it again
			return rf.truncate(int64(start))
		}
		var n int
		if _, err := fmt.Sscanf(string(data[start+len(markerPrefix):start+end]), "%d", &n); err == nil && n > rf.attempt {
			rf.attempt, rf.have = n, uint64(len(data)-(start+end+1))
		}
		pos = start + end + 1
	}
	return nil
}

func (rf *runFile) truncate(n int64) error {
	if err := rf.f.Truncate(n); err != nil {
		return fmt.Errorf("cannot truncate log file: %w", err)
	}
	rf.size = n
	return nil
}

// Append writes data, the output of attempt at offset, to the run's file and
// returns how many bytes of the attempt the file now holds and the part of
// data that was new. Bytes already present are skipped; an offset past the
// end returns ErrGap with have. An attempt older than the file's current one
// is refused as stale.
func (fs *Files) Append(taskID, traceID string, attempt int, offset uint64, data []byte) (uint64, []byte, error) {
	have, skip, err := fs.append(taskID, traceID, attempt, offset, data)
	if err != nil || skip >= uint64(len(data)) {
		return have, nil, err
	}
	return have, data[skip:], nil
}

func (fs *Files) append(taskID, traceID string, attempt int, offset uint64, data []byte) (uint64, uint64, error) {
	rf, err := fs.get(taskID)
	if err != nil {
		return 0, 0, err
	}
	rf.mu.Lock()
	defer rf.mu.Unlock()
	if rf.size == 0 {
		if err := rf.write([]byte("TRACE_ID:" + traceID + "\n")); err != nil {
			return 0, 0, err
		}
		rf.attempt, rf.have = 1, 0
	}
	switch {
	case attempt < rf.attempt:
		return 0, 0, fmt.Errorf("stale attempt %d: the log is at attempt %d", attempt, rf.attempt)
	case attempt > rf.attempt:
		if err := rf.startAttempt(attempt); err != nil {
			return 0, 0, err
		}
	}
	if offset > rf.have {
		return rf.have, 0, ErrGap
	}
	skip := rf.have - offset
	if skip >= uint64(len(data)) {
		return rf.have, skip, nil
	}
	if err := rf.write(data[skip:]); err != nil {
		return rf.have, 0, err
	}
	rf.have += uint64(len(data)) - skip
	return rf.have, skip, nil
}

func (rf *runFile) startAttempt(attempt int) error {
	var marker []byte
	if rf.lastByteNotNewline() {
		marker = append(marker, '\n')
	}
	marker = append(marker, markerPrefix+strconv.Itoa(attempt)+" ===\n"...)
	if err := rf.write(marker); err != nil {
		return err
	}
	rf.attempt, rf.have = attempt, 0
	return nil
}

func (rf *runFile) lastByteNotNewline() bool {
	var b [1]byte
	if rf.size == 0 {
		return false
	}
	if _, err := rf.f.ReadAt(b[:], rf.size-1); err != nil {
		return true
	}
	return b[0] != '\n'
}

func (rf *runFile) write(p []byte) error {
	n, err := rf.f.Write(p)
	rf.size += int64(n)
	if err != nil {
		// A short write leaves bytes we did not count: cut them off so the
		// file never holds a partial frame that offsets don't describe.
		_ = rf.f.Truncate(rf.size - int64(n))
		rf.size -= int64(n)
		return fmt.Errorf("cannot write log file: %w", err)
	}
	return nil
}

// Have returns how many bytes of attempt the run's file holds.
func (fs *Files) Have(taskID string, attempt int) (uint64, error) {
	rf, err := fs.get(taskID)
	if err != nil {
		return 0, err
	}
	rf.mu.Lock()
	defer rf.mu.Unlock()
	if rf.attempt != attempt {
		return 0, nil
	}
	return rf.have, nil
}

// Close closes the run's file (it is reopened on the next Append).
func (fs *Files) Close(taskID string) {
	fs.mu.Lock()
	rf := fs.runs[taskID]
	delete(fs.runs, taskID)
	fs.mu.Unlock()
	if rf != nil {
		rf.mu.Lock()
		rf.f.Close()
		rf.mu.Unlock()
	}
}

// CloseAll closes every open file.
func (fs *Files) CloseAll() {
	fs.mu.Lock()
	runs := fs.runs
	fs.runs = map[string]*runFile{}
	fs.mu.Unlock()
	for _, rf := range runs {
		rf.mu.Lock()
		rf.f.Close()
		rf.mu.Unlock()
	}
}
