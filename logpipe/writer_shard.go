package logpipe

import (
	"bytes"
	"errors"
	"sync/atomic"
	"time"

	"github.com/rlsched/rlsched/core"
)

// frameItem is what a writer's ring holds: a frame, or a request to forget
// a run.
type frameItem struct {
	Frame
	forget bool
}

// writerShard is one writer goroutine with its queue and the files of the
// runs that hash to it. Fields below files are its goroutine's only.
type writerShard struct {
	w         *Writer
	q         frameQueue   // the ring, or a channel (queue.go)
	queued    atomic.Int64 // bytes of Data in the queue
	maxQueued int64
	quit      chan struct{} // closed by Close once no Submit is in progress
	open      atomic.Int64  // files open, for Stats

	files  *fileSet
	batch  []frameItem
	next   []int          // next[i]: index of the next item of batch[i]'s run, or -1
	groups map[string]int // task id → index in runs
	runs   []groupRef
	pieces []piece
	acks   []pendingAck
	pts    []core.MetricPoint
	iov    [][]byte
}

// groupRef lists a run's items in a batch: first, then next[] links.
type groupRef struct {
	taskID      string
	first, last int
}

type pendingAck struct {
	to  Acker
	ack Ack
}

// push queues it without blocking; false when the queue or its byte bound
// is full. Safe from any goroutine.
func (s *writerShard) push(it frameItem) bool {
	n := int64(len(it.Data))
	// A frame is always taken into an empty queue, however large. Past
	// that, the writer's bound holds for all shards together (the windows
	// are granted out of it), and a shard's own, looser one keeps one slow
	// shard from taking all of it.
	q, total := s.queued.Add(n), s.w.queued.Add(n)
	if q != n && (q > s.maxQueued || total > s.w.cfg.QueueBytes) {
		s.queued.Add(-n)
		s.w.queued.Add(-n)
		return false
	}
	if !s.q.push(it) {
		s.queued.Add(-n)
		s.w.queued.Add(-n)
		return false
	}
	return true
}

// popChunk is how many frames the writer takes from its queue at once (one
// CAS of the ring's head for all of them): small enough that a batch
// overshoots FlushBytes by little, large enough to amortise the counter.
const popChunk = 32

func (s *writerShard) run() {
	defer s.files.closeAll()
	cfg := &s.w.cfg
	for {
		if !s.q.wait(s.quit) {
			return
		}
		s.batch = s.q.popBatch(s.batch[:0], popChunk)
		size := 0
		for i := range s.batch {
			size += len(s.batch[i].Data)
		}
		// The batch ends when the queue is empty, at FlushBytes, or at
		// FlushInterval after its first frame was taken, checked at every
		// pop: under a steady stream the queue may never be empty, and then
		// the time bound is what bounds the first frame's wait.
		deadline := time.Now().Add(cfg.FlushInterval)
		for size < cfg.FlushBytes {
			n := len(s.batch)
			if s.batch = s.q.popBatch(s.batch, popChunk); len(s.batch) == n {
				break
			}
			for i := n; i < len(s.batch); i++ {
				size += len(s.batch[i].Data)
			}
			if time.Now().After(deadline) {
				break
			}
		}
		s.queued.Add(-int64(size))
		s.w.queued.Add(-int64(size))
		s.writeBatch()
		clear(s.batch) // drop references to the frames' data
	}
}

// writeBatch groups the batch by run, keeping each run's order, and writes
// each run's frames with one write.
func (s *writerShard) writeBatch() {
	s.w.batches.Add(1)
	clear(s.groups)
	s.runs = s.runs[:0]
	s.next = s.next[:0]
	for i, it := range s.batch {
		s.next = append(s.next, -1)
		g, ok := s.groups[it.TaskID]
		if !ok {
			s.groups[it.TaskID] = len(s.runs)
			s.runs = append(s.runs, groupRef{taskID: it.TaskID, first: i, last: i})
			continue
		}
		s.next[s.runs[g].last] = i
		s.runs[g].last = i
	}
	for _, g := range s.runs {
		s.writeRun(g)
	}
}

