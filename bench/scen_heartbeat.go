package main

import (
	"bytes"
	"fmt"
	"os"
	"time"
)

// hbRun is one target at one heartbeat interval.
type hbRun struct {
	target      string
	interval    time.Duration
	n           int
	joined      int64
	connectTime time.Duration
	baseRSS     int64
	rss, hwm    int64
	cpu         time.Duration
	user, sys   time.Duration
	window      time.Duration
	acked       int64
	p50, p99    time.Duration
	refused     int64
	silentClose int   // "silent for longer than the heartbeat TTL" closes in the master's log
	churn       int64 // connections the target closed during the window
}

func (r *hbRun) cpuPerHB() time.Duration {
	if r.acked == 0 {
		return 0
	}
	return r.cpu / time.Duration(r.acked)
}

func (r *hbRun) rssPerWorker() float64 {
	if r.joined == 0 {
		return 0
	}
	return float64(r.rss-r.baseRSS) / float64(r.joined)
}

// runHeartbeat connects N simulated workers to each target and measures,
// over a steady-state window, the target's CPU per acknowledged heartbeat
// and its resident memory per connected worker.
func runHeartbeat(e *env) (*report, error) {
	n := pick(e, 1000, 15000)
	intervals := pick(e, []time.Duration{time.Second}, []time.Duration{10 * time.Second, time.Second})
	rep := &report{size: fmt.Sprintf("%s workers", human(float64(n)))}
	var runs []*hbRun
	byKey := map[string]*hbRun{}
	for _, iv := range intervals {
		for _, target := range []string{"rlsched", targetGPUsIdle, targetGPUs, "naive", "echo"} {
			r, err := e.heartbeatRun(target, n, iv)
			if err != nil {
				return nil, fmt.Errorf("%s at %v: %w", target, iv, err)
			}
			runs = append(runs, r)
			byKey[fmt.Sprintf("%s/%v", target, iv)] = r
		}
	}
	allocIdle, bytesIdle, err := heartbeatAllocs(mustDir(e, "hballoc"), false, pick(e, 20000, 100000))
	if err != nil {
		return nil, fmt.Errorf("allocation probe: %w", err)
	}
	allocRun, bytesRun, err := heartbeatAllocs(mustDir(e, "hballoc"), true, pick(e, 20000, 100000))
	if err != nil {
		return nil, fmt.Errorf("allocation probe: %w", err)
	}

	t := rep.newTable("Steady state", "target", "interval", "joined at end of window", "closed by target in window", "join time", "heartbeats/s",
		"CPU per heartbeat (user + sys)", "ratio to naive", "RSS per worker", "peak RSS", "ack RTT p50", "p99")
	for _, r := range runs {
		naive := byKey[fmt.Sprintf("naive/%v", r.interval)]
		t.add(targetName(r.target), r.interval.String(), fmt.Sprintf("%d / %d", r.joined, r.n), fmt.Sprint(r.churn), ms(r.connectTime),
			human(float64(r.acked)/r.window.Seconds()),
			fmt.Sprintf("%s (%s + %s)", us(r.cpuPerHB()), us(r.user/time.Duration(max(r.acked, 1))), us(r.sys/time.Duration(max(r.acked, 1)))),
			ratioStr(float64(r.cpuPerHB()), float64(naive.cpuPerHB())),
			fmt.Sprintf("%.1f KiB", r.rssPerWorker()/1024), mib(r.hwm), ms(r.p50), ms(r.p99))
	}
	p := rep.newTable("Projection to 100,000 workers (from the rows above: base RSS + per-worker RSS × 100,000; heartbeats/s × CPU per heartbeat)",
		"target", "interval", "RSS", "CPU (cores)")
	for _, r := range runs {
		if r.target == "echo" {
			continue
		}
		hbps := 100000 / r.interval.Seconds()
		p.add(targetName(r.target), r.interval.String(), mib(r.baseRSS+int64(r.rssPerWorker()*100000)),
			fmt.Sprintf("%.2f", hbps*r.cpuPerHB().Seconds()))
	}
	a := rep.newTable("Master allocations per heartbeat (in-process probe: dispatch.Master over loopback, one worker, runtime.MemStats deltas; also `go test ./bench -bench MasterHeartbeat`)",
		"heartbeat", "allocs", "bytes")
	a.add("no runs", fmt.Sprintf("%.1f", allocIdle), fmt.Sprintf("%.0f", bytesIdle))
	a.add("one run (lease renewed)", fmt.Sprintf("%.1f", allocRun), fmt.Sprintf("%.0f", bytesRun))

	for _, r := range runs {
		if r.silentClose > 0 {
			rep.note("rlsched master every %v: %d log lines \"closing a session silent for longer than the heartbeat TTL\" (TTL %v); %d of %d workers joined at the end of the window, ack RTT p99 %s, peak RSS %s. Work queues without bound behind the shard goroutines; a session's lastSeen is set when its Hello is read, but onHello (which sends HelloAck, after which the worker starts beating) runs on the shard later, so once that queue is longer than the heartbeat TTL the reaper closes new sessions before their first heartbeat, and the redials feed the queue. The reaper also closes and logs the same session again at every pass until the shard has processed the close (it does not skip sessions already closed), hence more lines than sessions",
				r.interval, r.silentClose, 3*r.interval, r.joined, r.n, ms(r.p99), mib(r.hwm))
		}
	}
	main := byKey[fmt.Sprintf("rlsched/%v", intervals[0])]
	fast := byKey["rlsched/1s"]
	naiveFast := byKey["naive/1s"]
	echoFast := byKey["echo/1s"]
	if e.quick {
		rep.note("-quick connects 1,000 workers at the 1 s interval only; the 15,000-worker goal and the 10 s interval are measured at full size: go run ./bench -scenario heartbeat")
	} else {
		rep.goal(main.joined >= 15000, "15,000 workers on one master: %d of %d joined", main.joined, main.n)
	}
	rep.goal(main.rssPerWorker() <= 20*1024, "≤ 20 KiB RSS per worker: %.1f KiB (naive %.1f KiB)", main.rssPerWorker()/1024,
		byKey[fmt.Sprintf("naive/%v", intervals[0])].rssPerWorker()/1024)
	// Issue 33 retired the 2 µs goal (below the kernel's own cost for a
	// request/reply here) for a ratio to the echo measured beside it.
	toEcho := func(r *hbRun) string { return ratioStr(float64(r.cpuPerHB()), float64(echoFast.cpuPerHB())) }
	hbMet := echoFast.cpuPerHB() > 0 && float64(fast.cpuPerHB()) <= 1.1*float64(echoFast.cpuPerHB())
	rep.goal(hbMet, "CPU per heartbeat ≤ 1.1× the bare gnet echo at 1 s intervals: %s× (%s against the echo's %s; naive master %s = %s×)",
		toEcho(fast), us(fast.cpuPerHB()), us(echoFast.cpuPerHB()), us(naiveFast.cpuPerHB()), toEcho(naiveFast))
	for _, iv := range intervals {
		base, with := byKey[fmt.Sprintf("%s/%v", targetGPUsIdle, iv)], byKey[fmt.Sprintf("%s/%v", targetGPUs, iv)]
		rep.goal(float64(with.cpuPerHB()) <= 1.05*float64(base.cpuPerHB()), "GPU samples (8 GPUs, every 10 s) add ≤ 5%% CPU per heartbeat at %v: %s with, %s without (workers of 8 GPUs both; ratio %s)",
			iv, us(with.cpuPerHB()), us(base.cpuPerHB()), ratioStr(float64(with.cpuPerHB()), float64(base.cpuPerHB())))
	}
	if !hbMet {
		rep.note("The bound of the heartbeat's CPU, measured: the naive master, the same protocol with its connection's goroutine woken for every heartbeat, pays %s× the echo (%s against %s): what a design with one goroutine wake-up a heartbeat beside the echo's read and write reaches here. The rlsched master pays that wake-up (its event loop hands each heartbeat to a shard goroutine, because the lease renewal and presence refresh may wait on Redis) and one eventfd round besides (the ack goes back to the loop through gnet's eventfd): bench/changes.md, \"Heartbeat CPU: the bound\"; it reached %s×. 1.1× needs the idle heartbeat answered on the event loop.",
			toEcho(naiveFast), us(naiveFast.cpuPerHB()), us(echoFast.cpuPerHB()), toEcho(fast))
	}
	rep.note("CPU per heartbeat counts all of the target's CPU over the window (total from /proc/PID/task/*/schedstat in ns, the user/system split from /proc/PID/stat), divided by the heartbeats the workers saw acknowledged; idle work (the reaper's scan, the scheduler's tick) is included. The bare echo server does one read and one write per heartbeat and nothing else: it is the floor the kernel sets for one small request/reply on loopback here.")
	rep.note("RSS per worker = (VmRSS after the window − VmRSS before the workers connected) / workers joined. Join time: from the first dial until every worker had its HelloAck (or the time waited, when some never did).")
	rep.note("Simulated workers redial a connection the target closes, with the real agent's backoff (100 ms doubling to 5 s); \"closed by target in window\" counts such closes during the measured window.")
	rep.result = result{metric: "cpu_us_per_heartbeat", value: float64(fast.cpuPerHB()) / 1e3, unit: "us",
		ref: "bare_echo", refValue: float64(echoFast.cpuPerHB()) / 1e3}
	return rep, nil
}

