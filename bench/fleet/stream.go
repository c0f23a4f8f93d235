package fleet

import (
	"math/rand/v2"
	"sort"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/panjf2000/gnet/v2"

	"github.com/rlsched/rlsched/codec/pb"
)

// Log streaming (Config.LogStream): every run the master dispatches becomes
// a process that prints fixed-size lines while a streaming phase (Stream) is
// on, and otherwise stays running. Its output goes out as the real worker
// sends it (worker/session.go): LogData frames of at most LogChunk bytes at
// byte offsets, at most LogWindow bytes unacked per connection, resent from
// the acked offset after a "busy" or "gap" LogAck, paused with the worker's
// backoff (100 ms doubling to 5 s) when refused. Unacked lines are not kept
// as bytes: every line is LineBytes long and rebuilt from its number and the
// time it was first written, which each batch of lines records, so a resend
// carries exactly the bytes of the first send.

const (
	// LineBytes is the length of every streamed line, newline included.
	LineBytes = 120
	// defaultLogWindow and logChunk are the real worker's logWindow and logChunk.
	defaultLogWindow = 4 << 20
	logChunk         = 64 << 10
	// logTick is the real worker's batching delay (logFlushInterval).
	logTick = 50 * time.Millisecond
	dueLog  = dueFinish << 1
)

// phase is one streaming phase, shared read-only by the event loops.
type phase struct {
	id    int64
	rate  float64 // lines/s per run; 0: as fast as the window allows
	start int64   // unix nanos
	until int64
}

// stream is the output state of one streaming run (event loop only). Line
// numbers count from 0; line k is at byte offset k*LineBytes.
type stream struct {
	gen, sent, acked uint64  // lines written by the "process", sent, acked
	batches          []batch // lines from acked on, by first line
	phase            int64   // id of the phase phaseGen counts for
	phaseGen         uint64
	pausedUntil      int64
	backoff          time.Duration
	dead             bool // fenced: the run is not ours any more
	tmpl             []byte
}

// batch is lines [first, next batch's first) written at ts.
type batch struct {
	first uint64
	ts    int64
}

// Stream starts a phase: for d every streaming run prints rate lines/s
// (0: as many as the credit window takes). Safe from any goroutine.
func (f *Fleet) Stream(rate float64, d time.Duration) {
	now := time.Now().UnixNano()
	p := &phase{id: f.phaseSeq.Add(1), rate: rate, start: now, until: now + int64(d)}
	f.phase.Store(p)
	f.mu.Lock()
	conns := append([]gnet.Conn(nil), f.conns...)
	f.mu.Unlock()
	for i, c := range conns {
		if c == nil {
			continue
		}
		w := f.workers[i]
		if gen := w.gen.Load(); w.logArmed.Swap(gen) != gen {
			// Each worker's tick starts at its own point of the interval,
			// as real workers' tickers start when they connect: ticks
			// started together would send every run's batch in the same
			// instant, a burst no fleet of real workers makes.
			f.tm.add(now+1+rand.Int64N(int64(logTick)), w, gen, dueLog, logTick)
		}
		w.due.Or(dueLog)
		_ = c.Wake(nil)
	}
}

// lineTemplate is a run's line with zeros where the time and number go:
// "T<19 digits> <worker> <task> N<10 digits> xxx…\n".
func lineTemplate(worker, task string) []byte {
	b := make([]byte, 0, LineBytes)
	b = append(b, 'T')
	b = append(b, "0000000000000000000 "...)
	b = append(b, worker...)
	b = append(b, ' ')
	b = append(b, task...)
	b = append(b, " N0000000000 "...)
	if len(b) > LineBytes-1 {
		b = b[:LineBytes-1]
	}
	for len(b) < LineBytes-1 {
		b = append(b, 'x')
	}
	return append(b, '\n')
}

// LineTime reads the write time (unix nanos) of a streamed line.
func LineTime(line []byte) (int64, bool) {
	if len(line) < 20 || line[0] != 'T' {
		return 0, false
	}
	v, err := strconv.ParseInt(string(line[1:20]), 10, 64)
	return v, err == nil
}

func putDigits(b []byte, v uint64) {
	for i := len(b) - 1; i >= 0; i-- {
		b[i] = byte('0' + v%10)
		v /= 10
	}
}

func (s *stream) appendLines(dst []byte, from, to uint64) []byte {
	numAt := len(s.tmpl) - 1
	for numAt > 0 && s.tmpl[numAt] != 'N' {
		numAt--
	}
	for k := from; k < to; k++ {
		i := sort.Search(len(s.batches), func(i int) bool { return s.batches[i].first > k }) - 1
		ts := int64(0)
		if i >= 0 {
			ts = s.batches[i].ts
		}
		start := len(dst)
		dst = append(dst, s.tmpl...)
		line := dst[start:]
		putDigits(line[1:20], uint64(ts))
		if numAt > 0 && numAt+11 <= len(line) {
			putDigits(line[numAt+1:numAt+11], k)
		}
	}
	return dst
}