// writeRun stages the run's frames against its file's state, writes them,
// then publishes, extracts metrics and acks.
func (s *writerShard) writeRun(g groupRef) {
	s.acks = s.acks[:0]
	s.pieces = s.pieces[:0]
	var rf *runFile
	var st fileState
	var openErr error
	for i := g.first; i >= 0; i = s.next[i] {
		it := &s.batch[i]
		if it.forget {
			if rf != nil {
				s.commit(g.taskID, rf, st)
				s.acks, s.pieces, rf = s.acks[:0], s.pieces[:0], nil
			}
			s.files.forget(g.taskID)
			openErr = nil
			continue
		}
		if rf == nil && openErr == nil {
			if rf, openErr = s.files.open(g.taskID); openErr == nil {
				if openErr = s.revalidate(rf); openErr != nil { // writer_shared.go
					s.files.broken(rf)
					rf = nil
				}
			}
			if openErr == nil {
				st = rf.st
			} else {
				s.storageError(g.taskID, openErr)
			}
		}
		s.w.frames.Add(1)
		if openErr != nil {
			s.ackLocal(it, Ack{Err: openErr.Error()})
			continue
		}
		var fresh []byte
		var err error
		s.pieces, fresh, err = st.stage(s.pieces, it.TraceID, it.Attempt, it.Offset, it.Data, s.w.cfg.MaxRunLogBytes)
		switch {
		case err == nil:
			s.w.dupBytes.Add(int64(len(it.Data) - len(fresh)))
			s.ackLocal(it, Ack{Offset: st.have})
		case errors.Is(err, ErrGap):
			s.w.gaps.Add(1)
			s.ackLocal(it, Ack{Offset: st.have, Err: AckGap})
		default:
			s.w.log.Warn().Str("task", g.taskID).Int("attempt", it.Attempt).Err(err).Msg("refusing log bytes")
			s.ackLocal(it, Ack{Err: err.Error()})
		}
	}
	if rf != nil {
		s.commit(g.taskID, rf, st)
	} else {
		s.sendAcks()
	}
	clear(s.pieces) // drop references to the frames' data
}

// ackLocal records the ack for it, replacing the previous one when it goes
// to the same place: one ack per run and connection per batch.
func (s *writerShard) ackLocal(it *frameItem, a Ack) {
	if it.Ack == nil {
		return
	}
	a.TaskID, a.Attempt = it.TaskID, it.Attempt
	if n := len(s.acks); n > 0 && s.acks[n-1].to == it.Ack {
		s.acks[n-1].ack = a
		return
	}
	s.acks = append(s.acks, pendingAck{to: it.Ack, ack: a})
}

func (s *writerShard) sendAcks() {
	for i := range s.acks {
		s.acks[i].to.LogAcked(s.acks[i].ack)
		s.acks[i].to = nil
	}
	s.acks = s.acks[:0]
}

// commit writes the staged pieces, moving rf to st, then hands the bytes to
// the sink, extracts metrics and sends the acks. Pieces past the run's cap
// (drop) are not written, only extracted. On a write error every ack
// becomes that error and the file is closed, to be read again on its next
// use.
func (s *writerShard) commit(taskID string, rf *runFile, st fileState) {
	defer s.sendAcks()
	if len(s.pieces) == 0 {
		return
	}
	sink := s.w.cfg.Sink
	fileOff := rf.st.size
	// Written as they are (writev): most runs have no live reader, so
	// their bytes are never joined; the hub copies what it sends.
	s.iov = s.iov[:0]
	for _, p := range s.pieces {
		if !p.drop {
			s.iov = append(s.iov, p.b)
		}
	}
	var err error
	switch len(s.iov) {
	case 0:
	case 1:
		err = rf.write(s.iov[0])
	default:
		err = rf.writev(s.iov)
	}
	if err != nil {
		s.storageError(taskID, err)
		for i := range s.acks {
			a := &s.acks[i].ack
			a.Offset = 0
			if a.Attempt == rf.st.attempt {
				a.Offset = rf.st.have
			}
			a.Err = err.Error()
		}
		s.files.broken(rf)
		clear(s.iov)
		return
	}
	if st.capped && !rf.st.capped {
		s.w.cappedRuns.Add(1)
		s.w.log.Warn().Str("task", taskID).Int64("max_bytes", s.w.cfg.MaxRunLogBytes).
			Msg("a run's log reached RUN_MAX_LOG_BYTES: its further output is acked but not stored")
	}
	rf.st = st
	s.w.wrote()
	if sink != nil && len(s.iov) > 0 {
		switch ps, ok := sink.(PartsSink); {
		case len(s.iov) == 1:
			sink.LogAppended(taskID, fileOff, s.iov[0]) // the frame's own bytes: the writer owns them
		case ok:
			ps.LogAppendedParts(taskID, fileOff, s.iov)
		default: // the sink may keep the bytes: a buffer of their own
			n := 0
			for _, b := range s.iov {
				n += len(b)
			}
			buf := make([]byte, 0, n)
			for _, b := range s.iov {
				buf = append(buf, b...)
			}
			sink.LogAppended(taskID, fileOff, buf)
		}
	}
	clear(s.iov) // drop references to the frames' data
	s.extract(taskID, rf, fileOff)
}

