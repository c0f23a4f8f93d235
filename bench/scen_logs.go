package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rlsched/rlsched/bench/fleet"
	"github.com/rlsched/rlsched/bench/internal/echo"
)

// logPhase is one streaming phase against one master.
type logPhase struct {
	name        string
	offered     float64 // lines/s offered in total (0: as fast as the windows allow)
	lines       float64 // lines/s: lines written in the phase / (phase + drain), all acked
	window      float64 // lines/s acked in the last 80% of the phase
	subLines    float64 // lines/s the subscribers read
	p50, p99    time.Duration
	samples     uint64
	cpu         time.Duration
	measured    time.Duration // the last 80% of the phase
	busy, gaps  int64
	lagged      int64
	drained     bool
	frames      int64
	subErr      string
	fenced, bad int64
	loadCPU     time.Duration // the simulated workers' processes, same window
	subCPU      time.Duration // this process: the WebSocket subscribers
	drain       time.Duration // from the end of the phase until every line was acked
	inFlight    int64         // lines written and not acked at the end of the phase
	ackFrames   int64         // LogAck frames the workers received in the last 80%
}

func (p *logPhase) mbps() float64 { return p.lines * fleet.LineBytes / 1e6 }

// logsQueues are the log queues of the rlsched master the logs scenario
// measures, one master each, in this order.
var logsQueues = flag.String("logs-queue", "ring,chan", "logs scenario: the rlsched master's log queues to measure side by side in one run (ring, chan or ring,chan; the first is the headline)")

// logTarget is a master under the logs load.
type logTarget struct {
	name   string
	queue  string // the rlsched master's log queue (RLSCHED_LOG_QUEUE); "" for the naive one
	phases []*logPhase
	hwm    int64
	files  string // what the file check found
}

