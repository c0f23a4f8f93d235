package dispatch

import (
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/rs/zerolog"

	"github.com/rlsched/rlsched/codec/pb"
	"github.com/rlsched/rlsched/core"
	"github.com/rlsched/rlsched/dispatch/gpuwatch"
)

// The master's side of "GPUs watched" (docs/gpus.md). A worker's heartbeat
// carries a GpuSample when it took one: the connection's event loop merges
// it into the session's gpuState (before heartbeats are coalesced, so a
// changed foreign list is never lost with a replaced heartbeat), and the
// session's shard applies dispatch/gpuwatch's rules to it at the heartbeat:
// series points, gpu_foreign and idle_gpu warnings, idle cancels. The
// planner reads the GPUs with a foreign process (registry.snapshot).

// Wire values of a GpuSample for "not reported".
const (
	wireUtilUnknown = 255
	wireMemUnknown  = 1<<32 - 1
)

// Bounds on what a worker's sample may make the master keep.
const (
	maxForeignPerGPU  = 16
	maxForeignUser    = 64
	maxForeignCommand = 200
	maxGPUProblem     = 600
	// maxRunUsage bounds the runs' entries kept from one sample; a worker
	// runs far fewer.
	maxRunUsage = 1024
)

// gpuState is a session's last GPU sample, positional over the Hello's
// GPUs (session.gpuIdx). It is the session's (session.gpuSt), changed in
// place under session.gpuMu by the connection's event loop, so a sample
// allocates nothing here: at 15,000 workers every byte allocated per
// heartbeat is paid again by the GC marking the whole heap. A foreign list
// is replaced, never changed, so readers may keep its slices.
type gpuState struct {
	seq     uint64 // counts the samples of the session, from 1; 0: none yet
	at      time.Time
	util    []int   // percent, gpuwatch.Unknown when not reported
	mem     []int64 // MiB, likewise
	foreign [][]gpuwatch.Proc
	problem string
	// runs is the runs' use of cores and memory at the sample (issue 26),
	// its array reused from sample to sample.
	runs []runUsage
	// foreignGen counts the foreign lists the session received, so the
	// shard tells a new list from the same one without comparing them.
	foreignGen uint64
	// util and mem live here for up to inlineGPUs GPUs.
	utilBuf [inlineGPUs]int
	memBuf  [inlineGPUs]int64
}

// runUsage is a run's entry of a sample (pb.RunUsage).
type runUsage struct {
	id  string
	use gpuwatch.Usage
}

// inlineGPUs is how many GPUs a gpuState holds without an allocation.
const inlineGPUs = 8

// takeGPUSample merges a heartbeat's sample into sess's state. Only on the
// connection's event loop (the state's one writer).
func (sess *session) takeGPUSample(g *pb.GpuSample, now time.Time) {
	n := len(sess.gpuIdx)
	var foreign [][]gpuwatch.Proc // built before the lock: the rare case
	if g.Foreign != nil {
		foreign = make([][]gpuwatch.Proc, n)
		for _, p := range g.Foreign.Procs {
			pos := slices.Index(sess.gpuIdx, int(p.GpuIndex))
			if pos < 0 || len(foreign[pos]) >= maxForeignPerGPU {
				continue
			}
			mem := int64(gpuwatch.Unknown)
			if p.MemoryMb != wireMemUnknown {
				mem = int64(p.MemoryMb)
			}
			foreign[pos] = append(foreign[pos], gpuwatch.Proc{PID: int(p.Pid),
				User: clip(p.User, maxForeignUser), Command: clip(p.Command, maxForeignCommand), MemoryMB: mem})
		}
	}
	sess.gpuMu.Lock()
	defer sess.gpuMu.Unlock()
	st := &sess.gpuSt
	if st.util == nil {
		if n <= inlineGPUs {
			st.util, st.mem = st.utilBuf[:n], st.memBuf[:n]
		} else {
			st.util, st.mem = make([]int, n), make([]int64, n)
		}
	}
	st.seq++
	st.at = now
	for i := range n {
		st.util[i], st.mem[i] = gpuwatch.Unknown, gpuwatch.Unknown
		if i < len(g.UtilPct) && g.UtilPct[i] <= 100 {
			st.util[i] = int(g.UtilPct[i])
		}
		if i < len(g.MemoryUsedMb) && g.MemoryUsedMb[i] != wireMemUnknown {
			st.mem[i] = int64(g.MemoryUsedMb[i])
		}
	}
	if g.Foreign != nil {
		st.foreignGen++
		st.foreign = foreign
	}
	if g.Problem != nil && *g.Problem != st.problem {
		st.problem = clip(*g.Problem, maxGPUProblem)
	}
	st.runs = st.runs[:0]
	for _, u := range g.Runs[:min(len(g.Runs), maxRunUsage)] {
		st.runs = append(st.runs, runUsage{id: u.TaskId,
			use: gpuwatch.Usage{CPUMillicores: int64(u.CpuMillicores), MemoryMB: int64(min(u.MemoryMb, 1<<53)), Known: true}})
	}
}

