package fleet

import (
	"cmp"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/panjf2000/gnet/v2"
	"google.golang.org/protobuf/proto"

	"github.com/rlsched/rlsched/codec"
	"github.com/rlsched/rlsched/codec/pb"
	"github.com/rlsched/rlsched/core"
)

// worker is one simulated worker. gen and due are shared with the timer
// goroutine; every other field belongs to the connection's event loop.
type worker struct {
	f   *Fleet
	idx int
	id  string
	key []byte        // the worker's key under the fleet's join token
	gen atomic.Uint32 // bumped at every (re)connect and close
	due atomic.Uint32
	// logArmed is the connection generation whose log tick is armed.
	logArmed atomic.Uint32
	buf      []byte // one frame's streamed lines (event loop only)

	sess     codec.Session // of the connection, once the Hello is sealed; zero in raw mode
	joined   bool
	seq      uint64
	sent     [64]int64 // send time of heartbeat seq, by seq % 64
	runs     []*run
	interval time.Duration
	opened   time.Time
	backoff  time.Duration // next redial delay (Config.Reconnect)
	granted  int           // credit window the master granted (HelloAck/LogAck log_window); 0: none
	gpuSeq   uint64        // heartbeat seq of the last GPU sample sent (Config.GPUSampleEvery)
	gpuGen   uint32        // connection generation the foreign list and problem were sent on
}

// run is a simulated run held by a worker.
type run struct {
	id       string
	attempt  int32
	fence    uint64
	token    []byte // ExecuteTask.run_token, listed in a Hello
	started  int64  // unix nanos
	endAt    int64  // unix nanos when the "process" exits
	exited   bool
	logTotal uint64
	logAcked uint64
	finSent  bool
	st       *stream // Config.LogStream
	gpus     []int32 // ExecuteTask.gpu_indices
	share    int     // hundredths of its one GPU; 0: whole GPUs
	shareMB  int64   // ExecuteTask.gpu_memory_mb
}

type handler struct {
	gnet.BuiltinEventEngine
	f *Fleet
}

func (h *handler) OnOpen(c gnet.Conn) ([]byte, gnet.Action) {
	w, _ := c.Context().(*worker)
	if w == nil {
		return nil, gnet.Close
	}
	f := h.f
	gen := w.gen.Add(1)
	w.opened = time.Now()
	w.sess = codec.Session{}
	f.mu.Lock()
	f.conns[w.idx] = c
	f.mu.Unlock()
	f.connected.Add(1)
	if f.cfg.Raw {
		w.join(c, f.cfg.RawInterval, gen)
	}
	return nil, gnet.None
}

func (h *handler) OnClose(c gnet.Conn, _ error) gnet.Action {
	w, _ := c.Context().(*worker)
	if w == nil {
		return gnet.None
	}
	f := h.f
	w.gen.Add(1)
	f.mu.Lock()
	if f.conns[w.idx] == c {
		f.conns[w.idx] = nil
	}
	f.mu.Unlock()
	if w.joined {
		w.joined = false
		f.joined.Add(-1)
	}
	f.connected.Add(-1)
	f.closed.Add(1)
	if f.cfg.Reconnect && !f.closing.Load() {
		if w.backoff == 0 || time.Since(w.opened) >= 5*time.Second {
			w.backoff = 100 * time.Millisecond
		}
		d := w.backoff + time.Duration(rand.Int64N(int64(w.backoff)*2/5)) - w.backoff/5
		w.backoff = min(2*w.backoff, 5*time.Second)
		go f.redial(w, d)
	}
	return gnet.None
}

func (h *handler) OnTraffic(c gnet.Conn) gnet.Action {
	w, _ := c.Context().(*worker)
	if w == nil {
		return gnet.Close
	}
	if bits := w.due.Swap(0); bits != 0 {
		w.onDue(c, bits)
	}
	for {
		msg, err := codec.NextFrom(c, codec.DefaultMaxBody, w.sess.Recv)
		if err != nil {
			h.f.refusal(fmt.Sprintf("bad frame from the master: %v", err))
			return gnet.Close
		}
		if msg == nil {
			return gnet.None
		}
		if act := w.handle(c, msg); act != gnet.None {
			return act
		}
	}
}

func (f *Fleet) refusal(reason string) {
	f.refused.Add(1)
	f.mu.Lock()
	f.lastRefusal = reason
	f.mu.Unlock()
}