// runLogs streams lines from W simulated workers (one dispatched run each)
// into the master's log files while S WebSocket clients follow S of the
// runs live. Two phases: as fast as the credit windows allow (throughput),
// then paced at half that rate (latency below saturation).
func runLogs(e *env) (*report, error) {
	w, s := pick(e, 100, 1000), pick(e, 10, 100)
	d := pick(e, 2*time.Second, 10*time.Second)
	rep := &report{size: fmt.Sprintf("%s simulated workers (one streaming run each), %d WebSocket subscribers, %d-byte lines, %v a phase",
		human(float64(w)), s, fleet.LineBytes, d)}

	// Raw loopback: the same bytes (64 KiB blocks of lines, the worker's
	// largest frame) over as many connections, read and discarded.
	block := bytes.Repeat(bytes.Repeat([]byte("x"), fleet.LineBytes-1), 1)
	block = append(block, '\n')
	block = bytes.Repeat(block, (64<<10)/fleet.LineBytes)
	// With many connections the kernel's TCP memory (tcp_mem) can throttle
	// every socket, so the loopback is measured with W connections and with
	// at most 64, and the better figure is the ceiling.
	type rawRun struct {
		conns int
		bps   float64
	}
	var raws []rawRun
	raw := 0.0
	for _, n := range []int{w, min(w, 64)} {
		if len(raws) > 0 && n == raws[0].conns {
			break
		}
		bps, err := echo.Stream(n, block, pick(e, 500*time.Millisecond, 3*time.Second))
		if err != nil {
			return nil, fmt.Errorf("raw loopback: %w", err)
		}
		e.logf("raw loopback TCP, %d connections: %.0f MB/s (%.0f lines/s)", n, bps/1e6, bps/fleet.LineBytes)
		raws = append(raws, rawRun{n, bps})
		raw = max(raw, bps)
	}
	rawLines := raw / fleet.LineBytes

	// The write path's ceiling: the same bytes in the same 64 KiB blocks
	// into as many files as there are runs, from as many goroutines as the
	// master has log writers, each appending to its own files in turn, with
	// nothing else to do. The master's files cannot take more than this.
	writers := min(4, runtime.GOMAXPROCS(0)) // logpipe.WriterConfig's default
	wdir, err := e.dir("logs-writepath", false)
	if err != nil {
		return nil, err
	}
	wbps, err := writePath(wdir, w, writers, block, pick(e, 500*time.Millisecond, 3*time.Second))
	_ = os.RemoveAll(wdir)
	if err != nil {
		return nil, fmt.Errorf("write path reference: %w", err)
	}
	e.logf("write path: %d files from %d goroutines in 64 KiB appends: %.0f MB/s (%.0f lines/s)", w, writers, wbps/1e6, wbps/fleet.LineBytes)
	wLines := wbps / fleet.LineBytes

	// The master's queue between event loops and writers, each variant
	// measured in this run (-logs-queue); the first is the headline.
	var rls []*logTarget
	for _, q := range strings.Split(*logsQueues, ",") {
		if q = strings.TrimSpace(q); q != "ring" && q != "chan" {
			return nil, fmt.Errorf("-logs-queue: unknown queue %q: use ring, chan or ring,chan", q)
		}
		tg, err := e.logsRlsched(w, s, d, q)
		if err != nil {
			return nil, fmt.Errorf("rlsched master (%s): %w", q, err)
		}
		rls = append(rls, tg)
	}
	rl := rls[0]
	nv, err := e.logsNaive(w, s, d)
	if err != nil {
		return nil, fmt.Errorf("naive master: %w", err)
	}
	top, paced := rl.phases[0], rl.phases[1]
	nvMax := nv.phases[0]

	t := rep.newTable("Output streamed into files (lines acked by the master = written to LOG_DIR/<id>.log)",
		"master", "phase", "offered lines/s", "lines/s", "MB/s", "lines/s acked in the last 80% of the phase", "ratio to raw loopback", "ratio to naive",
		"subscribers read lines/s", "p50 write→read", "p99 write→read", "master CPU", "simulated workers' CPU", "subscribers' CPU (harness)", "busy / gap acks", "lagged", "in flight at the end → drained in")
	for _, tg := range append(slices.Clone(rls), nv) {
		for _, p := range tg.phases {
			off := "max (window-limited)"
			if p.offered > 0 {
				off = human(p.offered)
			}
			cpu := fmt.Sprintf("%.2f s in %.1f s (%.2f cores, %s a line)", p.cpu.Seconds(), p.measured.Seconds(),
				p.cpu.Seconds()/p.measured.Seconds(), nsPerLine(p))
			t.add(tg.name, p.name, off, human(p.lines), human(p.mbps()), human(p.window), ratioStr(p.lines, rawLines), ratioStr(p.lines, nvMax.lines),
				human(p.subLines), ms(p.p50), ms(p.p99), cpu, fmt.Sprintf("%.2f cores", p.loadCPU.Seconds()/p.measured.Seconds()),
				fmt.Sprintf("%.2f cores", p.subCPU.Seconds()/p.measured.Seconds()), fmt.Sprintf("%d / %d", p.busy, p.gaps), fmt.Sprint(p.lagged), drainStr(p))
		}
	}
	mt := rep.newTable("Master process", "master", "peak RSS", "log files")
	for _, tg := range rls {
		mt.add(tg.name, mib(tg.hwm), tg.files)
	}
	mt.add(nv.name, mib(nv.hwm), nv.files)
	if len(rls) > 1 {
		qt := rep.newTable("The queue between the event loops and the log writers, measured side by side in this run (-logs-queue; a queue named twice is measured in rounds, in the order given)",
			"queue", "max lines/s", "master CPU a line at max", "paced: p50 / p99 write→read", "paced: master CPU a line")
		byQueue := map[string][]float64{}
		var order []string
		for _, tg := range rls {
			mx, pc := tg.phases[0], tg.phases[1]
			qt.add(tg.queue, human(mx.lines), nsPerLine(mx), ms(pc.p50)+" / "+ms(pc.p99), nsPerLine(pc))
			if byQueue[tg.queue] == nil {
				order = append(order, tg.queue)
			}
			byQueue[tg.queue] = append(byQueue[tg.queue], mx.lines)
		}
		if len(order) > 1 {
			base := median(byQueue[order[0]])
			for _, q := range order {
				m := median(byQueue[q])
				rep.note("Log queue %s: median max %s lines/s over %d round(s), %.2f× %s's.", q, human(m), len(byQueue[q]), m/base, order[0])
			}
		}
	}
	ref := rep.newTable("References measured in the same run", "reference", "value")
	for _, r := range raws {
		ref.add(fmt.Sprintf("raw loopback TCP, %d connections streaming the same lines in 64 KiB writes into a read-and-discard server", r.conns),
			fmt.Sprintf("%s MB/s = %s lines/s", human(r.bps/1e6), human(r.bps/fleet.LineBytes)))
	}
	if b, err := os.ReadFile("/proc/sys/net/ipv4/tcp_mem"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 3 {
			hi, _ := strconv.ParseInt(f[2], 10, 64)
			ref.add("kernel TCP memory for all sockets (net.ipv4.tcp_mem, pressure … maximum)", fmt.Sprintf("%s … %s", mib(mustInt(f[1])*4096), mib(hi*4096)))
			if int64(w)*4<<20 > hi*4096 {
				rep.note("%s connections × 4 MiB in flight each (%s) would exceed the kernel's TCP memory maximum (%s): the loopback sockets themselves are throttled (memory pressure), which shows in the raw reference with %d connections; the master's granted window (log_window) keeps the workers well below it.",
					human(float64(w)), mib(int64(w)*4<<20), mib(hi*4096), w)
			}
		}
	}
	ref.add(fmt.Sprintf("write path: the same lines in 64 KiB appends into %s files (one per run, kept open) from %d goroutines (the master's log writers), nothing else running in that process", human(float64(w)), writers),
		fmt.Sprintf("%s MB/s = %s lines/s", human(wbps/1e6), human(wLines)))
	ref.add("naive master (goroutine per connection, one mutex, one write(2) per line into files, one WebSocket frame per line)",
		fmt.Sprintf("%s lines/s (%s MB/s)", human(nvMax.lines), human(nvMax.mbps())))

	rep.goal(top.lines >= 1e6 && w >= 1000 && s >= 100, "≥ 1,000,000 lines/s (≥ 120 MB/s) from 1,000 workers into files with 100 live subscribers: %s lines/s (%s MB/s) from %s workers with %d subscribers",
		human(top.lines), human(top.mbps()), human(float64(w)), s)
	// Issue 33 restated the goal from 50% to 25%: the bytes also go into
	// files, and the write path, measured beside, binds before the loopback.
	rep.goal(top.lines >= 0.25*rawLines, "≥ 25%% of raw loopback into files (issue 33, restated from 50%%: the write path, measured beside, binds first): %.0f%% (%s of %s MB/s, the better of the loopback figures); %.0f%% of the write path measured beside (%s MB/s)",
		100*top.lines/rawLines, human(top.mbps()), human(raw/1e6), 100*top.lines/wLines, human(wbps/1e6))
	rep.goal(paced.p99 <= 50*time.Millisecond && paced.samples > 0, "p99 worker-to-subscriber ≤ 50 ms at half of the measured maximum: p99 %s at %s lines/s offered (half of %s; %d lines timed)",
		ms(paced.p99), human(paced.offered), human(top.lines), paced.samples)
	// The bounds of a miss, from the phases' own CPU columns: what the
	// cores ran, and what the master's CPU a line allows on one core.
	cores := func(p *logPhase) float64 {
		return (p.cpu + p.loadCPU + p.subCPU).Seconds() / max(p.measured.Seconds(), 1e-9)
	}
	if perLine := top.cpuPerLine().Seconds(); top.lines < 0.25*rawLines && perLine > 0 {
		rep.note("The bound of the rate, measured: at max the master, the simulated workers and the subscribers ran %.2f of the machine's %d cores (%.2f, %.2f, %.2f), and the master took %s a line: on a core of its own that allows %s lines/s, %.0f%% of raw loopback; 25%% needs at most %s a line.",
			cores(top), runtime.NumCPU(), top.cpu.Seconds()/top.measured.Seconds(), top.loadCPU.Seconds()/top.measured.Seconds(), top.subCPU.Seconds()/top.measured.Seconds(),
			us(top.cpuPerLine()), human(1/perLine), 100/perLine/rawLines, us(time.Duration(1e9/(0.25*rawLines))))
	}
	if paced.p99 > 50*time.Millisecond && paced.cpuPerLine() > 0 && top.cpuPerLine() > 0 {
		rep.note("The bound of the paced latency, measured: at half the maximum the cores ran %.2f of %d (the master %.2f: its CPU a line, %s, is %.1f× that at max, its batches being smaller), so the paced phase is not below the machine's saturation; its lines wait in the cores' queue as at max (p99 %s there).",
			cores(paced), runtime.NumCPU(), paced.cpu.Seconds()/paced.measured.Seconds(), nsPerLine(paced),
			float64(paced.cpuPerLine())/float64(top.cpuPerLine()), ms(top.p99))
	}
	rep.goal(top.lines >= 5*nvMax.lines, "≥ 5× naive: %.2f× (%s vs %s lines/s)", top.lines/nvMax.lines, human(top.lines), human(nvMax.lines))
	rep.note("Lines/s: every line the simulated runs wrote during the phase, divided by the time from the phase's start until the master had acked the last of them (LogAck comes after write(2) into LOG_DIR/<id>.log), so a backlog left in flight at the end counts against it; acks come in bursts, so the ack rate of the last 80%% of the phase is shown beside it. CPU columns cover that last 80%%. Subscribers' lines/s and latency come from the WebSocket frames they decoded. Each line carries the time the simulated worker first wrote it to its socket (%d bytes a line); resends after a busy or gap ack keep it, so pauses count in the latency.", fleet.LineBytes)
	rep.note("The simulated workers send as the real worker does (worker/session.go): LogData frames of at most 64 KiB, at most the window the master grants (log_window in HelloAck and LogAck: its 64 MiB log queue shared by the connections sending output, 64 KiB–4 MiB) unacked per connection, resend from the acked offset after busy/gap with its 20 ms → 1 s jittered pause; they share the machine's cores with the master, the subscribers and the harness.")
	for _, tg := range append(slices.Clone(rls), nv) {
		for _, p := range tg.phases {
			if !p.drained && tg != nv {
				rep.note("%s, %s: not every line was acked within %s after the phase", tg.name, p.name, ms(p.drain))
			}
			if p.subErr != "" {
				rep.note("%s, %s: subscriber error: %s", tg.name, p.name, p.subErr)
			}
			if p.fenced > 0 || p.bad > 0 {
				rep.note("%s, %s: %d fenced and %d failed acks", tg.name, p.name, p.fenced, p.bad)
			}
		}
	}
	// Where the master's time goes, for whoever works on logpipe/dispatch.
	if top.busy > 0 {
		rep.note("Busy refusals: %s connections share the master's 64 MiB log queue through the granted window; the queue still filled %d times in the max phase (%d frames behind them came back as gaps), and each refused run pauses 20 ms doubling to 1 s. Acks: %s lines/s in the last 80%% of the phase, %s lines/s over the phase and its drain; the last %s MB took %s to be acked. The master used %.2f cores meanwhile.",
			human(float64(w)), top.busy, top.gaps, human(top.window), human(top.lines),
			human(float64(top.inFlight)*fleet.LineBytes/1e6), ms(top.drain), top.cpu.Seconds()/top.measured.Seconds())
	}
	rep.note("Where the master's CPU goes in the paced phase (-profile, session 2, after the changes in the last section): write/writev of the batches ≈ 40%%, protobuf Unmarshal copying each LogData payload ≈ 10%%, one socket write per ack ≈ 9%%, GC. Rerun with -profile DIR for current figures (DIR/logs-max-ring.cpu.pprof).")
	rep.result = result{metric: "lines_per_s", value: top.lines, unit: "lines/s", ref: "raw_loopback_tcp", refValue: rawLines}
	return rep, nil
}