// sampleLocked is st as dispatch/gpuwatch reads it, in dst's array when it
// fits. Caller holds session.gpuMu.
func (st *gpuState) sampleLocked(idx []int, dst []gpuwatch.GPU) gpuwatch.Sample {
	if cap(dst) < len(idx) {
		dst = make([]gpuwatch.GPU, len(idx))
	}
	s := gpuwatch.Sample{GPUs: dst[:len(idx)]}
	for i, index := range idx {
		g := gpuwatch.GPU{Index: index, UtilPct: st.util[i], MemoryUsedMB: st.mem[i]}
		if i < len(st.foreign) {
			g.Foreign = st.foreign[i]
		}
		s.GPUs[i] = g
	}
	return s
}

// foreignGPUs are the indices of sess's GPUs with a foreign process.
func (sess *session) foreignGPUs() []int {
	sess.gpuMu.Lock()
	defer sess.gpuMu.Unlock()
	var out []int
	for i, procs := range sess.gpuSt.foreign {
		if len(procs) > 0 && i < len(sess.gpuIdx) {
			out = append(out, sess.gpuIdx[i])
		}
	}
	return out
}

// gpuRules applies dispatch/gpuwatch's rules to the workers' samples. Its
// state is each session's (session.watch and the fields beside it, which
// only the session's shard touches); it holds the rules' settings and what
// it tells of their outcome: series points to the log pipe's metric queue,
// warnings, idle cancels, a changed worker view, a wake of the scheduler.
// It never blocks the shard (each of those is queued or goes off the
// shard's goroutine) and never cancels a run but through the cancel path.
// observe runs only on the session's shard goroutine.
type gpuRules struct {
	cfg    gpuwatch.Config
	points metricQueue
	warn   func(id, code, msg string) // off the caller's goroutine
	cancel func(id, why string)       // cancelIdle: off the caller's goroutine
	// sessions applies INTERACTIVE_IDLE_MINUTES to the running runs of a
	// sample (terminal.go); nil: none.
	sessions func(sess *session, running []gpuwatch.Run)
	// changed reports a worker's new view; wake wakes the scheduler.
	changed func(workerID string)
	wake    func()
	log     zerolog.Logger
}

// metricQueue is where the series points go (logpipe.Writer.QueueMetrics:
// it never blocks on the store).
type metricQueue interface {
	QueueMetrics(id string, pts []core.MetricPoint)
}

