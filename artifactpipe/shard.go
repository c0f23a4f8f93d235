package artifactpipe

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/rlsched/rlsched/core"
)

// item is what a shard's channel carries: a chunk, or a connection that
// closed, or a run that ended.
type item struct {
	chunk  Chunk
	detach Acker
	forget string
}

// shardQueue bounds the items a shard's channel holds (the bytes are
// bounded by QueueBytes).
const shardQueue = 4096

// callTimeout bounds one call to the index or the blob store's commit.
const callTimeout = 30 * time.Second

// shard is one writer goroutine and the state of the uploads of the runs
// that hash to it. Only run touches runs and everything below it.
type shard struct {
	p    *Pipe
	ch   chan item
	quit chan struct{}
	open atomic.Int64 // uploads in progress, for Stats
	runs map[string]*runState
}

// runState is what a shard keeps of one run.
type runState struct {
	id        string
	loaded    bool
	owner     int64 // the run's user, for MaxUserBytes (read with the usage when that is set)
	ownerName string
	files     int   // the run's rows (all attempts), as the index has them
	bytes     int64 // their sizes
	rows      map[int]map[string]core.Artifact
	uploads   map[upKey]*upload
	// reserved: the announced sizes of the uploads in progress, counted
	// against MaxRunBytes before they are indexed.
	reserved int64
	warned   map[string]bool
	seen     time.Time
}

type upKey struct {
	attempt int
	path    string
}

// upload is one version of one file on its way in.
type upload struct {
	key         upKey
	size, modNs int64
	have        uint64
	sink        sink
	ack         Acker
	seen        time.Time
	isNew       bool // no row of (attempt, path) yet: a new file of the run
}

func newShard(p *Pipe) *shard {
	return &shard{p: p, ch: make(chan item, shardQueue), quit: make(chan struct{}), runs: map[string]*runState{}}
}

// push queues it without blocking; false when the channel is full.
func (s *shard) push(it item) bool {
	select {
	case s.ch <- it:
		return true
	default:
		return false
	}
}

func (s *shard) run() {
	lowerPriority() // doc.go, "Priority"
	tick := time.NewTicker(max(s.p.cfg.IdleUpload/4, time.Second))
	defer tick.Stop()
	for {
		select {
		case it := <-s.ch:
			s.handle(it)
		case <-tick.C:
			s.sweep()
		case <-s.quit:
			s.stop()
			return
		}
	}
}

func (s *shard) handle(it item) {
	switch {
	case it.detach != nil:
		s.detach(it.detach)
	case it.forget != "":
		s.forget(it.forget)
	default:
		s.p.queued.Add(-int64(len(it.chunk.Data)))
		s.chunk(it.chunk)
	}
}

// stop lets go of every upload at Close: staged files stay for the next
// master, streams are given up.
func (s *shard) stop() {
	for _, rs := range s.runs {
		for _, u := range rs.uploads {
			s.drop(rs, u, false)
		}
	}
	for {
		select {
		case it := <-s.ch:
			s.p.queued.Add(-int64(len(it.chunk.Data)))
		default:
			return
		}
	}
}

func (s *shard) now() time.Time { return s.p.cfg.Clock() }

func (s *shard) state(id string) *runState {
	rs := s.runs[id]
	if rs == nil {
		rs = &runState{id: id, rows: map[int]map[string]core.Artifact{}, uploads: map[upKey]*upload{}, warned: map[string]bool{}}
		s.runs[id] = rs
	}
	rs.seen = s.now()
	return rs
}

func ackOf(c Chunk) Ack {
	return Ack{TaskID: c.TaskID, Attempt: c.Attempt, Path: c.Path, Size: c.Size, ModNs: c.ModNs}
}