// send writes m, sealed once the Hello is out (unsealed in raw mode).
func (w *worker) send(c gnet.Conn, m proto.Message) {
	buf, err := w.appendFrame(nil, m)
	if err == nil {
		_, _ = c.Write(buf)
	}
}

func (w *worker) appendFrame(dst []byte, m proto.Message) ([]byte, error) {
	if w.sess.Send == nil {
		return codec.AppendFrame(dst, m)
	}
	return w.sess.Send.AppendFrame(dst, m)
}

// join marks the worker joined and arms its heartbeats at a random phase.
func (w *worker) join(c gnet.Conn, interval time.Duration, gen uint32) {
	f := w.f
	now := time.Now().UnixNano()
	w.joined = true
	f.joined.Add(1)
	storeMax(&f.lastJoin, now)
	w.interval = interval
	if interval > 0 {
		first := now + rand.Int64N(int64(interval)) + 1
		f.tm.add(first, w, gen, dueHeartbeat, interval)
	}
	// Runs that ended while disconnected, or whose TaskFinished was never
	// acked, are reported again.
	for _, r := range w.runs {
		r.finSent = false
		if r.endAt <= now {
			r.exited = true
		} else if !r.exited {
			f.tm.add(r.endAt, w, gen, dueFinish, 0)
		}
		w.maybeFinish(c, r)
	}
}

func (w *worker) handle(c gnet.Conn, msg proto.Message) gnet.Action {
	f := w.f
	switch m := msg.(type) {
	case *pb.Challenge:
		hello := &pb.Hello{WorkerId: w.id, Host: "sim-" + strconv.Itoa(w.idx), Slots: int32(f.cfg.Slots), Version: "bench",
			CpuMillis: f.cfg.CPUMillis, MemoryMb: f.cfg.MemoryMB, Labels: w.labels()}
		name := cmp.Or(f.cfg.GPUName, "SimGPU")
		for i := 0; i < f.cfg.GPUs; i++ {
			hello.Gpus = append(hello.Gpus, &pb.GPU{Index: int32(i), Name: name, MemoryMb: f.cfg.GPUMemoryMB})
		}
		for _, r := range w.runs {
			hello.Runs = append(hello.Runs, &pb.RunRef{TaskId: r.id, Attempt: r.attempt, Fence: r.fence,
				AckedLogOffset: r.logAcked, Finished: r.exited, RunToken: r.token})
		}
		frame, sess, err := codec.WorkerHello(nil, w.key, m, hello)
		if err != nil {
			f.refusal(fmt.Sprintf("cannot answer the Challenge: %v", err))
			return gnet.Close
		}
		w.sess = sess
		_, _ = c.Write(frame)
	case *pb.HelloAck:
		w.granted = int(m.GetLogWindow())
		for _, id := range m.GetKillTaskIds() {
			w.forget(id)
		}
		w.join(c, time.Duration(m.GetHeartbeatIntervalMs())*time.Millisecond, w.gen.Load())
	case *pb.Heartbeat: // raw mode: the echo of our own heartbeat
		w.acked(m.GetSeq())
	case *pb.HeartbeatAck:
		w.acked(m.GetSeq())
		for _, id := range m.GetLostTaskIds() {
			w.forget(id)
		}
	case *pb.ExecuteTask:
		w.execute(c, m)
	case *pb.LogAck:
		f.logAcks.Add(1)
		if g := int(m.GetLogWindow()); g > 0 {
			w.granted = g
		}
		if r := w.run(m.GetTaskId()); r != nil && r.attempt == m.GetAttempt() && r.st != nil {
			w.streamAck(c, r, m)
		} else if r != nil && r.attempt == m.GetAttempt() {
			if m.GetError() == "gap" || m.GetOffset() > r.logAcked {
				r.logAcked = m.GetOffset()
			}
			w.maybeFinish(c, r)
		}
	case *pb.TaskFinishedAck:
		if r := w.run(m.GetTaskId()); r != nil && r.attempt == m.GetAttempt() {
			w.forget(r.id)
			f.finished.Add(1)
			storeMax(&f.lastFinish, time.Now().UnixNano())
		}
	case *pb.CancelTask:
		if r := w.run(m.GetTaskId()); r != nil && !r.exited {
			r.exited = true
			r.endAt = time.Now().UnixNano()
			w.finish(c, r, pb.Outcome_OUTCOME_CANCELLED)
		}
	case *pb.Goodbye:
		f.refusal(m.GetReason())
		return gnet.Close
	}
	return gnet.None
}