func mustInt(s string) int64 {
	v, _ := strconv.ParseInt(s, 10, 64)
	return v
}

func drainStr(p *logPhase) string {
	v := fmt.Sprintf("%s MB → %s", human(float64(p.inFlight)*fleet.LineBytes/1e6), ms(p.drain))
	if !p.drained {
		v += " (not drained)"
	}
	return v
}

func samplePids(pids []int) []procSample {
	out := make([]procSample, len(pids))
	for i, pid := range pids {
		out[i] = sample(pid)
	}
	return out
}

func nsPerLine(p *logPhase) string {
	c := p.cpuPerLine()
	if c <= 0 {
		return "–"
	}
	return us(c)
}

// cpuPerLine is the master's CPU a line acked in the measured window; 0
// when none was.
func (p *logPhase) cpuPerLine() time.Duration {
	n := p.window * p.measured.Seconds()
	if n <= 0 {
		return 0
	}
	return time.Duration(float64(p.cpu) / n)
}

// logRig is what the logs and artifacts scenarios measure on: a master, w
// simulated workers that each run one `yes` run (preloaded into the store)
// and stream its log, and /ws subscribers to some of those runs.
type logRig struct {
	dataDir string
	m       *rlMaster
	tok     string
	g       *fleetGroup
	ids     []string // the runs the workers started, one each
	subs    *logSubs
	stops   []func() // of what was started, in that order
}