func mustDir(e *env, name string) string {
	d, err := e.dir(name, false)
	if err != nil {
		return e.tmp
	}
	return d
}

// targetGPUs is the rlsched master with workers of 8 GPUs each sending a
// GPU sample every 10 s (issue 16: the sampling may add ≤ 5 % CPU per
// heartbeat).
// targetGPUsIdle is the same without samples, what targetGPUs is
// compared with.
const (
	targetGPUs     = "rlsched+gpus"
	targetGPUsIdle = "rlsched+gpus-unsampled"
)

func targetName(t string) string {
	switch t {
	case "rlsched":
		return "rlsched master"
	case targetGPUs:
		return "rlsched master, 8 GPUs a worker sampled every 10 s"
	case targetGPUsIdle:
		return "rlsched master, 8 GPUs a worker, no samples"
	case "naive":
		return "naive master"
	case "echo":
		return "bare gnet echo (raw TCP)"
	}
	return t
}

func us(d time.Duration) string {
	if d >= time.Millisecond {
		return ms(d)
	}
	return fmt.Sprintf("%.2f µs", float64(d)/1e3)
}

// target is a running server under test: an rlsched master (m set), the
// naive master, or the bare echo server.
type target struct {
	addr string
	pid  int
	stop func()
	m    *rlMaster
}