// chunk takes one chunk of an upload: it begins the upload at its first
// chunk (limits, sink), appends the bytes past what the upload has, and
// commits at the last.
func (s *shard) chunk(c Chunk) {
	rs := s.state(c.TaskID)
	k := upKey{c.Attempt, c.Path}
	u := rs.uploads[k]
	if u != nil && (u.size != c.Size || u.modNs != c.ModNs) {
		s.drop(rs, u, true) // a newer version of the path starts over
		u = nil
	}
	if u == nil {
		if u = s.begin(rs, c); u == nil {
			return
		}
	}
	u.ack, u.seen = c.Ack, s.now()
	a := ackOf(c)
	end := c.Offset + uint64(len(c.Data))
	if c.Offset > u.have {
		a.Offset, a.Err = u.have, ErrGap
		c.Ack.ArtifactAcked(a)
		return
	}
	if end > u.have {
		if int64(end) > u.size {
			// The limits were checked against the announced size at the
			// start; an upload that outgrows it would pass them. A worker
			// gives up a file that changes while it reads it, so only a
			// broken or rogue one sends more.
			s.p.log.Warn().Str("task", rs.id).Int("attempt", c.Attempt).Str("path", c.Path).Int64("size", u.size).
				Uint64("end", end).Msg("a worker sent more of an output file than it announced; refused")
			s.refuse(rs, u, c, "size\x00"+c.Path, fmt.Sprintf("%s: the worker sent more than the %s it announced; the file was not kept",
				c.Path, humanBytes(u.size)))
			return
		}
		if err := u.sink.write(c.Data[u.have-c.Offset:]); err != nil {
			if errors.Is(err, errTooManyStreams) {
				s.drop(rs, u, true)
				s.p.busy.Add(1)
				a.Offset, a.Err = c.Offset, ErrBusy
				c.Ack.ArtifactAcked(a)
				return
			}
			s.fail(rs, u, c, err)
			return
		}
		u.have = end
	}
	if c.Last && end == u.have {
		s.commit(rs, u, c)
		return
	}
	a.Offset = u.have
	c.Ack.ArtifactAcked(a)
}

// begin starts an upload at its first chunk here (offset 0, or a resume
// after a reconnect or a failover): a version the index has already is
// answered done, one over a limit refused; otherwise its sink is opened.
// It returns nil when it answered the chunk itself.
func (s *shard) begin(rs *runState, c Chunk) *upload {
	ctx, cancel := context.WithTimeout(s.p.ctx, callTimeout)
	defer cancel()
	a := ackOf(c)
	rows, err := s.rows(ctx, rs, c.Attempt)
	if err != nil {
		s.p.failed.Add(1)
		a.Err = "failed: " + err.Error()
		c.Ack.ArtifactAcked(a)
		return nil
	}
	old, had := rows[c.Path]
	if had && old.Size == c.Size && old.ModifiedAt.UnixNano() == c.ModNs {
		// Indexed already: the worker lost the answer (a reconnect), or
		// another master stored it.
		a.Offset, a.Done = uint64(c.Size), true
		c.Ack.ArtifactAcked(a)
		return nil
	}
	cfg := s.p.cfg
	u := &upload{key: upKey{c.Attempt, c.Path}, size: c.Size, modNs: c.ModNs, ack: c.Ack, isNew: !had}
	switch {
	case cfg.MaxFileBytes >= 0 && c.Size > cfg.MaxFileBytes:
		s.refuse(rs, nil, c, "size\x00"+c.Path, fmt.Sprintf("%s (%s) is over ARTIFACT_MAX_FILE_BYTES (%s) and was not kept",
			c.Path, humanBytes(c.Size), humanBytes(cfg.MaxFileBytes)))
		return nil
	case !had && cfg.MaxRunFiles >= 0 && rs.files+s.newUploads(rs) >= cfg.MaxRunFiles:
		s.refuse(rs, nil, c, "files", fmt.Sprintf("the run keeps at most %d files; %s and every later new file were not kept",
			cfg.MaxRunFiles, c.Path))
		return nil
	case cfg.MaxRunBytes >= 0 && rs.bytes-old.Size+rs.reserved+c.Size > cfg.MaxRunBytes:
		s.refuse(rs, nil, c, "bytes", fmt.Sprintf("%s (%s) would take the run's outputs past ARTIFACT_MAX_RUN_BYTES (%s) and was not kept",
			c.Path, humanBytes(c.Size), humanBytes(cfg.MaxRunBytes)))
		return nil
	}
	// Last, as it counts the upload against its owner's and the server's
	// caps: every answer below that does not begin it lets go of that.
	switch o, err := s.p.usage.reserve(ctx, rs.owner, c.Size, old.Size); {
	case err != nil:
		s.fail(rs, nil, c, err)
		return nil
	case o != nil:
		key := "user"
		if o.total {
			key = "total"
		}
		s.refuse(rs, nil, c, key, o.message(c.Path, rs.ownerName))
		return nil
	}
	switch {
	case c.Offset == 0 && c.Last:
		u.sink = &memSink{blobs: cfg.Blobs}
	case s.p.stager != nil:
		name := stageName(s.p.stager.StageDir(), c.TaskID, c.Attempt, c.Path, c.Size, c.ModNs)
		st, err := openStaged(s.p.stager, name)
		if err != nil {
			s.p.usage.release(rs.owner, c.Size, 0)
		}
		if errors.Is(err, errStagedBusy) {
			s.p.busy.Add(1)
			a.Offset, a.Err = c.Offset, ErrBusy
			c.Ack.ArtifactAcked(a)
			return nil
		}
		if err != nil {
			s.fail(rs, nil, c, err)
			return nil
		}
		u.sink, u.have = st, uint64(st.n)
	default:
		u.sink = &streamSink{p: s.p}
	}
	rs.uploads[u.key] = u
	rs.reserved += c.Size
	s.open.Add(1)
	return u
}

