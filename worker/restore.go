package worker

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"time"

	"github.com/rlsched/rlsched/codec/pb"
	"github.com/rlsched/rlsched/core"
)

// The restore of a resumed attempt (ExecuteTask.restore): before its
// process starts, the worker writes the newest version of every file of
// the run's earlier attempts (or of the run it resumes from) into its new
// output dir, owned by the run's uid, with the version's mtime, so the run
// finds them and the uploader does not send them back. It asks the master
// for each file with ArtifactAck{restore, offset: what it has, window}; the
// master sends ArtifactChunk{restore} up to that window ahead. One run
// restores at a time on a worker (restoreSem), so the windows of a
// connection add up to one.

const (
	// restoreWindow is what the worker asks for beyond what it has.
	restoreWindow = 8 << 20
	// restoreStall gives up a file whose bytes stopped coming.
	restoreStall = 2 * time.Minute
)

// restoreItem is a chunk of a restored file, or the master's refusal.
type restoreItem struct {
	chunk   *pb.ArtifactChunk
	refused *pb.ArtifactAck
}

// restoreChunk hands a chunk of a restored file to its run's restore.
// Reader goroutine; never blocks (the master sends at most the window
// ahead, which the channel holds).
func (a *agent) restoreChunk(m *pb.ArtifactChunk) {
	if !m.GetRestore() {
		return
	}
	a.mu.Lock()
	var ch chan restoreItem
	if r := a.runs[m.GetTaskId()]; r != nil && r.attempt == m.GetAttempt() && r.restoring && r.outs != nil {
		ch = r.outs.restoreCh
	}
	a.mu.Unlock()
	if ch == nil {
		return
	}
	select {
	case ch <- restoreItem{chunk: m}:
	default:
		a.log.Warn().Str("task", m.GetTaskId()).Msg("restore chunk dropped: the master sent more than the window asked for")
	}
}

// restoreRefused hands the master's refusal of a restored file to the
// restore. Caller holds agent.mu.
func (o *outputs) restoreRefused(m *pb.ArtifactAck) {
	if o.r.restoring {
		select {
		case o.restoreCh <- restoreItem{refused: m}:
		default:
		}
	}
}

// restore writes files into the run's output dir; it returns early when the
// run is stopped (outputs.quit). Files it cannot restore are logged and
// left out: the run starts with the others (the master puts a warning on
// the run for what it could not send).
func (a *agent) restore(r *run, files []*pb.RestoreFile) {
	o := r.outs
	select {
	case a.restoreSem <- struct{}{}:
	case <-o.quit:
		return
	}
	defer func() { <-a.restoreSem }()
	began := time.Now()
	var bytes int64
	restored := 0
	for _, f := range files {
		n, err := a.restoreFile(r, f)
		select {
		case <-o.quit:
			return
		default:
		}
		if err != nil {
			r.log.Warn().Str("path", f.GetPath()).Err(err).Msg("cannot restore a file of an earlier attempt; the run starts without it")
			continue
		}
		restored++
		bytes += n
	}
	a.mu.Lock()
	o.restoreAck = &pb.ArtifactAck{TaskId: r.id, Attempt: r.attempt, Fence: r.fence, Restore: true, Done: true}
	a.kickLocked()
	a.mu.Unlock()
	r.log.Info().Int("files", restored).Int("of", len(files)).Int64("bytes", bytes).Dur("took", time.Since(began)).Msg("restored the outputs of earlier attempts")
}

// restoreFile restores one file and returns its size.
func (a *agent) restoreFile(r *run, f *pb.RestoreFile) (int64, error) {
	o := r.outs
	if err := core.CheckArtifactPath(f.GetPath()); err != nil {
		return 0, err
	}
	if f.GetSize() < 0 {
		return 0, fmt.Errorf("size %d", f.GetSize())
	}
	out, err := o.dir.create(f.GetPath(), r.ident)
	if err != nil {
		return 0, err
	}
	ok := false
	defer func() {
		if !ok {
			out.Close()
			o.dir.remove(f.GetPath())
		}
	}()
	h := sha256.New()
	var have uint64
	var gen uint64
	ask := func() {
		a.mu.Lock()
		o.restoreAck = &pb.ArtifactAck{TaskId: r.id, Attempt: r.attempt, Fence: r.fence, Path: f.GetPath(), Offset: have,
			Window: restoreWindow, Restore: true}
		gen = a.outGen
		a.kickLocked()
		a.mu.Unlock()
	}
	ask()
	progress := time.Now()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	size := uint64(f.GetSize())
	for last := false; !last; {
		select {
		case <-o.quit:
			return 0, fmt.Errorf("the run was stopped")
		case it := <-o.restoreCh:
			if it.refused != nil {
				if it.refused.GetPath() == f.GetPath() {
					return 0, fmt.Errorf("the master could not send it: %s", it.refused.GetError())
				}
				continue
			}
			c := it.chunk
			if c.GetPath() != f.GetPath() || c.GetOffset() != have || have+uint64(len(c.GetData())) > size {
				continue // of an earlier request or session
			}
			if _, err := out.Write(c.GetData()); err != nil {
				return 0, fmt.Errorf("cannot write it: %w", err)
			}
			h.Write(c.GetData())
			have += uint64(len(c.GetData()))
			progress, last = time.Now(), c.GetLast()
			if !last {
				ask()
			}
		case <-tick.C:
			a.mu.Lock()
			g := a.outGen
			a.mu.Unlock()
			if g != gen {
				ask() // a new session: ask it again from what we have
			}
			if time.Since(progress) > restoreStall {
				return 0, fmt.Errorf("no bytes for %v", restoreStall)
			}
		}
	}
	if sum := hex.EncodeToString(h.Sum(nil)); have != size || sum != f.GetSha256() {
		return 0, fmt.Errorf("got %d bytes with sha256 %s, want %d bytes with %s", have, sum, size, f.GetSha256())
	}
	if err := out.Close(); err != nil {
		return 0, fmt.Errorf("cannot write it: %w", err)
	}
	ok = true
	if err := o.dir.setMtime(f.GetPath(), f.GetModifiedUnixNs()); err != nil {
		return 0, fmt.Errorf("cannot set its mtime: %w", err)
	}
	o.known[f.GetPath()] = fileVer{f.GetSize(), f.GetModifiedUnixNs()} // stored already: not sent back
	return f.GetSize(), nil
}