func (w *worker) acked(seq uint64) {
	f := w.f
	if sent := w.sent[seq%uint64(len(w.sent))]; sent > 0 {
		f.rtt.Add(time.Now().UnixNano() - sent)
	}
	f.hbAcked.Add(1)
}

func (w *worker) run(id string) *run {
	for _, r := range w.runs {
		if r.id == id {
			return r
		}
	}
	return nil
}

func (w *worker) forget(id string) {
	for i, r := range w.runs {
		if r.id == id {
			w.runs = append(w.runs[:i], w.runs[i+1:]...)
			return
		}
	}
}

func (w *worker) onDue(c gnet.Conn, bits uint32) {
	if bits&dueHeartbeat != 0 && w.joined {
		w.heartbeat(c)
	}
	if bits&dueLog != 0 {
		w.pumpAll(c)
	}
	if bits&dueFinish != 0 {
		now := time.Now().UnixNano()
		for _, r := range w.runs {
			if !r.exited && r.endAt <= now {
				r.exited = true
				w.maybeFinish(c, r)
			}
		}
	}
}

func (w *worker) heartbeat(c gnet.Conn) {
	w.seq++
	now := time.Now()
	w.sent[w.seq%uint64(len(w.sent))] = now.UnixNano()
	hb := &pb.Heartbeat{Seq: w.seq, SentUnixMs: now.UnixMilli()}
	for _, r := range w.runs {
		acked := r.logAcked
		if r.st != nil {
			acked = r.st.acked * LineBytes
		}
		hb.Runs = append(hb.Runs, &pb.RunRef{TaskId: r.id, Attempt: r.attempt, Fence: r.fence, AckedLogOffset: acked})
	}
	if every := uint64(w.f.cfg.GPUSampleEvery); every > 0 && w.f.cfg.GPUs > 0 && (w.gpuSeq == 0 || w.seq-w.gpuSeq >= every) {
		w.gpuSeq = w.seq
		hb.Gpus = w.gpuSample()
	}
	w.send(c, hb)
	w.f.hbSent.Add(1)
}

// gpuSample is a sample of the worker's GPUs as the real worker sends it:
// values changing with every sample, the (empty) foreign list and problem
// in the first of a connection only.
func (w *worker) gpuSample() *pb.GpuSample {
	n := w.f.cfg.GPUs
	s := &pb.GpuSample{UtilPct: make([]uint32, n), MemoryUsedMb: make([]uint32, n)}
	for i := range n {
		s.UtilPct[i] = uint32((w.seq + uint64(i)*13) % 101)
		s.MemoryUsedMb[i] = uint32(20000 + w.seq%1000 + uint64(i))
	}
	if g := w.gen.Load(); g != w.gpuGen {
		w.gpuGen = g
		empty := ""
		s.Foreign, s.Problem = &pb.ForeignList{}, &empty
	}
	return s
}

func (w *worker) execute(c gnet.Conn, m *pb.ExecuteTask) {
	f := w.f
	now := time.Now().UnixNano()
	f.execs.Add(1)
	storeMin(&f.firstExec, now)
	if f.cfg.RecordExec {
		f.mu.Lock()
		f.execLog = append(f.execLog, Exec{TaskID: m.GetTaskId(), AtNs: now})
		f.mu.Unlock()
	}
	if old := w.run(m.GetTaskId()); old != nil {
		if old.attempt == m.GetAttempt() && old.fence == m.GetFence() {
			return // duplicate
		}
		w.forget(old.id)
	}
	if why := w.overcommit(m); why != "" {
		f.overcommits.Add(1)
		f.mu.Lock()
		f.lastOver = why
		f.mu.Unlock()
	}
	runFor := f.cfg.RunFor
	if argv := m.GetArgv(); f.cfg.RunForArgv && len(argv) == 2 && argv[0] == "sleep" {
		if s, err := strconv.ParseFloat(argv[1], 64); err == nil && s >= 0 {
			runFor = time.Duration(s * float64(time.Second))
		}
	}
	r := &run{id: m.GetTaskId(), attempt: m.GetAttempt(), fence: m.GetFence(), token: m.GetRunToken(), started: now,
		endAt: now + int64(runFor), gpus: m.GetGpuIndices(), share: int(math.Round(m.GetGpuFraction() * 100)), shareMB: m.GetGpuMemoryMb()}
	w.runs = append(w.runs, r)
	w.send(c, &pb.TaskStarted{TaskId: r.id, Attempt: r.attempt, Fence: r.fence, Pid: int32(1000 + w.idx%30000),
		StartedUnixMs: now / 1e6})
	if f.cfg.LogStream {
		// A streamer runs until the master cancels it or the fleet stops.
		r.st = &stream{tmpl: lineTemplate(w.id, r.id)}
		w.pumpAll(c)
		return
	}
	if f.cfg.LogLines > 0 {
		out := make([]byte, 0, 64*f.cfg.LogLines)
		for i := 0; i < f.cfg.LogLines; i++ {
			if i%2 == 1 {
				out = fmt.Appendf(out, "RLSCHED_METRIC {\"step\": %d, \"episode_reward\": %d.5}\n", i, i)
			} else {
				out = fmt.Appendf(out, "episode %d reward %d.5\n", i, i)
			}
		}
		r.logTotal = uint64(len(out))
		w.send(c, &pb.LogData{TaskId: r.id, Attempt: r.attempt, Fence: r.fence, Offset: 0, Data: out})
	}
	if runFor <= 0 {
		r.exited = true
		w.maybeFinish(c, r)
		return
	}
	f.tm.add(r.endAt, w, w.gen.Load(), dueFinish, 0)
}