// startLogRig starts a logRig named name, its master with env added, and
// subscribes to the first s runs. On error what it started is stopped.
func (e *env) startLogRig(name string, env []string, w, s int) (_ *logRig, err error) {
	r := &logRig{}
	defer func() {
		if err != nil {
			r.stop()
		}
	}()
	if r.dataDir, err = e.dir(name, false); err != nil {
		return nil, err
	}
	if r.m, err = e.startMaster(masterConf{name: name, dataDir: r.dataDir, env: env}); err != nil {
		return nil, err
	}
	r.stops = append(r.stops, func() { r.m.stop() })
	if r.tok, err = r.m.login(); err != nil {
		return nil, err
	}
	if r.g, err = e.startLogFleet(r.m.rpc, w); err != nil {
		return nil, err
	}
	r.stops = append(r.stops, r.g.stop)
	if j, err := r.g.connect("", 60*time.Second); err != nil || j < int64(w) {
		return nil, fmt.Errorf("only %d of %d workers joined: %v", j, w, err)
	}
	if err := preloadQueue(filepath.Join(r.dataDir, "rlsched.db"), w, []string{"/bin/sh", "-c", "yes"}); err != nil {
		return nil, err
	}
	if r.ids, err = r.g.waitExecs(w, 60*time.Second); err != nil {
		return nil, err
	}
	wsURL := strings.Replace(r.m.url, "http://", "ws://", 1) + "/ws?token=" + r.tok
	if r.subs, err = dialLogSubs(wsURL, r.ids[:min(s, len(r.ids))]); err != nil {
		return nil, err
	}
	r.stops = append(r.stops, r.subs.close)
	return r, nil
}