// newUploads counts the uploads in progress of files the run does not
// have yet.
func (s *shard) newUploads(rs *runState) int {
	n := 0
	for _, u := range rs.uploads {
		if u.isNew {
			n++
		}
	}
	return n
}

// rows returns the index rows of one attempt of the run, read once, and
// the run's usage.
func (s *shard) rows(ctx context.Context, rs *runState, attempt int) (map[string]core.Artifact, error) {
	if !rs.loaded {
		files, bytes, err := s.p.cfg.Index.ArtifactUsage(ctx, rs.id)
		if err != nil {
			return nil, fmt.Errorf("cannot read what the run keeps: %w", err)
		}
		if s.p.usage.userCap() {
			t, err := s.p.cfg.Index.Task(ctx, rs.id)
			if err != nil {
				return nil, fmt.Errorf("cannot read the run's owner: %w", err)
			}
			rs.owner, rs.ownerName = t.UserID, t.User
		}
		rs.files, rs.bytes, rs.loaded = files, bytes, true
	}
	if m := rs.rows[attempt]; m != nil {
		return m, nil
	}
	list, err := s.p.cfg.Index.Artifacts(ctx, rs.id, attempt)
	if err != nil {
		return nil, fmt.Errorf("cannot read the run's files: %w", err)
	}
	m := make(map[string]core.Artifact, len(list))
	for _, a := range list {
		m[a.Path] = a
	}
	rs.rows[attempt] = m
	return m, nil
}

// commit stores the upload's blob and its index row, then answers done.
func (s *shard) commit(rs *runState, u *upload, c Chunk) {
	ctx, cancel := context.WithTimeout(s.p.ctx, callTimeout)
	defer cancel()
	b, err := u.sink.commit(ctx)
	if err != nil {
		u.sink = nil // spent: commit cleans up after a failure
		s.fail(rs, u, c, err)
		return
	}
	row := core.Artifact{TaskID: rs.id, Attempt: c.Attempt, Path: c.Path, Size: b.Size, SHA256: b.SHA256, ModifiedAt: time.Unix(0, c.ModNs)}
	// The index is the store: a brief outage is retried, a longer one
	// fails the file (the worker sends it again later; the blob is kept
	// and the next Put finds it).
	for delay := 200 * time.Millisecond; ; delay *= 4 {
		if err = s.p.cfg.Index.PutArtifact(ctx, row); err == nil || delay > 4*time.Second || ctx.Err() != nil {
			break
		}
		select {
		case <-time.After(delay):
		case <-ctx.Done():
		}
	}
	s.finish(rs, u)
	if err != nil {
		s.fail(rs, nil, c, fmt.Errorf("cannot index it: %w", err))
		return
	}
	rows := rs.rows[c.Attempt]
	old, had := rows[c.Path]
	if !had {
		rs.files++
	}
	rs.bytes += b.Size - old.Size
	s.p.usage.release(rs.owner, 0, b.Size-old.Size)
	rows[c.Path] = row
	s.p.stored.Add(1)
	s.p.storedBytes.Add(b.Size)
	if c.Changing {
		s.warn(rs, core.WarnArtifactError, "changing\x00"+c.Path, fmt.Sprintf(
			"%s kept changing while it was uploaded at the run's end; it was kept as last read and may be torn", c.Path))
	}
	a := ackOf(c)
	a.Offset, a.Done = u.have, true
	c.Ack.ArtifactAcked(a)
}