// rescanLimit bounds how much of an attempt's earlier output is read again
// to recover metric points when a run's extraction state was lost.
const rescanLimit = 16 << 20

// extract feeds the output pieces just written at fileOff (and those past
// the run's cap) to the run's metric extractor and queues what it finds
// for the store, up to the run's cap on metric points.
func (s *writerShard) extract(taskID string, rf *runFile, fileOff int64) {
	s.pts = s.pts[:0]
	pos := fileOff
	var out, lines, dropped int64
	for _, p := range s.pieces {
		if p.attempt > 0 {
			if rf.x == nil || rf.xAttempt != p.attempt {
				rf.x, rf.xAttempt = &extractor{}, p.attempt
				if p.attempt > 1 && (p.offset == 0 || (!p.drop && p.offset <= rescanLimit)) {
					rf.x.mark = p.attempt // read from the attempt's start: its first step is known
				}
				if p.offset > 0 && p.drop {
					// Past the cap the file does not hold the earlier
					// output to read again: skip to the next line.
					rf.x.long = true
				} else if p.offset > 0 {
					// Earlier output of this attempt was written by another
					// process or before the state was dropped. A master killed
					// between writing bytes and storing their metrics would
					// lose those points for good (the bytes are never resent),
					// so extract again from the attempt's start: the store
					// keeps one value per (run, name, step). Past
					// rescanLimit, only continue the last line.
					bodyStart := pos - int64(p.offset)
					if body := int64(p.offset); body <= rescanLimit {
						rf.x.now = 0
						s.pts = rf.x.feedAppend(s.pts, rf.tail(bodyStart, pos, int(body)))
					} else {
						rf.x.resume(rf.tail(bodyStart, pos, maxLine+1), false)
					}
				}
			}
			rf.x.now = stampNow
			s.pts = rf.x.feedAppend(s.pts, p.b)
			if p.drop {
				dropped += int64(len(p.b))
				continue
			}
			out += int64(len(p.b))
			lines += int64(bytes.Count(p.b, []byte{'\n'}))
		}
		pos += int64(len(p.b))
	}
	s.w.bytes.Add(out)
	s.w.lines.Add(lines)
	s.w.cappedBytes.Add(dropped)
	if rf.x == nil {
		return
	}
	if _, rank, _ := core.ParseLogKey(taskID); rank > 0 {
		// A multi-node group's other member: rank 0's log holds the run's
		// metrics and final reward (docs/multinode.md).
		return
	}
	if v, ok := rf.x.finalReward(); ok && (!rf.hasReported || v != rf.reported) && len(s.acks) > 0 {
		for i := range s.acks {
			s.acks[i].ack.FinalReward = &v
		}
		rf.reported, rf.hasReported = v, true
	}
	if lim := s.w.cfg.MaxRunMetricPoints; lim > 0 && rf.points+len(s.pts) > lim {
		keep := max(lim-rf.points, 0)
		if rf.points < lim {
			s.w.log.Warn().Str("task", taskID).Int("max_points", lim).
				Msg("a run reached RUN_MAX_METRIC_POINTS: its further metric points are dropped")
		}
		s.w.metricCapped.Add(int64(len(s.pts) - keep))
		s.pts = s.pts[:keep]
	}
	rf.points += len(s.pts)
	if s.w.metrics != nil && len(s.pts) > 0 {
		s.w.metrics.add(taskID, s.pts) // copies: s.pts is reused
	}
}

// storageError logs a failure to open or write a log file and records it
// for Stats. The worker keeps the bytes and resends them.
func (s *writerShard) storageError(taskID string, err error) {
	if _, _, ok := core.ParseLogKey(taskID); !ok { // not a storage problem
		s.w.log.Warn().Str("task", taskID).Err(err).Msg("refusing log bytes")
		return
	}
	s.w.failed(err)
	s.w.log.Error().Str("task", taskID).Str("dir", s.w.cfg.Dir).Err(err).
		Msg("cannot store log bytes; the worker keeps them and retries: check LOG_DIR (free space, permissions)")
}