// stop stops what was started, the last first: the subscribers, the
// workers, the master.
func (r *logRig) stop() {
	for i := len(r.stops) - 1; i >= 0; i-- {
		r.stops[i]()
	}
}

// startLogFleet starts simulated workers whose runs stream (fleet.Config.LogStream).
func (e *env) startLogFleet(addr string, n int) (*fleetGroup, error) {
	k := (n + perChild - 1) / perChild
	g := &fleetGroup{n: n}
	for i := 0; i < k; i++ {
		cn := n / k
		if i < n%k {
			cn++
		}
		first := i*(n/k) + min(i, n%k)
		cfg := fleet.Config{Addr: addr, N: cn, First: first, Prefix: "lw", LocalIP: e.localIP(), Token: benchJoinToken,
			Slots: 1, RunFor: time.Hour, RecordExec: true, LogStream: true}
		c, err := e.startChild("fleet", cfg)
		if err != nil {
			g.stop()
			return nil, err
		}
		g.kids = append(g.kids, c)
	}
	return g, nil
}

// logStats sums the log counters of every child (fleet.Stats.Log*).
func (g *fleetGroup) logStats() (*fleet.Stats, error) {
	var mu sync.Mutex
	out := &fleet.Stats{}
	err := g.each(func(_ int, c *child) error {
		a, err := c.call(command{Op: "stats"})
		if err != nil || a.Stats == nil {
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		s := a.Stats
		out.Execs += s.Execs
		out.Refused += s.Refused
		if s.LastRefusal != "" {
			out.LastRefusal = s.LastRefusal
		}
		out.LogAcks += s.LogAcks
		out.LogLines += s.LogLines
		out.LogAcked += s.LogAcked
		out.LogFrames += s.LogFrames
		out.LogBusy += s.LogBusy
		out.LogGaps += s.LogGaps
		out.LogFenced += s.LogFenced
		out.LogErrors += s.LogErrors
		return nil
	})
	return out, err
}

func (g *fleetGroup) stream(rate float64, d time.Duration) error {
	return g.each(func(_ int, c *child) error {
		_, err := c.call(command{Op: "stream", Rate: rate, Timeout: d})
		return err
	})
}

// waitExecs waits until n runs were dispatched to the fleet and returns their ids.
func (g *fleetGroup) waitExecs(n int, timeout time.Duration) ([]string, error) {
	deadline := time.Now().Add(timeout)
	for {
		st, err := g.logStats()
		if err != nil {
			return nil, err
		}
		if st.Execs >= int64(n) {
			break
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("only %d of %d runs were dispatched within %v (refusals %d %s)", st.Execs, n, timeout, st.Refused, st.LastRefusal)
		}
		time.Sleep(20 * time.Millisecond)
	}
	execs, err := g.execs()
	if err != nil {
		return nil, err
	}
	ids := make([]string, 0, len(execs))
	for _, x := range execs {
		ids = append(ids, x.TaskID)
	}
	return ids, nil
}

// logPhaseRun streams for d at rate lines/s per run and measures the last
// 80% of it; then waits until every line is acked.
func (e *env) logPhaseRun(name string, g *fleetGroup, subs *logSubs, pid int, rate float64, w int, d, drainFor time.Duration) (*logPhase, error) {
	p := &logPhase{name: name, offered: rate * float64(w)}
	st0, err := g.logStats()
	if err != nil {
		return nil, err
	}
	subs.begin()
	if err := g.stream(rate, d); err != nil {
		return nil, err
	}
	began := time.Now()
	time.Sleep(d / 5)
	a, err := g.logStats()
	if err != nil {
		return nil, err
	}
	s0, sl0, f0, h0 := sample(pid), subs.lines.Load(), samplePids(g.pids()), sample(os.Getpid())
	time.Sleep(time.Until(began.Add(d)))
	b, err := g.logStats()
	if err != nil {
		return nil, err
	}
	s1, sl1, f1, h1 := sample(pid), subs.lines.Load(), samplePids(g.pids()), sample(os.Getpid())
	p.subCPU = h0.cpuTo(h1)
	for i := range f0 {
		p.loadCPU += f0[i].cpuTo(f1[i])
	}
	p.measured = s1.at.Sub(s0.at)
	if p.measured <= 0 {
		return nil, fmt.Errorf("%s: empty measuring window", name)
	}
	p.window = float64(b.LogAcked-a.LogAcked) / p.measured.Seconds()
	p.ackFrames = b.LogAcks - a.LogAcks
	p.subLines = float64(sl1-sl0) / p.measured.Seconds()
	p.cpu = s0.cpuTo(s1)
	// Drain: every line written is acked (the files hold it all). At
	// saturation each connection may have a whole credit window in flight.
	drainFrom := time.Now()
	deadline := drainFrom.Add(drainFor)
	var end *fleet.Stats
	for first := true; ; first = false {
		if end, err = g.logStats(); err != nil {
			return nil, err
		}
		if first {
			p.inFlight = end.LogLines - end.LogAcked
		}
		if end.LogAcked >= end.LogLines || time.Now().After(deadline) {
			p.drained = end.LogAcked >= end.LogLines
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	p.drain = time.Since(drainFrom)
	// Acks come in bursts (a window fills, the master catches up), so the
	// headline is every line of the phase over the time until the last one
	// was acked, not the ack rate of one stretch.
	p.lines = float64(end.LogAcked-st0.LogAcked) / time.Since(began).Seconds()
	// Let the subscribers read the tail: until their count stands still.
	for last, until := int64(-1), time.Now().Add(5*time.Second); time.Now().Before(until); time.Sleep(100 * time.Millisecond) {
		cur := subs.lines.Load()
		if cur == last {
			break
		}
		last = cur
	}
	h := subs.lat.Load()
	p.p50, p.p99, p.samples = h.QuantileDuration(0.5), h.QuantileDuration(0.99), h.Count()
	p.busy, p.gaps = end.LogBusy-st0.LogBusy, end.LogGaps-st0.LogGaps
	p.fenced, p.bad = end.LogFenced-st0.LogFenced, end.LogErrors-st0.LogErrors
	p.lagged = subs.lagged.Load()
	if v, ok := subs.firstErr.Load().(string); ok {
		p.subErr = v
	}
	e.logf("%s: %d LogAck frames received in the last 80%% of the phase (%.0f lines/s acked there)", name, p.ackFrames, p.window)
	e.logf("%s: %.0f lines/s (%.1f MB/s) acked, subscribers %.0f lines/s, p50 %v p99 %v, master CPU %v in %v, busy %d gaps %d lagged %d",
		name, p.lines, p.mbps(), p.subLines, p.p50, p.p99, p.cpu.Round(time.Millisecond), p.measured.Round(time.Millisecond), p.busy, p.gaps, p.lagged)
	return p, nil
}

func (e *env) logsRlsched(w, s int, d time.Duration, queue string) (*logTarget, error) {
	rig, err := e.startLogRig("logs-"+queue, []string{"RLSCHED_LOG_QUEUE=" + queue}, w, s)
	if err != nil {
		return nil, err
	}
	defer rig.stop()
	m, g, subs := rig.m, rig.g, rig.subs
	tg := &logTarget{name: "rlsched master (gnet → " + queue + " → batch writers → files + hub → /ws)", queue: queue}
	m.profile("logs-max-"+queue, true)
	pm, err := e.logPhaseRun("rlsched "+queue+" max", g, subs, m.pid(), 0, w, d, pick(e, 8*time.Second, 180*time.Second))
	m.profile("logs-max-"+queue, false)
	if err != nil {
		return nil, err
	}
	pm.name = "max"
	tg.phases = append(tg.phases, pm)
	rate := max(pm.lines/2/float64(w), 1)
	m.profile("logs-paced-"+queue, true)
	pp, err := e.logPhaseRun("rlsched "+queue+" paced", g, subs, m.pid(), rate, w, d, 30*time.Second)
	m.profile("logs-paced-"+queue, false)
	if err != nil {
		return nil, err
	}
	pp.name = "paced at 50% of max"
	tg.phases = append(tg.phases, pp)
	_, tg.hwm = m.mem()
	st, err := g.logStats()
	if err != nil {
		return nil, err
	}
	tg.files = checkLogFiles(filepath.Join(rig.dataDir, "logs"), rig.ids, st.LogAcked)
	return tg, nil
}

func (e *env) logsNaive(w, s int, d time.Duration) (*logTarget, error) {
	rpcPort, err := freePort()
	if err != nil {
		return nil, err
	}
	httpPort, err := freePort()
	if err != nil {
		return nil, err
	}
	logDir, err := e.dir("logs-naive", false)
	if err != nil {
		return nil, err
	}
	c, err := e.startChild("naive", naiveConfig{RPC: fmt.Sprintf("127.0.0.1:%d", rpcPort),
		HTTP: fmt.Sprintf("127.0.0.1:%d", httpPort), Token: benchJoinToken, Interval: 10 * time.Second, LogDir: logDir})
	if err != nil {
		return nil, err
	}
	defer c.stop()
	g, err := e.startLogFleet(fmt.Sprintf("127.0.0.1:%d", rpcPort), w)
	if err != nil {
		return nil, err
	}
	defer g.stop()
	if j, err := g.connect("", 60*time.Second); err != nil || j < int64(w) {
		return nil, fmt.Errorf("only %d of %d workers joined: %v", j, w, err)
	}
	base := fmt.Sprintf("http://127.0.0.1:%d", httpPort)
	if _, err := newTarget(base, fmt.Sprintf("/submit?n=%d", w), "", nil, 1).post(); err != nil {
		return nil, err
	}
	ids, err := g.waitExecs(w, 60*time.Second)
	if err != nil {
		return nil, err
	}
	subs, err := dialLogSubs(fmt.Sprintf("ws://127.0.0.1:%d/ws", httpPort), ids[:min(s, len(ids))])
	if err != nil {
		return nil, err
	}
	defer subs.close()
	tg := &logTarget{name: "naive master (goroutine per connection, one mutex, write(2) per line)"}
	// The last phase: a bounded drain (the file check counts acked lines only).
	p, err := e.logPhaseRun("naive max", g, subs, c.pid(), 0, w, d, pick(e, 2*time.Second, 5*time.Second))
	if err != nil {
		return nil, err
	}
	p.name = "max"
	tg.phases = append(tg.phases, p)
	_, tg.hwm, _ = procMem(c.pid())
	st, err := g.logStats()
	if err != nil {
		return nil, err
	}
	tg.files = checkLogFiles(logDir, ids, st.LogAcked)
	return tg, nil
}

// checkLogFiles compares what the log files hold with the lines acked: the
// master must never ack a byte that is not in its file.
func checkLogFiles(dir string, ids []string, ackedLines int64) string {
	var bodyBytes int64
	files := 0
	for _, id := range ids {
		fi, err := os.Stat(filepath.Join(dir, id+".log"))
		if err != nil {
			continue
		}
		files++
		bodyBytes += fi.Size()
	}
	want := ackedLines * fleet.LineBytes
	verdict := "ok"
	if bodyBytes < want {
		verdict = "SHORT: acked bytes missing"
	}
	return fmt.Sprintf("%d files, %s MB on disk for %s MB acked (%s; headers included)", files, human(float64(bodyBytes)/1e6), human(float64(want)/1e6), verdict)
}

// writePath appends block to files files (one per run) from g goroutines,
// each taking its own files in turn, for d, and returns the bytes/s: the
// ceiling of the master's log files on this disk, without the network,
// the protocol or the fan-out.
func writePath(dir string, files, g int, block []byte, d time.Duration) (float64, error) {
	g = max(min(g, files), 1)
	fs := make([]*os.File, files)
	defer func() {
		for _, f := range fs {
			if f != nil {
				_ = f.Close()
			}
		}
	}()
	for i := range fs {
		f, err := os.OpenFile(filepath.Join(dir, fmt.Sprintf("%d.log", i)), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
		if err != nil {
			return 0, err
		}
		fs[i] = f
	}
	var total atomic.Int64
	var firstErr atomic.Value
	var wg sync.WaitGroup
	began := time.Now()
	until := began.Add(d)
	for k := range g {
		wg.Go(func() {
			n := int64(0)
			defer func() { total.Add(n) }()
			for i := k; ; i += g {
				if i >= files {
					i = k
				}
				if _, err := fs[i].Write(block); err != nil {
					firstErr.CompareAndSwap(nil, err)
					return
				}
				n += int64(len(block))
				if n%(16*int64(len(block))) == 0 && time.Now().After(until) {
					return
				}
			}
		})
	}
	wg.Wait()
	if err, ok := firstErr.Load().(error); ok {
		return 0, err
	}
	return float64(total.Load()) / time.Since(began).Seconds(), nil
}