// finish forgets an upload whose sink is done with.
func (s *shard) finish(rs *runState, u *upload) {
	if rs.uploads[u.key] == u {
		delete(rs.uploads, u.key)
		rs.reserved -= u.size
		s.p.usage.release(rs.owner, u.size, 0)
		s.open.Add(-1)
	}
}

// drop lets go of an upload: abort removes what it staged, else a staged
// file stays for another master to resume.
func (s *shard) drop(rs *runState, u *upload, abort bool) {
	if u.sink != nil {
		if abort {
			u.sink.abort()
		} else {
			u.sink.release()
		}
	}
	s.finish(rs, u)
}

// refuse answers a version that is never kept and warns the run
// (artifact_limit) once per key: per path for its size, once for the
// run's file count and once for its bytes.
func (s *shard) refuse(rs *runState, u *upload, c Chunk, key, msg string) {
	if u != nil {
		s.drop(rs, u, true)
	}
	s.p.refused.Add(1)
	s.warn(rs, core.WarnArtifactLimit, key, msg)
	a := ackOf(c)
	a.Offset, a.Err = c.Offset, "refused: "+msg
	c.Ack.ArtifactAcked(a)
}

// fail answers a version the master could not store now, warns the run
// and logs it; the worker tries again later.
func (s *shard) fail(rs *runState, u *upload, c Chunk, err error) {
	if u != nil {
		s.drop(rs, u, true)
	}
	s.p.failed.Add(1)
	why := err.Error()
	if errors.Is(err, syscall.ENOSPC) {
		why = "the master's disk is full"
	}
	s.p.log.Warn().Str("task", rs.id).Int("attempt", c.Attempt).Str("path", c.Path).Err(err).Msg("cannot store a run's output file")
	s.warn(rs, core.WarnArtifactError, "failed\x00"+c.Path, fmt.Sprintf("cannot store %s: %s; it is not kept (the worker tries again at its next sync)", c.Path, why))
	a := ackOf(c)
	a.Offset, a.Err = c.Offset, "failed: "+why
	c.Ack.ArtifactAcked(a)
}

// maxRunWarnings bounds the warnings the receiver gives one run.
const maxRunWarnings = 20

// warn puts a warning on the run once per key.
func (s *shard) warn(rs *runState, code, key, msg string) {
	if rs.warned[key] || len(rs.warned) >= maxRunWarnings {
		return
	}
	rs.warned[key] = true
	ctx, cancel := context.WithTimeout(s.p.ctx, callTimeout)
	defer cancel()
	if err := s.p.cfg.Index.AddWarning(ctx, rs.id, core.Warning{Code: code, Message: msg, At: s.now()}); err != nil {
		s.p.log.Warn().Str("task", rs.id).Err(err).Str("warning", msg).Msg("cannot record a run's warning")
	}
}

// detach lets go of the uploads a closed connection was feeding.
func (s *shard) detach(a Acker) {
	for _, rs := range s.runs {
		for _, u := range rs.uploads {
			if u.ack == a {
				s.drop(rs, u, false)
			}
		}
	}
}

// forget drops a run that ended; what it left unfinished is removed.
func (s *shard) forget(id string) {
	rs := s.runs[id]
	if rs == nil {
		return
	}
	for _, u := range rs.uploads {
		s.drop(rs, u, true)
	}
	delete(s.runs, id)
}

// sweep gives up uploads idle for IdleUpload, and forgets runs idle for
// longer whose end this master did not see (their worker moved away).
func (s *shard) sweep() {
	now := s.now()
	idle := s.p.cfg.IdleUpload
	for id, rs := range s.runs {
		for _, u := range rs.uploads {
			if now.Sub(u.seen) > idle {
				s.p.log.Info().Str("task", id).Str("path", u.key.path).Msg("giving up an upload idle for too long")
				s.drop(rs, u, true)
			}
		}
		if len(rs.uploads) == 0 && now.Sub(rs.seen) > 6*idle {
			delete(s.runs, id)
		}
	}
	s.p.usage.forget(now)
}
