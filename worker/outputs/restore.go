package outputs

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/rlsched/rlsched/codec/pb"
	"github.com/rlsched/rlsched/codetree"
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

// SetInputDir names the run's RLSCHED_INPUT_DIR, where the outputs of
// its parents (ExecuteTask.restore's files with input_of) are restored;
// before Restore.
func (o *Files) SetInputDir(path string) { o.inputDir = path }

// restoreItem is a chunk of a restored file, or the master's refusal.
type restoreItem struct {
	chunk   *pb.ArtifactChunk
	refused *pb.ArtifactAck
}

// beginRestore marks the outputs as being restored into: chunks of the
// restore are taken, and a stop leaves the dir open for the restore.
func (o *Files) BeginRestore() {
	o.l.mu.Lock()
	o.restoring = true
	o.l.mu.Unlock()
}

// endRestore marks the restore over: later chunks of it are dropped.
func (o *Files) EndRestore() {
	o.l.mu.Lock()
	o.restoring = false
	o.l.mu.Unlock()
}

// isRestoring reports whether a restore into the outputs is under way.
// Nil-safe.
func (o *Files) Restoring() bool {
	if o == nil {
		return false
	}
	o.l.mu.Lock()
	defer o.l.mu.Unlock()
	return o.restoring
}

// restoreChunk hands a chunk of a restored file to the restore. Reader
// goroutine; never blocks (the master sends at most the window ahead,
// which the channel holds).
func (o *Files) RestoreChunk(m *pb.ArtifactChunk) {
	o.l.mu.Lock()
	restoring := o.restoring
	o.l.mu.Unlock()
	if !restoring {
		return
	}
	select {
	case o.restoreCh <- restoreItem{chunk: m}:
	default:
		o.log.Warn().Msg("restore chunk dropped: the master sent more than the window asked for")
	}
}