// profile starts or stops a CPU profile of an rlsched master (-profile).
func (t *target) profile(label string, start bool) {
	if t.m != nil {
		t.m.profile(label, start)
	}
}

// startTarget starts a server of kind kind with heartbeat interval iv on
// rpcPort (0: a free port); an rlsched master keeps its data in dataDir
// ("" = a new directory).
func (e *env) startTarget(kind, name string, iv time.Duration, rpcPort int, dataDir string) (*target, error) {
	var err error
	if rpcPort == 0 {
		if rpcPort, err = freePort(); err != nil {
			return nil, err
		}
	}
	addr := fmt.Sprintf("127.0.0.1:%d", rpcPort)
	switch kind {
	case "rlsched":
		if dataDir == "" {
			if dataDir, err = e.dir(name, false); err != nil {
				return nil, err
			}
		}
		m, err := e.startMaster(masterConf{name: name, dataDir: dataDir, hbTTL: int(3 * iv / time.Second), rpcPort: rpcPort})
		if err != nil {
			return nil, err
		}
		return &target{addr: m.rpc, pid: m.pid(), stop: func() { _ = m.stop() }, m: m}, nil
	case "naive":
		hp, err := freePort()
		if err != nil {
			return nil, err
		}
		c, err := e.startChild("naive", naiveConfig{RPC: addr, HTTP: fmt.Sprintf("127.0.0.1:%d", hp), Token: benchJoinToken, Interval: iv})
		if err != nil {
			return nil, err
		}
		return &target{addr: addr, pid: c.pid(), stop: c.stop}, nil
	case "echo":
		c, err := e.startChild("echo", map[string]string{"Addr": addr})
		if err != nil {
			return nil, err
		}
		return &target{addr: addr, pid: c.pid(), stop: c.stop}, nil
	}
	return nil, fmt.Errorf("unknown target %q", kind)
}