// observe applies the rules to sess's newest sample, when there is one it
// has not seen. Only on the session's shard goroutine (onHeartbeat).
func (g *gpuRules) observe(sess *session) {
	sess.gpuMu.Lock()
	cur := &sess.gpuSt
	if cur.seq == 0 || cur.seq == sess.gpuSeen {
		sess.gpuMu.Unlock()
		return
	}
	sess.gpuSeen = cur.seq
	smp := cur.sampleLocked(sess.gpuIdx, sess.gpuScratch)
	st := gpuState{at: cur.at, foreign: cur.foreign, problem: cur.problem, foreignGen: cur.foreignGen} // what is read below
	sess.useScratch = append(sess.useScratch[:0], cur.runs...)
	sess.gpuMu.Unlock()
	sess.gpuScratch = smp.GPUs
	if sess.watch == nil {
		sess.watch = gpuwatch.NewWatch(g.cfg)
	}
	var running []gpuwatch.Run
	if runs := sess.runs.Load(); runs != nil {
		for id, rr := range *runs {
			use := usageOf(sess.useScratch, id)
			if len(rr.gpus) == 0 && !use.Known || rr.fence.Load() == 0 || !rr.holds() {
				continue
			}
			// RUNNING only: a run that has not started yet may sit at 0 %
			// while it loads. A view unknown (an adopted run) counts as
			// running: the worker lists it as its own.
			if v := rr.view.Load(); v != nil && v.Status != core.StatusRunning {
				continue
			}
			running = append(running, gpuwatch.Run{ID: id, GPUs: rr.gpus, Usage: use})
		}
	}
	out := &sess.gpuOut
	sess.watch.Observe(st.at, smp, running, out)
	// Series points: step is the sample's time in Unix seconds, so the
	// points of a run's attempts and of masters taking over line up.
	step := st.at.Unix()
	for i := 0; i < len(out.Points); {
		j := i
		for j < len(out.Points) && out.Points[j].Run == out.Points[i].Run {
			j++
		}
		pts := make([]core.MetricPoint, 0, j-i)
		for _, p := range out.Points[i:j] {
			pts = append(pts, core.MetricPoint{Step: step, Name: p.Name, Value: p.Value})
		}
		g.points.QueueMetrics(out.Points[i].Run, pts)
		i = j
	}
	for _, w := range out.Warnings {
		g.log.Warn().Str("task", w.Run).Str("worker", sess.workerID).Str("code", w.Code).Msg(w.Message)
		g.warn(w.Run, w.Code, w.Message)
	}
	for _, c := range out.Cancels {
		g.cancel(c.Run, c.Error)
	}
	if g.sessions != nil {
		g.sessions(sess, running)
	}
	// The worker's view (OnWorker, /topic/workers) changes with every
	// sample's values, but 15,000 workers each sampling every 10 s would
	// publish 1,500 views a second: it is published when what a person
	// acts on changed (foreign processes, the problem, idle runs); the
	// values are read with GET /api/workers. Nothing here allocates unless
	// one of those changed.
	// A session's first sample, with nothing foreign, changes nothing a
	// person sees: 15,000 workers joining must not publish 15,000 views
	// and wake the scheduler as often. The scheduler is woken when a
	// foreign process left (a GPU may take a queued run now).
	changed, wake := st.problem != sess.gpuProblem, false
	sess.gpuProblem = st.problem
	if st.foreignGen != sess.gpuForeignGen {
		sess.gpuForeignGen = st.foreignGen
		has := false
		for _, procs := range st.foreign {
			has = has || len(procs) > 0
		}
		changed = changed || has || sess.gpuHadForeign
		wake = sess.gpuHadForeign
		sess.gpuHadForeign = has
	}
	var prevIdle map[string]time.Time
	if p := sess.idle.Load(); p != nil {
		prevIdle = *p
	}
	nIdle, sameIdle := 0, true
	for _, r := range running {
		since, ok := sess.watch.IdleSince(r.ID)
		if !ok {
			continue
		}
		nIdle++
		if was, seen := prevIdle[r.ID]; !seen || !was.Equal(since) {
			sameIdle = false
		}
	}
	if !sameIdle || nIdle != len(prevIdle) {
		idle := make(map[string]time.Time, nIdle)
		for _, r := range running {
			if since, ok := sess.watch.IdleSince(r.ID); ok {
				idle[r.ID] = since
			}
		}
		sess.idle.Store(&idle)
		changed = true
	}
	if changed {
		g.changed(sess.workerID)
	}
	if wake {
		g.wake()
	}
}

// usageOf is run id's entry in a sample's runs; Known is false when it
// has none.
func usageOf(runs []runUsage, id string) gpuwatch.Usage {
	for i := range runs {
		if runs[i].id == id {
			return runs[i].use
		}
	}
	return gpuwatch.Usage{}
}

// fillGPUs adds sess's last sample to gpus (a worker's view, in Hello's
// order) and returns the worker's GPU problem.
func (sess *session) fillGPUs(gpus []core.GPU) string {
	sess.gpuMu.Lock()
	defer sess.gpuMu.Unlock()
	st := &sess.gpuSt
	if st.seq == 0 {
		return ""
	}
	var idle map[string]time.Time
	if p := sess.idle.Load(); p != nil {
		idle = *p
	}
	for i := range gpus {
		pos := slices.Index(sess.gpuIdx, gpus[i].Index)
		if pos < 0 {
			continue
		}
		if u := st.util[pos]; u >= 0 {
			gpus[i].Utilization = &u
		}
		if mb := st.mem[pos]; mb >= 0 {
			gpus[i].MemoryUsedMB = &mb
		}
		if pos < len(st.foreign) {
			for _, p := range st.foreign[pos] {
				fp := core.ForeignProc{PID: p.PID, User: p.User, Command: p.Command}
				if p.MemoryMB >= 0 {
					mb := p.MemoryMB
					fp.MemoryMB = &mb
				}
				gpus[i].Foreign = append(gpus[i].Foreign, fp)
			}
		}
		if since, ok := idle[gpus[i].TaskID]; ok && gpus[i].TaskID != "" {
			gpus[i].IdleSince = &since
		}
	}
	return st.problem
}

// clip makes s valid UTF-8 of at most n bytes, cut on a character boundary.
func clip(s string, n int) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