// restoreRefusedLocked hands the master's refusal of a restored file to
// the restore. Caller holds Link.mu.
func (o *Files) restoreRefusedLocked(m *pb.ArtifactAck) {
	if o.restoring {
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
func (o *Files) Restore(files []*pb.RestoreFile) {
	l := o.l
	select {
	case l.restoreSem <- struct{}{}:
	case <-o.quit:
		return
	}
	defer func() { <-l.restoreSem }()
	began := time.Now()
	var bytes int64
	restored := 0
	for _, f := range files {
		n, err := o.restoreFile(f)
		select {
		case <-o.quit:
			return
		default:
		}
		if err != nil {
			o.log.Warn().Str("path", f.GetPath()).Err(err).Msg("cannot restore a file of an earlier attempt; the run starts without it")
			continue
		}
		restored++
		bytes += n
	}
	l.mu.Lock()
	o.restoreAck = &pb.ArtifactAck{TaskId: o.task, Attempt: o.attempt, Fence: o.fence, Restore: true, Done: true}
	l.mu.Unlock()
	l.kick()
	o.log.Info().Int("files", restored).Int("of", len(files)).Int64("bytes", bytes).Dur("took", time.Since(began)).Msg("restored the outputs of earlier attempts")
}

// restoreFile restores one file and returns its size.
func (o *Files) restoreFile(f *pb.RestoreFile) (int64, error) {
	if err := core.CheckArtifactPath(f.GetPath()); err != nil {
		return 0, err
	}
	if f.GetSize() < 0 {
		return 0, fmt.Errorf("size %d", f.GetSize())
	}
	dir := o.dir
	if in := f.GetInputOf(); in != "" {
		// A parent's output (inputsFrom): its path is "<parent>/<path>",
		// written under RLSCHED_INPUT_DIR, which is never uploaded.
		if o.inputDir == "" || !strings.HasPrefix(f.GetPath(), in+"/") {
			return 0, fmt.Errorf("an input of run %s at %q, and the run has no input dir for it", in, f.GetPath())
		}
		d, err := OpenDir(o.inputDir, o.dir.owner)
		if err != nil {
			return 0, err
		}
		defer d.close()
		dir = d
	}
	out, err := dir.create(f.GetPath(), o.dir.owner)
	if err != nil {
		return 0, err
	}
	ok := false
	defer func() {
		if !ok {
			out.Close()
			dir.remove(f.GetPath())
		}
	}()
	if _, err := o.fetch(f.GetPath(), false, f.GetSize(), f.GetSha256(), out); err != nil {
		return 0, err
	}
	if err := out.Close(); err != nil {
		return 0, fmt.Errorf("cannot write it: %w", err)
	}
	ok = true
	if err := dir.setMtime(f.GetPath(), f.GetModifiedUnixNs()); err != nil {
		return 0, fmt.Errorf("cannot set its mtime: %w", err)
	}
	if f.GetInputOf() == "" {
		o.known[f.GetPath()] = fileVer{f.GetSize(), f.GetModifiedUnixNs()} // stored already: not sent back
	}
	return f.GetSize(), nil
}

// FetchCode writes the blob sum of the run's code snapshot (issue 27) into
// w, asked for and received as a restored file is; size < 0 takes the size
// the master sends (the manifest's, which the worker does not know). The
// bytes are checked against sum. Call it while the outputs are restoring
// (BeginRestore).
func (o *Files) FetchCode(sum string, size int64, w io.Writer) (int64, error) {
	select {
	case o.l.restoreSem <- struct{}{}:
	case <-o.quit:
		return 0, fmt.Errorf("the run was stopped")
	}
	defer func() { <-o.l.restoreSem }()
	sha := sum
	if strings.HasSuffix(sum, codetree.PackSuffix) {
		sha = "" // a tree's pack: the cache checks each blob in it
	}
	n, err := o.fetch(sum, true, size, sha, w)
	return int64(n), err
}

// EndCode tells the master that the code snapshot is fetched, so that its
// stream ends.
func (o *Files) EndCode() {
	o.l.mu.Lock()
	o.restoreAck = &pb.ArtifactAck{TaskId: o.task, Attempt: o.attempt, Fence: o.fence, Restore: true, Code: true, Done: true}
	o.l.mu.Unlock()
	o.l.kick()
}

// fetch asks the master for the restored file (or, code, the snapshot's
// blob) key and writes its bytes into out, checking them against size
// (< 0: the size the chunks carry) and sha ("": not checked); it returns
// how many it wrote.
func (o *Files) fetch(key string, code bool, size int64, sha string, out io.Writer) (uint64, error) {
	l := o.l
	h := sha256.New()
	var have uint64
	var gen uint64
	ask := func() {
		l.mu.Lock()
		o.restoreAck = &pb.ArtifactAck{TaskId: o.task, Attempt: o.attempt, Fence: o.fence, Path: key, Offset: have,
			Window: restoreWindow, Restore: true, Code: code}
		gen = l.gen
		l.mu.Unlock()
		l.kick()
	}
	ask()
	progress := time.Now()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for last := false; !last; {
		select {
		case <-o.quit:
			return 0, fmt.Errorf("the run was stopped")
		case it := <-o.restoreCh:
			if it.refused != nil {
				if it.refused.GetPath() == key && it.refused.GetCode() == code {
					return 0, fmt.Errorf("the master could not send it: %s", it.refused.GetError())
				}
				continue
			}
			c := it.chunk
			if c.GetPath() != key || c.GetCode() != code || c.GetOffset() != have {
				continue // of an earlier request or session
			}
			if size < 0 && c.GetSize() >= 0 {
				size = c.GetSize() // the sha256 still decides
			}
			if have+uint64(len(c.GetData())) > uint64(max(size, 0)) {
				continue
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
			l.mu.Lock()
			g := l.gen
			l.mu.Unlock()
			if g != gen {
				ask() // a new session: ask it again from what we have
			}
			if time.Since(progress) > restoreStall {
				return 0, fmt.Errorf("no bytes for %v", restoreStall)
			}
		}
	}
	if sum := hex.EncodeToString(h.Sum(nil)); int64(have) != size || (sha != "" && sum != sha) {
		return 0, fmt.Errorf("got %d bytes with sha256 %s, want %d bytes with %s", have, sum, size, sha)
	}
	return have, nil
}