func (e *env) heartbeatRun(kind string, n int, iv time.Duration) (*hbRun, error) {
	targetKind, gpus, every := kind, 0, 0
	switch kind {
	case targetGPUs:
		targetKind, gpus, every = "rlsched", 8, max(int(10*time.Second/iv), 1)
	case targetGPUsIdle:
		targetKind, gpus = "rlsched", 8
	}
	tg, err := e.startTarget(targetKind, "heartbeat", iv, 0, "")
	if err != nil {
		return nil, err
	}
	defer tg.stop()
	addr, pid := tg.addr, tg.pid
	r := &hbRun{target: kind, interval: iv, n: n}
	time.Sleep(300 * time.Millisecond)
	r.baseRSS, _, _ = procMem(pid)
	g, err := e.startFleet(addr, benchJoinToken, fleetOpts{N: n, Prefix: "hb", Slots: 1, Raw: kind == "echo", RawEvery: iv, Reconnect: true,
		GPUs: gpus, GPUSampleEvery: every})
	if err != nil {
		return nil, err
	}
	defer g.stop()
	began := time.Now()
	r.joined, err = g.connect("", pick(e, 20*time.Second, 90*time.Second))
	if err != nil {
		return nil, err
	}
	r.connectTime = time.Since(began)
	// Every worker has beaten at least once after one interval (phases are
	// spread uniformly over it).
	time.Sleep(iv + pick(e, 500*time.Millisecond, 2*time.Second))
	r.window = pick(e, 3*time.Second, map[bool]time.Duration{true: 30 * time.Second, false: 10 * time.Second}[iv >= 10*time.Second])
	if err := g.reset(); err != nil {
		return nil, err
	}
	label := fmt.Sprintf("heartbeat-%s-%v", kind, iv)
	tg.profile(label, true)
	s0 := sample(pid)
	time.Sleep(r.window)
	s1 := sample(pid)
	tg.profile(label, false)
	st, err := g.stats()
	if err != nil {
		return nil, err
	}
	r.window = s1.at.Sub(s0.at)
	r.cpu, r.user, r.sys = s0.cpuTo(s1), s1.user-s0.user, s1.sys-s0.sys
	r.acked, r.refused, r.churn, r.joined = st.HBAcked, st.Refused, st.Closed, st.Joined
	r.p50, r.p99 = st.rtt.QuantileDuration(0.5), st.rtt.QuantileDuration(0.99)
	r.rss, r.hwm, _ = procMem(pid)
	if tg.m != nil {
		if b, err := os.ReadFile(tg.m.logPath); err == nil {
			r.silentClose = bytes.Count(b, []byte("silent for longer than the heartbeat TTL"))
		}
	}
	e.logf("heartbeat %s every %v: %d/%d joined in %v, %d acked in %v, CPU %v (%v/hb), RSS +%.1f KiB/worker, rtt p99 %v",
		kind, iv, r.joined, n, r.connectTime.Round(time.Millisecond), r.acked, r.window.Round(time.Millisecond), r.cpu,
		r.cpuPerHB(), r.rssPerWorker()/1024, r.p99)
	if r.joined < int64(n) || r.churn > 0 {
		e.logf("  %d of %d joined at the end of the window; %d connections closed by the target during it, %d sessions closed as silent in all (dial errors %d, refusals %d %s)",
			r.joined, n, r.churn, r.silentClose, st.DialErrors, st.Refused, st.LastRefusal)
	}
	return r, nil
}