// maybeFinish sends TaskFinished once the run exited and all output is acked.
func (w *worker) maybeFinish(c gnet.Conn, r *run) {
	if !r.exited || r.finSent || r.logAcked < r.logTotal {
		return
	}
	w.finish(c, r, pb.Outcome_OUTCOME_EXITED)
}

func (w *worker) finish(c gnet.Conn, r *run, outcome pb.Outcome) {
	r.finSent = true
	w.send(c, &pb.TaskFinished{TaskId: r.id, Attempt: r.attempt, Fence: r.fence, ExitCode: 0,
		DurationMs: (r.endAt - r.started) / 1e6, Outcome: outcome, LogBytes: r.logTotal})
}

// labels are the worker's Hello labels: Config.Labels and the automatic
// ones of the real worker (core.LabelGPUType and the others). A fleet
// that sets none of GPUName, CPUMillis and Labels sends none, as the
// fleets of the scenarios before labels did, so their figures stay
// comparable.
func (w *worker) labels() map[string]string {
	c := w.f.cfg
	if c.GPUName == "" && c.CPUMillis == 0 && len(c.Labels) == 0 {
		return nil
	}
	out := map[string]string{core.LabelGPUCount: strconv.Itoa(c.GPUs), core.LabelHost: "sim-" + strconv.Itoa(w.idx)}
	if c.GPUName != "" && c.GPUs > 0 {
		out[core.LabelGPUType] = c.GPUName
	}
	if c.CPUMillis > 0 {
		out[core.LabelCPUCount] = strconv.FormatInt(c.CPUMillis/1000, 10)
	}
	maps.Copy(out, c.Labels)
	return out
}

// overcommit says how m would over-commit one of the worker's GPUs, given
// the runs it holds and has not reported ended ("" when it would not).
func (w *worker) overcommit(m *pb.ExecuteTask) string {
	share := int(math.Round(m.GetGpuFraction() * 100))
	for _, g := range m.GetGpuIndices() {
		used, mem, whole, n := 0, int64(0), false, 0
		for _, r := range w.runs {
			if r.finSent || r.id == m.GetTaskId() || !slices.Contains(r.gpus, g) {
				continue
			}
			n++
			whole = whole || r.share == 0
			used += r.share
			mem += r.shareMB
		}
		switch {
		case share == 0 && n > 0:
			return fmt.Sprintf("%s GPU %d: run %s asks for it whole while %d runs hold it", w.id, g, m.GetTaskId(), n)
		case whole:
			return fmt.Sprintf("%s GPU %d: run %s asks for a share of it while a run holds it whole", w.id, g, m.GetTaskId())
		case used+share > 100:
			return fmt.Sprintf("%s GPU %d: run %s's share of %.2f on top of the %.2f its %d runs hold", w.id, g, m.GetTaskId(), float64(share)/100, float64(used)/100, n)
		case share > 0 && mem+m.GetGpuMemoryMb() > w.f.cfg.GPUMemoryMB:
			return fmt.Sprintf("%s GPU %d: run %s's %d MiB on top of the %d MiB its %d runs hold, over the GPU's %d MiB", w.id, g, m.GetTaskId(), m.GetGpuMemoryMb(), mem, n, w.f.cfg.GPUMemoryMB)
		}
	}
	return ""
}