func (w *worker) logWindowLines() uint64 {
	win := w.f.cfg.LogWindow
	if win <= 0 {
		win = defaultLogWindow
	}
	if w.granted > 0 { // as worker/agent.go's windowFrom
		win = min(win, w.granted)
	}
	return uint64(max(win/LineBytes, 1))
}

// pumpAll sends what every streaming run of w may send now.
func (w *worker) pumpAll(c gnet.Conn) {
	if !w.joined {
		return
	}
	var out []byte
	now := time.Now().UnixNano()
	// The window is per connection, as in the real worker.
	room := w.logWindowLines()
	for _, r := range w.runs {
		if r.st != nil {
			room -= min(room, r.st.sent-r.st.acked)
		}
	}
	for _, r := range w.runs {
		if r.st != nil {
			out = w.pump(out, r, now, &room)
		}
	}
	if len(out) > 0 {
		_, _ = c.Write(out)
	}
}

func (w *worker) pump(out []byte, r *run, now int64, room *uint64) []byte {
	f, s := w.f, r.st
	if s.dead || s.pausedUntil > now {
		return out
	}
	p := f.phase.Load()
	chunk := uint64(logChunk / LineBytes)
	for *room > 0 {
		if s.sent == s.gen {
			if p == nil || now >= p.until {
				break
			}
			if s.phase != p.id {
				s.phase, s.phaseGen = p.id, 0
			}
			n := *room
			if p.rate > 0 {
				owed := uint64(p.rate * float64(now-p.start) / 1e9)
				if owed <= s.phaseGen {
					break
				}
				n = min(n, owed-s.phaseGen)
			}
			s.batches = append(s.batches, batch{first: s.gen, ts: now})
			s.gen += n
			s.phaseGen += n
			f.logLines.Add(int64(n))
		}
		k := min(s.gen-s.sent, chunk, *room)
		data := s.appendLines(w.buf[:0], s.sent, s.sent+k)
		w.buf = data
		var err error
		out, err = w.appendFrame(out, &pb.LogData{TaskId: r.id, Attempt: r.attempt, Fence: r.fence,
			Offset: s.sent * LineBytes, Data: data})
		if err != nil {
			break
		}
		f.logFrames.Add(1)
		s.sent += k
		*room -= k
	}
	return out
}

// streamAck handles a LogAck of a streaming run, as worker/agent.go's logAck.
func (w *worker) streamAck(c gnet.Conn, r *run, m *pb.LogAck) {
	f, s := w.f, r.st
	off := m.GetOffset() / LineBytes
	switch m.GetError() {
	case "":
		s.ackTo(f, off)
		s.backoff = 0
	case "busy":
		f.logBusy.Add(1)
		s.sent = max(s.acked, min(s.sent, off))
		if s.pausedUntil <= time.Now().UnixNano() { // as worker/agent.go: frames refused together count once
			s.pauseBusy()
		}
		return
	case "gap":
		f.logGaps.Add(1)
		s.ackTo(f, off)
		s.sent = s.acked
	case "fenced":
		f.logFenced.Add(1)
		s.dead = true
		return
	default:
		f.logErrors.Add(1)
		s.sent = s.acked
		s.pause()
		return
	}
	w.pumpAll(c)
}

func (s *stream) ackTo(f *Fleet, line uint64) {
	if line <= s.acked || line > s.gen {
		return
	}
	f.logAcked.Add(int64(line - s.acked))
	s.acked = line
	s.sent = max(s.sent, line)
	// Keep the batch holding the first unacked line.
	i := sort.Search(len(s.batches), func(i int) bool { return s.batches[i].first > line }) - 1
	if i > 0 {
		s.batches = append(s.batches[:0], s.batches[i:]...)
	}
}

// pauseBusy is the real worker's pause after "busy" (busyBackoffLocked):
// 20 ms doubling to 1 s, ±20%.
func (s *stream) pauseBusy() {
	s.backoff = min(max(s.backoff, 20*time.Millisecond), time.Second)
	s.pausedUntil = time.Now().Add(time.Duration(float64(s.backoff) * (0.8 + 0.4*rand.Float64()))).UnixNano()
	s.backoff = min(2*s.backoff, time.Second)
}

func (s *stream) pause() {
	if s.backoff < 100*time.Millisecond {
		s.backoff = 100 * time.Millisecond
	}
	s.pausedUntil = time.Now().Add(s.backoff).UnixNano()
	s.backoff = min(2*s.backoff, 5*time.Second)
}

// streamCounters are the log counters of a fleet.
type streamCounters struct {
	logLines, logAcked, logFrames, logBusy, logGaps, logFenced, logErrors atomic.Int64
	phase                                                                 atomic.Pointer[phase]
	phaseSeq                                                              atomic.Int64
}
